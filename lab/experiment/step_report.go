package experiment

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/chart"
)

// stepCharted is a pair's trials for its chart.
type stepCharted struct {
	pid, fixed Labeled
	pair       StepPair
	from       float64 // the start of the PID's window of equal speed, workload seconds
}

// write writes the experiment's outputs: series, handovers, starts,
// summary, a chart per pair and the report.
func (s *stepper) write(started time.Time) error {
	out := s.o.Out
	for _, w := range []func() error{
		func() error { return writeSeries(out, s.trials) },
		func() error { return writeHandovers(out, s.trials) },
		func() error { return writeStarts(out, s.trials) },
		func() error { return writeJSON(out, SummaryFile, jsonSafe(s.res)) },
	} {
		if err := w(); err != nil {
			return err
		}
	}
	for k, c := range s.charts {
		name := "step.png"
		if k > 0 {
			name = "step-" + fileName(c.pair.Loop) + ".png"
		}
		pr := c.pid.Res
		ch := stepChart(c.pid, c.fixed,
			fmt.Sprintf("step40: PID (%s) at %.1f ms, +%.0f %% arrivals at %.0f s", c.pair.Loop, s.o.SetpointMs, 100*(s.o.Factor-1), pr.StepAt),
			fmt.Sprintf("fixed %.1f MB/s (the PID's rate in the %.0f s before the step), same step %v into the migration", c.pair.FixedRateMBs, pr.StepAt-c.from, s.o.StepAfter),
			c.pair.FixedRateMBs*1e6)
		if err := writePNG(out, name, ch); err != nil {
			return err
		}
	}
	return writeFile(out, ReportFile, s.report(started))
}

// report is the experiment's report.md.
func (s *stepper) report(started time.Time) string {
	o, tn := &s.o, s.tn
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench step40 (Slacker Fig. 13a)", o.Command, started, o.bedNote(s.bed)))
	fmt.Fprintf(&b, "Tenant: %d rows, %.0f MB; workload %.0f → %.0f transactions/s %v after the migration starts (%s keys, MPL %d); baseline mean latency %.1f ± %.1f ms, and %.1f ± %.1f ms at the stepped load without a migration.\n\n",
		tn.Rows, float64(tn.Bytes)/1e6, o.Workload.Rate, o.Factor*o.Workload.Rate, o.StepAfter, o.Workload.Distribution, o.Workload.MPL, s.base.Mean, s.base.Std, s.sbase.Mean, s.sbase.Std)
	fmt.Fprintf(&b, "| loop | controller | mean latency before the step ms | after (step + %v to the handover) ms | vs setpoint %.1f ms | after, handover included ms | migration s | host steal, whole / worst %.0f s |\n|---|---|---|---|---|---|---|---|\n", o.Settle, o.SetpointMs, StealSpan.Seconds())
	pairs := append([]StepPair{s.res.StepPair}, s.res.Variants...)
	for _, p := range pairs {
		for _, x := range []struct {
			name string
			r    StepRun
		}{{"PID", p.PID}, {fmt.Sprintf("fixed %.1f MB/s", p.FixedRateMBs), p.Fixed}} {
			if x.r.Disturbed {
				x.name += " (disturbed)"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.1f | %s / %s |\n", p.Loop, x.name, f1(x.r.MeanLatencyBeforeMs), f1(x.r.MeanLatencyAfterMs), signedPct(x.r.MeanLatencyAfterMs, o.SetpointMs),
				f1(x.r.MeanLatencyAfterWithHandoverMs), x.r.MigrationSeconds, stealCell(x.r.HostStealPct, false), stealCell(x.r.HostStealPeakPct, false))
		}
	}
	b.WriteString("\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "%s: the hot copy ran %.0f s after the step with the PID, %.0f s with the fixed rate (the rest of each 'after' window is catch-up and warm); the fixed rate is the PID's mean snapshot rate over the %.0f s before the step (from the end of its slow start, at least %.0f s).\n",
			p.Loop, p.PID.CopyAfterStepS, p.Fixed.CopyAfterStepS, p.FixedRateWindowS, rateWindow)
	}
	b.WriteString(stepDisturbedLines(s.res, o.SetpointMs, o.StealLimit))
	b.WriteString("\n" + ledgerLines(s.trials) + "\n![step](step.png)\n")
	for _, p := range s.res.Variants {
		fmt.Fprintf(&b, "\n![step %s](step-%s.png)\n", p.Loop, fileName(p.Loop))
	}
	return b.String()
}

// jsonSafe maps NaN figures (no data) to -1 for JSON.
func jsonSafe(r StepResult) StepResult {
	fix := func(x *float64) {
		if math.IsNaN(*x) {
			*x = -1
		}
	}
	r.Disturbed = append([]StepAttempt(nil), r.Disturbed...)
	r.Variants = append([]StepPair(nil), r.Variants...)
	runs := []*StepRun{&r.PID, &r.Fixed}
	for i := range r.Variants {
		runs = append(runs, &r.Variants[i].PID, &r.Variants[i].Fixed)
	}
	for i := range r.Disturbed {
		runs = append(runs, &r.Disturbed[i].StepRun)
	}
	for _, s := range runs {
		fix(&s.MeanLatencyBeforeMs)
		fix(&s.MeanLatencyAfterMs)
		fix(&s.MeanLatencyAfterWithHandoverMs)
	}
	return r
}

// stepChart stacks the PID trial's chart (trialChart: two panels, three when
// its loop recorded the source's CPU quota) over the fixed trial's, whose
// title heads its first panel and whose rate panel shows the constant rate
// (bytes/s): a fixed-rate migration has no loop record.
func stepChart(pid, fixed Labeled, pidTitle, fixedTitle string, fixedRate float64) chart.Chart {
	c := trialChart(pid, pidTitle)
	f := trialChart(fixed, fixedTitle)
	r := fixed.Res
	f.Panels[1].Series = []chart.Series{{Name: "fixed rate", X: []float64{r.MigStart, r.MigEnd}, Y: []float64{fixedRate / 1e6, fixedRate / 1e6}}}
	n := len(c.Panels)
	c.Panels = append(c.Panels, f.Panels...)
	c.Panels[n].Title = f.Title
	return c
}

// signedPct is x's error against sp as a signed whole percentage, "–" when x
// is NaN (not measured).
func signedPct(x, sp float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%+.0f %%", 100*(x-sp)/sp)
}

// stepDisturbedLines lists the attempts re-run because the host's steal
// peaked above limit (a share); "" when none was.
func stepDisturbedLines(res StepResult, sp, limit float64) string {
	if len(res.Disturbed) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nRe-run because the host's steal went above %.0f %% over some %.0f s of the migration (the kept attempts are in the table above):\n\n| attempt | host steal, worst %.0f s | before the step ms | after ms | vs setpoint | migration s |\n|---|---|---|---|---|---|\n",
		100*limit, StealSpan.Seconds(), StealSpan.Seconds())
	for _, a := range res.Disturbed {
		secs := fmt.Sprintf("%.1f", a.MigrationSeconds)
		if a.Aborted {
			secs += " (aborted)"
		}
		fmt.Fprintf(&b, "| %s %s | %s | %s | %s | %s | %s |\n", a.Controller, a.Loop, stealCell(a.HostStealPeakPct, false), f1(a.MeanLatencyBeforeMs), f1(a.MeanLatencyAfterMs), signedPct(a.MeanLatencyAfterMs, sp), secs)
	}
	return b.String()
}
