package commands

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

// bufferingBed is the migration-buffering experiments' plant, scaled to
// the 2-core VM (docs/results.md, buffering): a 240 MB tenant on 0.5-core
// servers whose reads share a 32 MB/s cap on the data disk (cgroup v1
// blkio) with the co-located fio, a light YCSB load on the tenant (the
// PID's signal), and a 16 MB/s top speed: the copy alone lasts about 15 s.
var bufferingBed = bed{size: "240MB", memoryMB: 768, mpl: 4, cpus: 0.5, targetCPUs: 1, tps: 20}

// Defaults of the buffering plant the shared flags do not carry.
const (
	bufferingReadMBps = "32"
	bufferingMaxRate  = "16MB/s"
)

// DefaultModelPath is the interference model trained on this machine's
// kind with `sluice lab tune classifier`, committed for the bench.
const DefaultModelPath = "lab/testdata/interference-model.json"

// registerBuffering registers the shared flags with the buffering plant's
// defaults.
func registerBuffering(fs *pflag.FlagSet, f *loopFlags, scenario string) {
	f.register(fs, scenario, bufferingBed)
	for name, def := range map[string]string{"read-mbps": bufferingReadMBps, "max-rate": bufferingMaxRate} {
		fl := fs.Lookup(name)
		fl.Value.Set(def)
		fl.DefValue = def
	}
}

func init() {
	var f loopFlags
	var model, fioFor, late, fixed string
	cmd := &cobra.Command{
		Use:   "buffering [--model FILE] [--out DIR] [--json]",
		Short: "The migration-buffering thesis's experiment: four methods against co-located fio",
		Long: `On two cgroup-limited servers whose reads share a --read-mbps cap on the data disk,
migrates a tenant whose files were dropped from the page cache, while fio (each of
its profiles: random read, file server, video server) runs --fio-for in the source
server's disk group, started with the migration and --late-start into it (the
thesis's 100 s, scaled to this machine). Methods: unthrottled, a fixed rate
(--fixed-rate), the PID on the tenant's YCSB latency (setpoint 3 × its baseline),
and interference-aware buffering (the interference controller with the trained
model --model, loaded by the agents). Each migration is normalised by the same
method's migration alone, fio's throughput beside it by fio alone. Writes
methods.csv, summary.json, report.md, buffering.png and a timeline PNG per
buffering trial to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("buffering", cmd)
			if err != nil {
				return err
			}
			usage := func(format string, args ...any) error {
				return cli.Usagef("bench buffering: "+format, args...)
			}
			abs, err := filepath.Abs(model)
			if err != nil {
				return usage("--model: %v", err)
			}
			mf, _, err := control.LoadModelFile(abs)
			if err != nil {
				return usage("--model: %v", err)
			}
			o := experiment.BufferingOptions{Common: c, Model: mf, ModelPath: model}
			if o.FioFor, err = time.ParseDuration(fioFor); err != nil || o.FioFor < 3*time.Second {
				return usage("--fio-for %q: want a duration of at least 3s", fioFor)
			}
			if o.LateStart, err = time.ParseDuration(late); err != nil || o.LateStart <= 0 {
				return usage("--late-start %q: want a positive duration", late)
			}
			if fixed != "" {
				if o.FixedRate, err = units.ParseRate(fixed); err != nil || !(o.FixedRate > 0) {
					return usage("--fixed-rate %q: want a positive rate such as 16MB/s", fixed)
				}
			}
			o.Warmup = 3 * time.Second
			bo.InterferenceModel = abs
			return runOnBed(cmd, &f, bo, func(ctx context.Context, bed *testbed.Bed) (any, error) {
				res, err := experiment.Buffering(ctx, bed, o)
				if res != nil {
					if werr := experiment.WriteBuffering(f.out, res); err == nil && werr != nil {
						err = werr
					}
				}
				return res, err
			})
		},
	}
	registerBuffering(cmd.Flags(), &f, "buffering")
	cmd.Flags().StringVar(&model, "model", DefaultModelPath, "the interference model file the agents load (from sluice lab tune classifier)")
	cmd.Flags().StringVar(&fioFor, "fio-for", "15s", "how long each fio run lasts (the thesis: 240 s)")
	cmd.Flags().StringVar(&late, "late-start", "12s", "fio's later start after the migration's (the thesis's 100 s, scaled: after the buffer filled)")
	cmd.Flags().StringVar(&fixed, "fixed-rate", "", "the fixed-rate method's rate (default: --max-rate)")
	benchCmd.AddCommand(cmd)
}

// writeModel writes the model file of res to path.
func writeModel(path string, mf control.ModelFile) error {
	b, err := mf.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tune classifier: %w", err)
	}
	return os.WriteFile(path, b, 0o644)
}
