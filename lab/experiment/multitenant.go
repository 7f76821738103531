package experiment

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// MultiOptions configure the multitenant experiment (Slacker Fig. 13b).
type MultiOptions struct {
	Common
	// Tenants on the source server; default 5. Each holds Size/Tenants bytes
	// and gets Workload.Rate/Tenants arrivals per second; tenant 1 moves.
	Tenants int
	// SetpointMs is the PID's setpoint on the servers' latency (the worst
	// tenant's window mean); default 3 × the baseline server-wide mean.
	SetpointMs float64
}

// TenantLatency is one tenant's mean latency during the migration.
type TenantLatency struct {
	Name          string  `json:"name"`
	Moved         bool    `json:"moved"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
}

// MultiRun is one loop's migration of the moving tenant.
type MultiRun struct {
	Loop                  string          `json:"loop"`                     // Variant.Label
	ServerMeanLatencyMs   float64         `json:"server_mean_latency_ms"`   // every tenant's transactions during the migration
	ServerStddevLatencyMs float64         `json:"server_stddev_latency_ms"` //
	MigrationSeconds      float64         `json:"migration_seconds"`
	MeanRateMBs           float64         `json:"mean_rate_mb_s"`
	Tenants               []TenantLatency `json:"tenants"`
	WritesAcknowledged    int64           `json:"writes_acknowledged"` // the moved tenant's, checked row by row on its new owner
}

// MultiResult is `sluice bench multitenant --json`.
type MultiResult struct {
	SetpointMs              float64 `json:"setpoint_ms"`
	BaselineServerLatencyMs float64 `json:"baseline_server_mean_latency_ms"`
	MultiRun                        // the base loop's
	// Variants are Common.Variants' migrations, in order; each starts
	// from the same layout (the moving tenant back on the first server).
	Variants []MultiRun `json:"variants,omitempty"`
}

// Multitenant loads Tenants tenants on server 0, runs a workload on each,
// and moves one to server 1 under the PID, whose process variable is the
// worst latency window among all tenants on both servers; with Variants it
// moves the tenant back, unpaced and without load, and again under each.
// It reports the server-wide mean latency (all tenants' transactions)
// against the setpoint. Writes series.csv, summary.json, report.md and
// multitenant.png (multitenant-LOOP.png for the variants) into o.Out.
func Multitenant(ctx context.Context, bed *testbed.Bed, o MultiOptions) (MultiResult, error) {
	var res MultiResult
	if err := o.defaults(); err != nil {
		return res, err
	}
	if o.Tenants == 0 {
		o.Tenants = 5
	}
	if o.Tenants < 2 || o.Tenants > 15 {
		return res, fmt.Errorf("experiment: %d tenants: want 2..15", o.Tenants)
	}
	started := time.Now()
	say := o.Progress
	var tns []testbed.Tenant
	for i := range o.Tenants {
		t, err := bed.CreateTenant(ctx, 0, fmt.Sprintf("tenant%d", i+1), o.Size/int64(o.Tenants), o.Seed+uint64(i)+1)
		if err != nil {
			return res, err
		}
		tns = append(tns, t)
	}
	wc := o.Workload
	wc.Rate /= float64(o.Tenants)
	base, err := multiBaseline(ctx, tns, wc, o.BaselineFor, o.Seed+50, say)
	if err != nil {
		return res, err
	}
	res.BaselineServerLatencyMs = round(base.Mean, 2)
	if o.SetpointMs == 0 {
		o.SetpointMs = round(3*base.Mean, 1)
	}
	res.SetpointMs = o.SetpointMs
	say("baseline: server-wide mean latency %.1f ms ± %.1f (%d tenants, %.0f transactions/s each); setpoint %.1f ms",
		base.Mean, base.Std, o.Tenants, wc.Rate, o.SetpointMs)
	var trials []Labeled
	for k, v := range o.loops() {
		if k > 0 {
			say("moving %s back to %s (unpaced, no load) for the next loop", tns[0].Name, bed.Servers[0].Name)
			if _, err := bed.Migrate(ctx, tns[0], 0, agentclient.StartMigration{}, nil); err != nil {
				return res, err
			}
		}
		run, t, err := multiRun(ctx, bed, &o, tns, wc, v)
		if err != nil {
			return res, err
		}
		if len(o.Variants) > 0 {
			t.Name += "-" + run.Loop
		}
		trials = append(trials, t)
		if k == 0 {
			res.MultiRun = run
		} else {
			res.Variants = append(res.Variants, run)
		}
	}
	return res, writeMulti(&o, bed, res, base, trials, wc, started)
}

// multiRun moves tns[0] to server 1 under loop v while every tenant's
// workload runs, and returns its figures and its trial.
func multiRun(ctx context.Context, bed *testbed.Bed, o *MultiOptions, tns []testbed.Tenant, wc workload.Config, v Variant) (MultiRun, Labeled, error) {
	run := MultiRun{Loop: v.Label()}
	var bgs []Background
	for i, t := range tns[1:] {
		w := wc
		w.Seed = o.Seed + 100 + uint64(i)
		bgs = append(bgs, Background{Tenant: t, Workload: w})
	}
	o.Progress("migrating %s to %s under the PID (%s) while %d other tenants run", tns[0].Name, bed.Servers[1].Name, run.Loop, len(bgs))
	w0 := wc
	w0.Seed = o.Seed + 10
	r, err := Trial{Bed: bed, Tenant: tns[0], To: 1, Workload: w0, Warmup: o.Warmup, Others: bgs, TargetCPUs: o.TargetCPUs, Progress: o.Progress,
		ClientLatency: v.ClientLatency, Migration: o.pidRequest(v, o.SetpointMs)}.Run(ctx)
	if err != nil {
		return run, Labeled{}, err
	}
	secs := r.MigEnd - r.MigStart
	run.MigrationSeconds = round(secs, 1)
	run.MeanRateMBs = round(float64(r.MovedBytes())/1e6/secs, 2)
	all := r.Latencies(r.MigStart, r.MigEnd)
	run.Tenants = append(run.Tenants, TenantLatency{Name: tns[0].Name, Moved: true, MeanLatencyMs: round(Describe(all).Mean, 2)})
	for i := range bgs {
		l := r.OtherLatencies(i, r.MigStart, r.MigEnd)
		all = append(all, l...)
		run.Tenants = append(run.Tenants, TenantLatency{Name: bgs[i].Tenant.Name, MeanLatencyMs: round(Describe(l).Mean, 2)})
	}
	st := Describe(all)
	run.ServerMeanLatencyMs, run.ServerStddevLatencyMs = round(st.Mean, 2), round(st.Std, 2)
	run.WritesAcknowledged = r.Check.Acknowledged
	o.Progress("server-wide mean latency %.1f ms ± %.1f during the migration (setpoint %.1f), %.1f s at %.1f MB/s",
		st.Mean, st.Std, o.SetpointMs, secs, run.MeanRateMBs)
	return run, Labeled{Name: tns[0].Name, SetpointMs: o.SetpointMs, Res: r}, nil
}

// writeMulti writes the experiment's outputs: series, handovers, starts,
// summary, a chart per loop and the report.
func writeMulti(o *MultiOptions, bed *testbed.Bed, res MultiResult, base Stats, trials []Labeled, wc workload.Config, started time.Time) error {
	for _, w := range []func() error{
		func() error { return writeSeries(o.Out, trials) },
		func() error { return writeHandovers(o.Out, trials) },
		func() error { return writeStarts(o.Out, trials) },
		func() error { return writeJSON(o.Out, SummaryFile, res) },
	} {
		if err := w(); err != nil {
			return err
		}
	}
	runs := append([]MultiRun{res.MultiRun}, res.Variants...)
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench multitenant (Slacker Fig. 13b)", o.Command, started, o.bedNote(bed)))
	fmt.Fprintf(&b, "%d tenants of %.0f MB on server-a, %.0f transactions/s each (%s keys, MPL %d); %s moves to server-b under the PID (setpoint %.1f ms on the worst tenant's 3 s window), once per loop.\n\n",
		o.Tenants, float64(o.Size)/float64(o.Tenants)/1e6, wc.Rate, wc.Distribution, wc.MPL, runs[0].Tenants[0].Name, o.SetpointMs)
	for k, run := range runs {
		name := "multitenant.png"
		if k > 0 {
			name = "multitenant-" + fileName(run.Loop) + ".png"
		}
		if err := writePNG(o.Out, name, multiChart(trials[k], run, o.SetpointMs)); err != nil {
			return err
		}
		fmt.Fprintf(&b, "Loop %s (top speed %.0f MB/s):\n\n| | mean latency ms |\n|---|---|\n| baseline, server-wide (no migration) | %s |\n| during the migration, server-wide | %s ± %s |\n",
			run.Loop, o.topSpeed(o.loops()[k])/1e6, f1(base.Mean), f1(run.ServerMeanLatencyMs), f1(run.ServerStddevLatencyMs))
		for _, t := range run.Tenants {
			m := ""
			if t.Moved {
				m = " (moved)"
			}
			fmt.Fprintf(&b, "| %s%s | %s |\n", t.Name, m, f1(t.MeanLatencyMs))
		}
		fmt.Fprintf(&b, "\nMigration: %.1f s at %.1f MB/s mean.\n\n![%s](%s)\n\n", run.MigrationSeconds, run.MeanRateMBs, run.Loop, name)
	}
	b.WriteString(ledgerLines(trials))
	return writeFile(o.Out, ReportFile, b.String())
}

// multiChart is trial t's chart with every other tenant's latency too.
func multiChart(t Labeled, run MultiRun, sp float64) chart.Chart {
	r := t.Res
	c := trialChart(t, fmt.Sprintf("multitenant: %s moves under the PID (%s) at %.1f ms while %d tenants run", run.Tenants[0].Name, run.Loop, sp, len(r.Others)))
	for i := range r.Others {
		var x, y []float64
		for _, s := range r.Others[i] {
			if s.Count > 0 {
				x, y = append(x, float64(s.T)+0.5), append(y, s.MeanMs)
			}
		}
		c.Panels[0].Series = append(c.Panels[0].Series, chart.Series{Name: run.Tenants[1+i].Name, X: x, Y: y})
	}
	c.Panels[0].Series[0].Name = run.Tenants[0].Name + " (moving)"
	return c
}

// multiBaseline is multiBaselineOnce until a measurement is Settled (the
// tenants' loads leave checkpoints and vacuums behind, and the setpoint is
// derived from it), as SettledBaseline.
func multiBaseline(ctx context.Context, tns []testbed.Tenant, wc workload.Config, d time.Duration, seed uint64, say func(string, ...any)) (Stats, error) {
	return settled(func(i int) (Stats, error) { return multiBaselineOnce(ctx, tns, wc, d, seed+uint64(i)*1000) }, "server-wide mean", say)
}

// multiBaselineOnce runs every tenant's workload at once, without a
// migration, for d (after 3 s of warm-up) and returns the server-wide
// latency figures, with the median and p90 of its 3 s windows.
func multiBaselineOnce(ctx context.Context, tns []testbed.Tenant, wc workload.Config, d time.Duration, seed uint64) (Stats, error) {
	var wg sync.WaitGroup
	runners := make([]*workload.Runner, len(tns))
	errs := make([]error, len(tns))
	for i, t := range tns {
		w := wc
		w.DSN, w.Duration, w.Seed, w.Records = t.DSN, d+3*time.Second, seed+uint64(i), t.Rows
		r, err := workload.NewRunner(w)
		if err != nil {
			return Stats{}, err
		}
		runners[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.Run(ctx, nil)
		}()
	}
	wg.Wait()
	for i := range tns {
		if errs[i] != nil {
			return Stats{}, fmt.Errorf("experiment: baseline of %s: %w", tns[i].Name, errs[i])
		}
	}
	// The server's latencies of seconds [a, b): every tenant's.
	lat := func(a, b int) []float64 {
		var all []float64
		for _, r := range runners {
			all = append(all, r.Latencies(a, b)...)
		}
		return all
	}
	st := Describe(lat(3, 1<<30))
	windows := WindowMeans(lat, 3, int((d+3*time.Second)/time.Second), 3)
	sort.Float64s(windows)
	st.Window90 = round(workload.Quantile(windows, 0.9), 2)
	st.Window50 = round(workload.Quantile(windows, 0.5), 2)
	return st, nil
}
