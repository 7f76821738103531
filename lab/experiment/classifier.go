package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/lab/fio"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// ClassifierOptions configure Classifier: the thesis's training runs (§3.1,
// §4.1) on the lab's bed.
type ClassifierOptions struct {
	Common
	// Rates are the fixed migration rates, bytes/s, each run under every
	// workload; 0 = unlimited. Every workload also runs alone (its nominal).
	Rates []float64
	// RunFor is how long each run is sampled; its migration is then
	// aborted (the tenant stays on its source for the next). Default 15 s.
	RunFor time.Duration
	// Margin labels a second interfering when the co-located workload did
	// worse than its nominal by more than this share: fio's throughput
	// under (1 − Margin)·nominal, YCSB's mean latency over (1 + Margin)·
	// nominal. Default DefaultMargin.
	Margin float64
	// Profiles are the fio workloads; default fio.Profiles.
	Profiles []fio.Profile
	// Device is the data disk's /proc/diskstats name; default the bed's.
	Device string
	// TrainSeed seeds the held-out split and the folds.
	TrainSeed int64
}

// DefaultMargin is the labelling margin: the excerpt of the thesis gives
// none; its Table 2 calls 0.923–1.01 of nominal "near nominal" and the
// goal here is 0.95, so a second more than 10 % worse than nominal is
// interference, and per-second noise of a few percent is not.
const DefaultMargin = 0.10

// ClassifierSample is one labelled second.
type ClassifierSample struct {
	Workload string  `json:"workload"`
	Rate     float64 `json:"rate"` // the migration's fixed rate, bytes/s; -1 = no migration, 0 = unlimited
	T        int     `json:"t"`
	IO       control.HostIO
	// Value is the workload's figure that second (fio: bytes/s; ycsb: mean
	// latency, ms) and Nominal its nominal.
	Value       float64 `json:"value"`
	Nominal     float64 `json:"nominal"`
	Interfering bool    `json:"interfering"`
}

// ClassifierResult is Classifier's output.
type ClassifierResult struct {
	Command    string               `json:"command"`
	Started    time.Time            `json:"started"`
	Machine    string               `json:"machine"`
	Bed        string               `json:"bed"`
	Device     string               `json:"device"`
	Margin     float64              `json:"margin"`
	Samples    int                  `json:"samples"`
	Interfere  int                  `json:"interfering"`
	Nominal    map[string]float64   `json:"nominal"` // per workload
	Evaluation control.Evaluation   `json:"evaluation"`
	Model      control.ModelFile    `json:"model"`
	All        []ClassifierSample   `json:"-"`
	Runs       []ClassifierRunStats `json:"runs"`
}

// ClassifierRunStats summarise one run.
type ClassifierRunStats struct {
	Workload    string  `json:"workload"`
	Rate        float64 `json:"rate"`
	Samples     int     `json:"samples"`
	Interfering int     `json:"interfering"`
	MeanValue   float64 `json:"mean_value"`
}

// Classifier collects the interference classifier's training data on bed
// and fits it (control.Train): for each co-located workload (the fio
// profiles, and YCSB on a neighbour tenant through the proxy) a run alone
// and one per migration rate, the host's disk sampled each second and each
// second labelled by the workload's figure against its nominal (Margin).
func Classifier(ctx context.Context, bed *testbed.Bed, o ClassifierOptions) (*ClassifierResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.RunFor == 0 {
		o.RunFor = 15 * time.Second
	}
	if o.Margin == 0 {
		o.Margin = DefaultMargin
	}
	if o.Profiles == nil {
		o.Profiles = fio.Profiles
	}
	say := o.Progress
	fioDir, err := os.MkdirTemp(bed.Opt.Root, "fio-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(fioDir)
	if o.Device == "" {
		if o.Device, err = DiskName(fioDir); err != nil {
			return nil, err
		}
	}
	say("creating the migrating tenant (%.0f MB) and a YCSB neighbour", float64(o.Size)/1e6)
	t, err := bed.CreateTenant(ctx, 0, "mover", o.Size, o.Seed)
	if err != nil {
		return nil, err
	}
	nb, err := bed.CreateTenant(ctx, 0, "neighbour", 20e6, o.Seed+1)
	if err != nil {
		return nil, err
	}
	res := &ClassifierResult{Command: o.Command, Started: time.Now().UTC(), Machine: Machine(), Bed: bed.Describe(), Device: o.Device, Margin: o.Margin, Nominal: map[string]float64{}}
	rates := append([]float64{-1}, o.Rates...)
	for _, p := range o.Profiles {
		w := fio.Workload{Profile: p, Dir: fioDir, Duration: o.RunFor + 2*time.Second}
		if err := w.Prepare(ctx); err != nil {
			return nil, err
		}
		for _, r := range rates {
			say("fio %s, migration %s", p.Name, rateName(r))
			run, err := o.fioRun(ctx, bed, t, w, r)
			if err != nil {
				return nil, err
			}
			res.add(run, o.Margin)
		}
	}
	for _, r := range rates {
		say("ycsb on the neighbour, migration %s", rateName(r))
		run, err := o.ycsbRun(ctx, bed, t, nb, r)
		if err != nil {
			return nil, err
		}
		res.add(run, o.Margin)
	}
	var samples []control.Sample
	for _, s := range res.All {
		samples = append(samples, control.Sample{IO: s.IO, Interfering: s.Interfering})
		if s.Interfering {
			res.Interfere++
		}
	}
	res.Samples = len(samples)
	m, ev, err := control.Train(samples, o.TrainSeed)
	if err != nil {
		return res, err
	}
	res.Evaluation, res.Model = ev, control.NewModelFile(m, &ev)
	say("held out %d samples: trained accuracy %.3f F1 %.3f; the thesis's coefficients %.3f / %.3f",
		ev.Test, ev.Accuracy, ev.F1, ev.DefaultAccuracy, ev.DefaultF1)
	return res, nil
}

func rateName(r float64) string {
	switch {
	case r < 0:
		return "none (nominal)"
	case r == 0:
		return "unlimited"
	}
	return fmt.Sprintf("%.0f MB/s", r/1e6)
}

// classifierRun is one run's raw record: per second the workload's figure
// and the host's disk, aligned (second i of the workload = host sample T =
// i+1, the second ending then).
type classifierRun struct {
	workload string
	rate     float64
	latency  bool // the figure is a latency (worse when higher)
	values   []float64
	host     []HostSample
}

// fioRun runs fio w alone (rate < 0) or beside t's migration at rate.
func (o *ClassifierOptions) fioRun(ctx context.Context, bed *testbed.Bed, t testbed.Tenant, w fio.Workload, rate float64) (classifierRun, error) {
	from, _, err := bed.Owner(ctx, t)
	if err != nil {
		return classifierRun{}, err
	}
	if err := DropCache(ctx, bed, t); err != nil {
		return classifierRun{}, err
	}
	h := sampleHost(ctx, o.Device)
	fr := startFio(ctx, w, bed.Servers[from], 0)
	stop, err := o.migrateFor(ctx, bed, t, rate)
	if err != nil {
		fr.wait()
		h.Stop()
		return classifierRun{}, err
	}
	fres, err := fr.wait()
	host := h.Stop()
	if err2 := stop(); err == nil {
		err = err2
	}
	if err != nil {
		return classifierRun{}, err
	}
	return classifierRun{workload: w.Profile.Name, rate: rate, values: fres.PerSecond, host: host}, nil
}

// ycsbRun runs YCSB on neighbour nb alone or beside t's migration.
func (o *ClassifierOptions) ycsbRun(ctx context.Context, bed *testbed.Bed, t, nb testbed.Tenant, rate float64) (classifierRun, error) {
	if err := DropCache(ctx, bed, t); err != nil {
		return classifierRun{}, err
	}
	wc := o.Workload
	wc.DSN, wc.Records, wc.Duration = nb.DSN, nb.Rows, o.RunFor+2*time.Second
	runner, err := workload.NewRunner(wc)
	if err != nil {
		return classifierRun{}, err
	}
	h := sampleHost(ctx, o.Device)
	var secs []workload.Second
	done := make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, func(s workload.Second) { secs = append(secs, s) })
		done <- err
	}()
	stop, err := o.migrateFor(ctx, bed, t, rate)
	werr := <-done
	host := h.Stop()
	if err == nil {
		err = stop()
	}
	if err == nil && werr != nil {
		err = fmt.Errorf("experiment: ycsb: %w", werr)
	}
	if err != nil {
		return classifierRun{}, err
	}
	run := classifierRun{workload: "ycsb", rate: rate, latency: true, host: host}
	for _, s := range secs {
		v := math.NaN()
		if s.Count > 0 {
			v = s.MeanMs
		}
		run.values = append(run.values, v)
	}
	return run, nil
}

// migrateFor starts t's migration at rate after a second (rate < 0: none)
// and returns once RunFor has passed since the call; its stop aborts the
// migration and waits for it to end.
func (o *ClassifierOptions) migrateFor(ctx context.Context, bed *testbed.Bed, t testbed.Tenant, rate float64) (stop func() error, err error) {
	began := time.Now()
	none := func() error { return nil }
	if rate < 0 {
		return none, clock.Sleep(ctx, o.RunFor)
	}
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return none, err
	}
	from, id, err := bed.Owner(ctx, t)
	if err != nil {
		return none, err
	}
	src := bed.Servers[from].Client
	m, err := src.StartMigration(ctx, agentclient.StartMigration{Tenant: id, To: bed.Servers[1-from].Name, Rate: rate})
	if err != nil {
		return none, fmt.Errorf("experiment: start migration: %w", err)
	}
	if err := clock.Sleep(ctx, o.RunFor-time.Since(began)); err != nil {
		return none, err
	}
	return func() error {
		src.AbortMigration(ctx, m.ID)
		for !m.Done {
			if err := clock.Sleep(ctx, 500*time.Millisecond); err != nil {
				return err
			}
			if m, err = src.Migration(ctx, m.ID); err != nil {
				return err
			}
		}
		if m.Outcome == "committed" {
			// Finished before the abort: move the tenant back, so that
			// every run migrates from the server its neighbour is on.
			if _, err := bed.Migrate(ctx, t, from, agentclient.StartMigration{}, nil); err != nil {
				return err
			}
		}
		_, err := bed.WaitPurged(ctx, PurgeWaitMax)
		return err
	}, nil
}

// add labels run's seconds against its nominal (the first run of each
// workload is the one alone) and adds them.
func (res *ClassifierResult) add(run classifierRun, margin float64) {
	// Skip each run's first and last seconds: fio's start and stop.
	lo, hi := 1, len(run.values)-1
	nominal, ok := res.Nominal[run.workload]
	if !ok {
		nominal = medianFinite(run.values[lo:max(lo, hi)])
		res.Nominal[run.workload] = nominal
	}
	st := ClassifierRunStats{Workload: run.workload, Rate: run.rate}
	var vals []float64
	for _, h := range run.host {
		i := h.T - 1
		if i < lo || i >= hi || h.IO.Err != nil || math.IsNaN(run.values[i]) {
			continue
		}
		v := run.values[i]
		bad := v < (1-margin)*nominal
		if run.latency {
			bad = v > (1+margin)*nominal
		}
		res.All = append(res.All, ClassifierSample{Workload: run.workload, Rate: run.rate, T: h.T, IO: h.IO, Value: v, Nominal: nominal, Interfering: bad})
		st.Samples++
		if bad {
			st.Interfering++
		}
		vals = append(vals, v)
	}
	st.MeanValue = meanFinite(vals)
	res.Runs = append(res.Runs, st)
}

// medianFinite is the median of xs' numbers (NaN: none): a run's nominal,
// which a slow first second does not move.
func medianFinite(xs []float64) float64 {
	var ok []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			ok = append(ok, x)
		}
	}
	if len(ok) == 0 {
		return math.NaN()
	}
	sort.Float64s(ok)
	return workload.Quantile(ok, 0.5)
}

func meanFinite(xs []float64) float64 {
	var s float64
	var n int
	for _, x := range xs {
		if !math.IsNaN(x) {
			s += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

// WriteClassifier writes the samples (samples.csv), the summary
// (classifier.json) and the model file (model.json) to dir.
func WriteClassifier(dir string, res *ClassifierResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := strconv.FormatFloat
	err := writeCSV(filepath.Join(dir, "samples.csv"), []string{"workload", "rate", "t", "iops", "io_ticks_ms", "throughput", "util", "value", "nominal", "interfering", "p_trained", "p_default"}, func(emit func([]string)) {
		m, _ := res.Model.Model()
		for _, s := range res.All {
			emit([]string{s.Workload, f(s.Rate, 'f', 0, 64), strconv.Itoa(s.T), f(s.IO.IOPS, 'f', 1, 64), f(s.IO.IOTicks, 'f', 1, 64),
				f(s.IO.Throughput, 'f', 0, 64), f(s.IO.Util, 'f', 4, 64), f(s.Value, 'g', 6, 64), f(s.Nominal, 'g', 6, 64),
				strconv.FormatBool(s.Interfering), f(m.Prob(s.IO), 'f', 4, 64), f(control.DefaultModel().Prob(s.IO), 'f', 4, 64)})
		}
	})
	if err != nil {
		return err
	}
	if err := writeJSON(dir, "classifier.json", res); err != nil {
		return err
	}
	if err := writeFile(dir, ReportFile, classifierReport(res)); err != nil {
		return err
	}
	b, err := res.Model.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.json"), b, 0o644)
}

func classifierReport(res *ClassifierResult) string {
	var b strings.Builder
	b.WriteString(reportHeader("Interference classifier trained on this machine", res.Command, res.Started, res.Bed))
	ev := res.Evaluation
	fmt.Fprintf(&b, "Disk %s; %d labelled seconds, %d interfering (margin %.0f %% of nominal).\n\n", res.Device, res.Samples, res.Interfere, 100*res.Margin)
	fmt.Fprintf(&b, "| model | held-out accuracy | held-out F1 |\n|---|---|---|\n| trained (5-fold CV on %d: accuracy %.3f, F1 %.3f) | %.3f | %.3f |\n| the thesis's coefficients | %.3f | %.3f |\n\n",
		ev.Train, ev.CV.MeanAccuracy, ev.CV.MeanF1, ev.Accuracy, ev.F1, ev.DefaultAccuracy, ev.DefaultF1)
	fmt.Fprintf(&b, "Held out: %d samples, %d interfering.\n\n| workload | migration | seconds | interfering | mean figure |\n|---|---|---|---|---|\n", ev.Test, ev.TestInterfering)
	for _, r := range res.Runs {
		unit := "MB/s"
		v := r.MeanValue / 1e6
		if r.Workload == "ycsb" {
			unit, v = "ms", r.MeanValue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.2f %s |\n", r.Workload, rateName(r.Rate), r.Samples, r.Interfering, v, unit)
	}
	fmt.Fprintf(&b, "\nModel (standardised features %s): intercept %.3f, coefficients %v.\n", strings.Join(res.Model.Features, ", "), res.Model.Intercept, res.Model.Coef)
	return b.String()
}
