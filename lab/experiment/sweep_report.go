package experiment

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/lab/chart"
	"gonum.org/v1/plot/vg"
)

// write computes the PID points' dominance and writes the sweep's outputs:
// series, handovers, starts, summary, charts and report (stopped: the error
// that ended the sweep early, nil; planned: the trials the order had).
func (s *sweeper) write(started time.Time, stopped error, planned int) error {
	res, out := &s.res, s.o.Out
	for i := range res.PID {
		res.PID[i].BeatenByFixed, res.PID[i].BeatsFixed = Dominance(res.Fixed, res.PID[i])
	}
	for i := range res.DisturbedPID { // against the kept fixed trials, as the reruns
		res.DisturbedPID[i].BeatenByFixed, res.DisturbedPID[i].BeatsFixed = Dominance(res.Fixed, res.DisturbedPID[i])
	}
	if !s.o.Load.Steady() {
		res.Swing = swingTrials(s.o.Load, s.trials)
	}
	for _, w := range []func() error{
		func() error { return writeSeries(out, s.trials) },
		func() error { return writeHandovers(out, s.trials) },
		func() error { return writeStarts(out, s.trials) },
		func() error { return writeJSON(out, SummaryFile, res) },
	} {
		if err := w(); err != nil {
			return err
		}
	}
	for _, t := range s.trials {
		if t.SetpointMs > 0 {
			if err := writePNG(out, fileName(t.Name)+".png", trialChart(t, fmt.Sprintf("%s: PID at setpoint %.1f ms", t.Name, t.SetpointMs))); err != nil {
				return err
			}
		}
	}
	if err := writePNG(out, "sweep.png", sweepChart(*res)); err != nil {
		return err
	}
	if len(res.PID) > 0 {
		if err := writePNG(out, "setpoints.png", setpointChart(*res)); err != nil {
			return err
		}
	}
	return writeFile(out, ReportFile, s.report(started, stopped, planned))
}

// fileName is name with every character a file name had better not carry
// (a loop's label may hold spaces and brackets) replaced by '_'.
func fileName(name string) string {
	return unsafeFileChars.ReplaceAllString(name, "_")
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._,=+()-]`)

// report is the sweep's report.md.
func (s *sweeper) report(started time.Time, stopped error, planned int) string {
	o, res, base, tn := &s.o, &s.res, s.base, s.tn
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench slack-sweep (Slacker Fig. 11)", o.Command, started, o.bedNote(s.bed)))
	if stopped != nil {
		fmt.Fprintf(&b, "**Stopped** before its end (%v): %d of the %d trials finished; the trial under way when it stopped is in no figure.\n\n", stopped, len(res.Fixed)+len(res.PID), planned)
	}
	fmt.Fprintf(&b, "Tenant: %d rows, %.0f MB; workload %.0f transactions/s (%s keys, MPL %d); baseline mean latency %.1f ± %.1f ms (3 s windows: p90 %.1f ms); PID top speed %.0f MB/s.\n\n",
		tn.Rows, float64(tn.Bytes)/1e6, o.Workload.Rate, o.Workload.Distribution, o.Workload.MPL, base.Mean, base.Std, base.Window90, o.topSpeed(s.loops[0])/1e6)
	b.WriteString(loopsLine(s.loops))
	if !o.Load.Steady() {
		fmt.Fprintf(&b, "Load during every migration: %s; the baseline and the warm-ups at %.0f.\n\n", o.Load.Describe(o.Workload.Rate), o.Workload.Rate)
	}
	b.WriteString("Fixed and PID trials alternate in pairs (fixed 1, PID 1, PID 2, fixed 2, fixed 3, ...), and a setpoint's loops run in reverse order on every other setpoint, so each ladder and each loop migrates both ways as often; \"before the migration\" is each trial's mean over the last 10 s of its warm-up.\n\n")
	b.WriteString(fixedTable(res.Fixed))
	b.WriteString("\nLatency is the workload's (Slacker: arrival queue + execution); \"execution\" leaves out the wait in the workload's own arrival queue — what the proxy measures. A loop steers by the proxy's windows (latency source \"proxy\", the product's) or by those and the workload's own window (\"client\").\n")
	b.WriteString(pidTable(res.PID, res.Fixed))
	b.WriteString(beforeHandoverTable(res.PID, res.Fixed))
	b.WriteString(withinLine(res.PID))
	b.WriteString(pairLines(res.PID))
	if res.Swing != nil {
		b.WriteString(swingLines(res.Swing))
	}
	b.WriteString(disturbedLines(*res, o.StealLimit))
	b.WriteString("\n")
	b.WriteString(ledgerLines(s.trials))
	b.WriteString(cpuLines(s.trials))
	b.WriteString(calmLines(s.trials))
	b.WriteString("\n![sweep](sweep.png)\n\n![setpoints](setpoints.png)\n")
	return b.String()
}

// loopsLine names the loops the PID trials ran with, each with its profile
// in full where it differs from its base.
func loopsLine(loops []Variant) string {
	var b strings.Builder
	fmt.Fprintf(&b, "PID loop: %s", loops[0].Label())
	if len(loops) > 1 {
		names := make([]string, len(loops)-1)
		for i, v := range loops[1:] {
			names[i] = v.Label()
		}
		fmt.Fprintf(&b, "; every PID setpoint again with %s", strings.Join(names, ", "))
	}
	b.WriteString(" (control.Profile; latency source proxy unless the loop says latency=client).\n\n")
	return b.String()
}

// fixedTable is the report's table of the fixed-rate trials.
func fixedTable(fixed []FixedPoint) string {
	var b strings.Builder
	b.WriteString("| fixed rate MB/s | WAL relay | mean latency ms | stddev ms | migration s | mean before the handover ms | copy ms | catch-up ms (s) | WAL relayed MB | source throttled % | freeze ms | start cost ms·s | handover cost ms·s | before the migration ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range fixed {
		fmt.Fprintf(&b, "| %.1f | %s | %s | %s | %.1f | %s | %s | %s (%.0f) | %.0f | %s | %.0f | %s | %s | %s |\n", p.RateMBs, cmp.Or(p.WALRelay, "?"), f1(p.MeanLatencyMs), f1(p.StddevLatencyMs), p.MigrationSeconds, f1(p.BeforeHandoverMs),
			f1(p.CopyMeanMs), f1(p.CatchUpMeanMs), p.CatchUpSeconds, p.WALMB, fp(p.SourceThrottledPct), p.FreezeMs, fp(p.StartExcessMsS), f1(p.HandoverExcessMsS), f1(p.PreMigrationMs))
	}
	return b.String()
}

// pidTable is the report's table of the PID trials over the whole
// migration, against the fixed ladder, and the count of those no fixed
// trial beat.
func pidTable(pid []PIDPoint, fixed []FixedPoint) string {
	var b strings.Builder
	b.WriteString("\n| PID setpoint ms | loop | mean latency ms | error vs setpoint | execution mean ms | error vs setpoint | stddev ms | migration s | mean rate MB/s | fixed rate's migration s at this latency | fixed rate's mean latency ms at this migration time | fixed trials faster and lower | fixed trials it was faster and lower than |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	unbeaten := 0
	for _, p := range pid {
		eq := "outside the fixed ladder's range"
		if s, ok := FixedSecondsAt(fixed, p.MeanLatencyMs); ok {
			eq = fmt.Sprintf("%.1f (PID %.2f× as fast)", s, s/p.MigrationSeconds)
		}
		eqLat := "outside the fixed ladder's range"
		if l, ok := FixedLatencyAt(fixed, p.MigrationSeconds); ok {
			eqLat = fmt.Sprintf("%.1f (PID's %+.0f %%)", l, 100*(p.MeanLatencyMs-l)/l)
		}
		fmt.Fprintf(&b, "| %.1f | %s | %s | %+.1f %% | %s | %+.1f %% | %s | %.1f | %.1f | %s | %s | %s | %s |\n", p.SetpointMs, p.Loop, f1(p.MeanLatencyMs), 100*(p.MeanLatencyMs-p.SetpointMs)/p.SetpointMs,
			f1(p.ExecutionMeanMs), 100*(p.ExecutionMeanMs-p.SetpointMs)/p.SetpointMs, f1(p.StddevLatencyMs), p.MigrationSeconds, p.MeanRateMBs, eq, eqLat, rates(p.BeatenByFixed), rates(p.BeatsFixed))
		if len(p.BeatenByFixed) == 0 {
			unbeaten++
		}
	}
	if len(pid) > 0 && len(fixed) > 0 {
		fmt.Fprintf(&b, "\nNo fixed trial migrated faster at a lower mean latency than %d of the %d PID trials (the interpolated columns assume the fixed ladder is monotonic; these two do not).\n", unbeaten, len(pid))
	}
	return b.String()
}

// beforeHandoverTable is the report's table of the PID trials before the
// handover, where the loop sets the speed.
func beforeHandoverTable(pid []PIDPoint, fixed []FixedPoint) string {
	var b strings.Builder
	b.WriteString("\nBefore the handover (the loop sets the speed; the handover's freeze and the drain of the queue it builds are a fixed cost per migration, in the whole-migration figures above):\n\n")
	b.WriteString("| PID setpoint ms | loop | mean latency ms | error vs setpoint | loop's own mean ms | error vs setpoint | fixed rate's migration s at this latency | freeze ms | before the migration ms | steps at top speed | start cost ms·s | handover reserve / cost ms·s | host steal, 10 s peak |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range pid {
		eq := "outside the fixed ladder's range"
		if s, ok := secondsAt(fixed, func(f FixedPoint) float64 { return f.BeforeHandoverMs }, p.BeforeHandoverMs); ok {
			eq = fmt.Sprintf("%.1f (PID %.2f× as fast)", s, s/p.MigrationSeconds)
		}
		fmt.Fprintf(&b, "| %.1f | %s | %s | %+.1f %% | %s | %s | %s | %.0f | %s | %d | %s | %.1f / %s | %s |\n", p.SetpointMs, p.Loop, f1(p.BeforeHandoverMs), 100*(p.BeforeHandoverMs-p.SetpointMs)/p.SetpointMs,
			fp(p.LoopMeanMs), offCell(p.LoopMeanMs, p.SetpointMs), eq, p.FreezeMs, f1(p.PreMigrationMs), p.TopSpeedSteps, fp(p.StartExcessMsS), p.ReserveMsS, f1(p.HandoverExcessMsS), stealCell(p.HostStealPeakPct, p.Disturbed))
	}
	return b.String()
}

// offCell formats how far a measured figure is from setpoint sp, in %
// ("–" when it is absent).
func offCell(x *float64, sp float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%+.1f %%", 100*(*x-sp)/sp)
}

// fp formats a measured figure to 0.1, "–" when it is absent.
func fp(x *float64) string {
	if x == nil {
		return "–"
	}
	return f1(*x)
}

// throttleNote is the progress lines' account of the servers' CPU quota
// and the host's steal ("; CPU quota throttled in 34 % of the source's
// periods, 12 % of the target's; host steal 3 %, 10 s peak 21 %"), each
// part left out when not measured.
func throttleNote(src, dst, steal, peak *float64) string {
	f := func(p *float64) string {
		if p == nil {
			return "? %"
		}
		return fmt.Sprintf("%.0f %%", *p)
	}
	var note string
	if src != nil || dst != nil {
		note = fmt.Sprintf("; CPU quota throttled in %s of the source's periods, %s of the target's", f(src), f(dst))
	}
	if steal != nil {
		note += "; host steal " + f(steal)
		if peak != nil {
			note += fmt.Sprintf(", %.0f s peak %s", StealSpan.Seconds(), f(peak))
		}
	}
	return note
}

// sweepChart plots mean latency against migration time for both ladders
// (the trade-off: lower and left is better) and achieved latency against
// the setpoint.
func sweepChart(r SweepResult) chart.Chart {
	var fx, fy, px, py []float64
	fixed := append([]FixedPoint(nil), r.Fixed...)
	sort.Slice(fixed, func(i, j int) bool { return fixed[i].MigrationSeconds < fixed[j].MigrationSeconds })
	for _, p := range fixed {
		fx, fy = append(fx, p.MigrationSeconds), append(fy, p.MeanLatencyMs)
	}
	pid := append([]PIDPoint(nil), r.PID...)
	sort.Slice(pid, func(i, j int) bool { return pid[i].MigrationSeconds < pid[j].MigrationSeconds })
	for _, p := range pid {
		px, py = append(px, p.MigrationSeconds), append(py, p.MeanLatencyMs)
	}
	c1 := chart.Chart{
		Title:  "slack sweep: mean latency during the migration vs its duration",
		XLabel: "migration seconds",
		Panels: []chart.Panel{{YLabel: "mean latency, ms", Series: []chart.Series{
			{Name: "fixed rates", X: fx, Y: fy, Points: true}, {Name: "PID setpoints", X: px, Y: py, Points: true},
		}}},
	}
	return c1
}

// setpointChart plots the PID's achieved mean latency against its setpoint.
func setpointChart(r SweepResult) chart.Chart {
	pid := append([]PIDPoint(nil), r.PID...)
	sort.Slice(pid, func(i, j int) bool { return pid[i].SetpointMs < pid[j].SetpointMs })
	var sx, sy, lo, hi []float64
	for _, p := range pid {
		sx, sy = append(sx, p.SetpointMs), append(sy, p.MeanLatencyMs)
		lo, hi = append(lo, 0.9*p.SetpointMs), append(hi, 1.1*p.SetpointMs)
	}
	grey := color.Gray{Y: 150}
	return chart.Chart{
		Title:  "PID: achieved mean latency during the migration vs setpoint",
		XLabel: "setpoint, ms",
		Panels: []chart.Panel{{YLabel: "mean latency, ms", Series: []chart.Series{
			{Name: "achieved", X: sx, Y: sy, Points: true}, {Name: "= setpoint", X: sx, Y: sx, Dashed: true},
			{Name: "±10 %", X: sx, Y: lo, Color: grey, Width: vg.Points(0.8)}, {X: sx, Y: hi, Color: grey, Width: vg.Points(0.8)},
		}}},
	}
}

// stealCell is a report cell for a host steal percentage (nil: "–"),
// marked when the trial stayed disturbed through its re-runs.
func stealCell(pct *float64, disturbed bool) string {
	cell := "–"
	if pct != nil {
		cell = f1(*pct) + " %"
	}
	if disturbed {
		cell += " (disturbed)"
	}
	return cell
}

// withinLine counts the PID trials whose mean latency before the handover
// ended within ±10 % and ±5 % of their setpoint (Slacker's result and
// sluice's goal), and the distinct setpoints among them; "" without PID
// trials. Trials marked Disturbed count, as they ran.
func withinLine(pid []PIDPoint) string {
	if len(pid) == 0 {
		return ""
	}
	n10, n5 := 0, 0
	sps := map[float64]bool{}
	var missed []string
	for _, p := range pid {
		e := math.Abs(p.BeforeHandoverMs-p.SetpointMs) / p.SetpointMs
		switch {
		case e <= 0.05:
			n5++
			fallthrough
		case e <= 0.10:
			n10++
			sps[p.SetpointMs] = true
		default:
			missed = append(missed, fmt.Sprintf("%g ms %+.1f %%", p.SetpointMs, 100*(p.BeforeHandoverMs-p.SetpointMs)/p.SetpointMs))
		}
	}
	line := fmt.Sprintf("\n%d of the %d PID trials ended within ±10 %% of their setpoint before the handover (%d distinct setpoints), %d within ±5 %%", n10, len(pid), len(sps), n5)
	if len(missed) > 0 {
		line += "; outside: " + strings.Join(missed, ", ")
	}
	return line + ".\n"
}

// disturbedLines lists the attempts re-run because the host's steal peaked
// above limit (a share; SweepOptions.StealLimit); "" when none was.
func disturbedLines(res SweepResult, limit float64) string {
	if len(res.DisturbedFixed)+len(res.DisturbedPID) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nRe-run because the host's steal went above %.0f %% over some %.0f s of the migration (each re-run is in the tables above):\n\n| attempt | host steal, %.0f s peak | host steal, whole migration | mean before the handover ms | vs setpoint | migration s |\n|---|---|---|---|---|---|\n",
		100*limit, StealSpan.Seconds(), StealSpan.Seconds())
	secs := func(s float64, aborted bool) string {
		if aborted {
			return fmt.Sprintf("%.1f (aborted)", s)
		}
		return fmt.Sprintf("%.1f", s)
	}
	for _, p := range res.DisturbedFixed {
		fmt.Fprintf(&b, "| fixed %.1f MB/s | %s | %s | %s | – | %s |\n", p.RateMBs, stealCell(p.HostStealPeakPct, false), stealCell(p.HostStealPct, false), f1(p.BeforeHandoverMs), secs(p.MigrationSeconds, p.Aborted))
	}
	for _, p := range res.DisturbedPID {
		fmt.Fprintf(&b, "| PID %.1f ms (%s) | %s | %s | %s | %+.1f %% | %s |\n", p.SetpointMs, p.Loop, stealCell(p.HostStealPeakPct, false), stealCell(p.HostStealPct, false), f1(p.BeforeHandoverMs), 100*(p.BeforeHandoverMs-p.SetpointMs)/p.SetpointMs, secs(p.MigrationSeconds, p.Aborted))
	}
	return b.String()
}

// cpuLines tabulates, per trial, the share of the source's and target's
// CPU quota periods throttled during the migration and the share of the
// host's CPU time stolen by the hypervisor; "" when no trial measured any.
func cpuLines(trials []Labeled) string {
	var b strings.Builder
	f := func(x float64) string {
		if math.IsNaN(x) {
			return "–"
		}
		return fmt.Sprintf("%.0f %%", 100*x)
	}
	for _, t := range trials {
		if math.IsNaN(t.Res.SourceThrottled) && math.IsNaN(t.Res.TargetThrottled) && math.IsNaN(t.Res.HostSteal) {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nCPU during each migration: the share of its quota periods in which each server's cgroup was throttled (it wanted more CPU than its quota), and the share of the machine's CPU time the hypervisor stole (a slowdown of the whole plant that no rate made), over the whole migration and over its worst %.0f s.\n\n| trial | source throttled | target throttled | host steal | host steal, %.0f s peak |\n|---|---|---|---|---|\n", StealSpan.Seconds(), StealSpan.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", t.Name, f(t.Res.SourceThrottled), f(t.Res.TargetThrottled), f(t.Res.HostSteal), f(t.Res.HostStealPeak))
	}
	return b.String()
}

// calmLines reports the trials whose start was held for a calm plant
// (Trial.CalmBelow), and those that started without one; "" when none was
// held.
func calmLines(trials []Labeled) string {
	var held, notCalm []string
	for _, t := range trials {
		switch {
		case !t.Res.Calm:
			notCalm = append(notCalm, fmt.Sprintf("%s (after %.0f s)", t.Name, t.Res.CalmWait))
		case t.Res.CalmWait >= 1:
			held = append(held, fmt.Sprintf("%s %.0f s", t.Name, t.Res.CalmWait))
		}
	}
	var b strings.Builder
	if len(held) > 0 {
		fmt.Fprintf(&b, "\nHeld for a calm plant before the migration: %s.\n", strings.Join(held, ", "))
	}
	if len(notCalm) > 0 {
		fmt.Fprintf(&b, "\nStarted on a plant that was not calm by the end of the hold: %s.\n", strings.Join(notCalm, ", "))
	}
	return b.String()
}

// ledgerLines reports every trial's row-by-row check.
func ledgerLines(trials []Labeled) string {
	var b strings.Builder
	var ack, miss, dup int64
	for _, t := range trials {
		ack += t.Res.Check.Acknowledged
		miss += t.Res.Check.Missing
		dup += t.Res.Check.Duplicated
	}
	fmt.Fprintf(&b, "Ledger, every migration checked row by row on its new owner: %d acknowledged writes, %d missing, %d duplicated.\n", ack, miss, dup)
	return b.String()
}

// pairLines is the report's table of PID trials against the fixed trials
// run right after them at their copy rates (SweepOptions.Paired), with a
// count of the pairs the PID won; "" when there are none.
func pairLines(pid []PIDPoint) string {
	var b strings.Builder
	var n, won, lower int
	var firstN, firstLower [2]int // clean pairs by which ran first (0 PID, 1 fixed), and the PID lower among them
	var dLat, dTime []float64     // PID against its pair, %, the undisturbed pairs'
	for _, p := range pid {
		f := p.PairFixed
		if f == nil {
			continue
		}
		first, ranFirst := 0, "pid" // which ran first: index into firstN, and the table's cell
		if p.PairFirst == "fixed" {
			first, ranFirst = 1, "fixed"
		}
		if !p.Disturbed && !f.Disturbed {
			firstN[first]++
			if p.MeanLatencyMs <= f.MeanLatencyMs {
				firstLower[first]++
			}
			dLat = append(dLat, 100*(p.MeanLatencyMs-f.MeanLatencyMs)/f.MeanLatencyMs)
			dTime = append(dTime, 100*(p.MigrationSeconds-f.MigrationSeconds)/f.MigrationSeconds)
		}
		if n == 0 {
			b.WriteString("\nEach PID trial against its paired fixed trial (`--paired`: run right after it at its copy rate, or, every second pair at a setpoint, right before it at the copy rate of the setpoint's last PID trial):\n\n")
			b.WriteString("| PID setpoint ms | ran first | PID mean latency ms | PID migration s | PID copy rate MB/s | fixed rate MB/s | fixed trial's mean latency ms | fixed trial's migration s | PID's latency against it | PID's time against it | which did better | host steal, 10 s peak: PID / fixed |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		n++
		verdict := PairVerdict(p.MeanLatencyMs, p.MigrationSeconds, f.MeanLatencyMs, f.MigrationSeconds)
		if p.MeanLatencyMs <= f.MeanLatencyMs {
			lower++
			if p.MigrationSeconds <= f.MigrationSeconds {
				won++
			}
		}
		fmt.Fprintf(&b, "| %.1f | %s | %s | %.1f | %.1f | %.1f | %s | %.1f | %+.0f %% | %+.0f %% | %s | %s / %s |\n", p.SetpointMs, ranFirst, f1(p.MeanLatencyMs), p.MigrationSeconds, p.CopyRateMBs,
			f.RateMBs, f1(f.MeanLatencyMs), f.MigrationSeconds, 100*(p.MeanLatencyMs-f.MeanLatencyMs)/f.MeanLatencyMs, 100*(p.MigrationSeconds-f.MigrationSeconds)/f.MigrationSeconds, verdict,
			stealCell(p.HostStealPeakPct, p.Disturbed), stealCell(f.HostStealPeakPct, f.Disturbed))
	}
	if n == 0 {
		return ""
	}
	fmt.Fprintf(&b, "\nThe PID was at a lower or equal mean latency than its paired fixed trial in %d of %d pairs, and lower or equal and as fast or faster in %d.\n", lower, n, won)
	if calm, calmLower := firstN[0]+firstN[1], firstLower[0]+firstLower[1]; calm > 1 {
		fmt.Fprintf(&b, "Over the %d pairs in which neither trial was kept disturbed (the last column says which were), the PID's mean latency was the fixed trial's %+.0f %% (median; %+.0f to %+.0f %%) and its migration time %+.0f %% (median; %+.0f to %+.0f %%). Sign test: were the PID no lower than the fixed rate at its speed (each pair a coin flip at best), %d or more lower pairs of %d would come with chance %.3f; were it no higher, %d or more higher pairs of %d with chance %.3f.\n",
			calm, stats.Median(dLat), slices.Min(dLat), slices.Max(dLat), stats.Median(dTime), slices.Min(dTime), slices.Max(dTime), calmLower, calm, stats.SignTail(calmLower, calm), calm-calmLower, calm, stats.SignTail(calm-calmLower, calm))
		fmt.Fprintf(&b, "By order: the PID lower in %d of the %d such pairs it ran first in, and in %d of the %d in which the fixed trial ran first.\n", firstLower[0], firstN[0], firstLower[1], firstN[1])
	}
	return b.String()
}
