package commands

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

func init() {
	var f loopFlags
	var rates, runFor, write string
	var margin float64
	var trainSeed int64
	cmd := &cobra.Command{
		Use:   "classifier [--rates LIST] [--write FILE] [--out DIR] [--json]",
		Short: "Train the interference classifier on this machine: fixed-rate migrations beside fio and YCSB",
		Long: `Collects the migration-buffering thesis's training data on the buffering bench's plant
(see sluice lab bench buffering) and fits its logistic model. For each co-located
workload — fio's random read, file-server and video-server profiles in the source
server's disk group, and YCSB on a neighbour tenant through the proxy — it runs the
workload alone (its nominal), then beside a migration at each of --rates (0 =
unlimited) for --run-for, aborting it after. The host's disk (/proc/diskstats) is
sampled every second, and a second is labelled interfering when the workload did
worse than its nominal by more than --margin (fio: throughput; YCSB: mean latency).
The model is fitted on 75 % of the samples with 5-fold cross-validation and tested
on the held-out 25 %, beside the thesis's coefficients on the same samples. Writes
samples.csv, classifier.json, report.md and model.json (the model file an agent
loads: agent config interference_model) to --out, and the model to --write too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("tune classifier", cmd)
			if err != nil {
				return err
			}
			usage := func(format string, args ...any) error {
				return cli.Usagef("tune classifier: "+format, args...)
			}
			o := experiment.ClassifierOptions{Common: c, Margin: margin, TrainSeed: trainSeed}
			for _, r := range splitList(rates) {
				v, err := units.ParseRate(r)
				if err != nil || v < 0 {
					return usage("--rates %q: want rates such as 4MB/s, 0 for unlimited", r)
				}
				o.Rates = append(o.Rates, v)
			}
			if len(o.Rates) == 0 {
				return usage("--rates: want at least one rate")
			}
			if o.RunFor, err = time.ParseDuration(runFor); err != nil || o.RunFor < 5*time.Second {
				return usage("--run-for %q: want a duration of at least 5s", runFor)
			}
			if !(margin > 0 && margin < 1) {
				return usage("--margin %v: want a share in (0, 1)", margin)
			}
			o.Warmup = time.Second
			return runOnBed(cmd, &f, bo, func(ctx context.Context, bed *testbed.Bed) (any, error) {
				res, err := experiment.Classifier(ctx, bed, o)
				if res != nil {
					// The samples are written even when the fit fails.
					if werr := experiment.WriteClassifier(f.out, res); err == nil && werr != nil {
						err = werr
					}
				}
				if err != nil {
					return res, err
				}
				if write != "" {
					if err := writeModel(write, res.Model); err != nil {
						return res, err
					}
				}
				return res, nil
			})
		},
	}
	registerBuffering(cmd.Flags(), &f, "classifier")
	cmd.Flags().StringVar(&rates, "rates", "4MB/s,8MB/s,16MB/s,0", "the migration's fixed rates, comma-separated; 0 = unlimited")
	cmd.Flags().StringVar(&runFor, "run-for", "15s", "how long each run is sampled")
	cmd.Flags().Float64Var(&margin, "margin", experiment.DefaultMargin, "a second is interfering when the workload is worse than its nominal by more than this share")
	cmd.Flags().Int64Var(&trainSeed, "train-seed", 1, "seed of the held-out split and the folds")
	cmd.Flags().StringVar(&write, "write", "", "also write the model file here (e.g. "+DefaultModelPath+")")
	tuneCmd.AddCommand(cmd)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
