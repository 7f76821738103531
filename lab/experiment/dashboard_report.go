package experiment

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/demo"
	"github.com/sluicedb/sluice/lab/testbed"
)

// controlled moves tn once more as the product moves it by default: under
// the PID (Common's profile and top speed) at a setpoint of
// demo.SetpointRule over the proxy's window of tn just before, with the
// poller on the source agent. With o.Screenshot set, once 80 % of the copy
// is done (the chart has points to show) headless Chromium loads the
// source agent's page and saves it there.
func (o *DashboardOptions) controlled(ctx context.Context, bed *testbed.Bed, tn testbed.Tenant) (DashboardRun, []requestSample, float64, error) {
	from, _, err := bed.Owner(ctx, tn)
	if err != nil {
		return DashboardRun{}, nil, 0, err
	}
	src := bed.Servers[from]
	ov, err := src.Client.Overview(ctx)
	if err != nil {
		return DashboardRun{}, nil, 0, err
	}
	var calm time.Duration
	if ov.Proxy != nil {
		for _, w := range ov.Proxy.Windows {
			if w.Tenant == tn.Name {
				calm = time.Duration(w.MeanMS * float64(time.Millisecond))
			}
		}
	}
	if calm <= 0 {
		return DashboardRun{}, nil, 0, fmt.Errorf("experiment: the proxy has no window of %s", tn.Name)
	}
	sp := demo.SetpointRule(calm)
	spMs := float64(sp) / float64(time.Millisecond)
	o.Progress("one more migration under the PID, setpoint %.1f ms (the window's mean %.1f ms), with the poller", spMs, float64(calm)/float64(time.Millisecond))
	shot := make(chan error, 1)
	taken := false
	p := newPoller(src.URL, o.Poll)
	go p.run()
	m, err := bed.Migrate(ctx, tn, 1-from, o.pidRequest(Variant{Profile: o.Profile}, spMs), func(m agentclient.Migration) {
		pr := m.Progress
		if o.Screenshot == "" || taken || pr.Phase != "snapshot" || pr.TotalBytes == 0 || 10*pr.Bytes < 8*pr.TotalBytes {
			return
		}
		taken = true
		go func() { shot <- o.takeScreenshot(ctx, pageURL(src.URL)) }()
	})
	got := p.stop()
	if err != nil {
		return DashboardRun{}, nil, 0, err
	}
	r := DashboardRun{Poller: true, Controlled: true, From: src.Name, To: bed.Servers[1-from].Name}
	if s := m.Summary; s != nil {
		r.Seconds, r.FreezeMs = round(s.Seconds, 2), round(s.FreezeMS, 1)
	}
	if o.Screenshot != "" {
		if !taken {
			return r, got, spMs, fmt.Errorf("experiment: screenshot: the copy ended before 80%% of it was done")
		}
		if err := <-shot; err != nil {
			return r, got, spMs, err
		}
	}
	return r, got, spMs, nil
}

// takeScreenshot saves url's page as o.Screenshot with headless Chromium.
func (o *DashboardOptions) takeScreenshot(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out, err := exec.CommandContext(ctx, o.Chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--no-first-run", "--user-data-dir="+dir, "--window-size=1280,1100",
		"--virtual-time-budget=3000", "--screenshot="+o.Screenshot, url).CombinedOutput()
	if err != nil {
		return fmt.Errorf("experiment: screenshot: %s: %v\n%s", o.Chromium, err, out)
	}
	return nil
}

// writeDashboard writes requests.csv (every timed request), summary.json,
// report.md and dashboard.png (each endpoint's answer times).
func writeDashboard(dir, command string, res DashboardResult, samples []requestSample) error {
	f, err := os.Create(filepath.Join(dir, "requests.csv"))
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	w := csv.NewWriter(f)
	w.Write([]string{"t_s", "endpoint", "ms", "error"})
	for _, s := range samples {
		w.Write([]string{strconv.FormatFloat(s.At, 'f', 3, 64), s.Endpoint, strconv.FormatFloat(s.Ms, 'f', 3, 64), strconv.FormatBool(s.Err)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	f.Close()
	if err := writeJSON(dir, SummaryFile, res); err != nil {
		return err
	}
	var c chart.Chart
	c.Title = "sluice bench dashboard: answer times while migrations run"
	c.XLabel = "request (in order, all migrations with the poller)"
	for _, ep := range []string{"overview", "series", "metrics"} {
		var xs, ys []float64
		for _, s := range samples {
			if s.Endpoint == ep && !s.Err {
				xs, ys = append(xs, float64(len(xs))), append(ys, s.Ms)
			}
		}
		c.Panels = append(c.Panels, chart.Panel{YLabel: ep + ", ms", Series: []chart.Series{
			{Name: "GET " + ep, X: xs, Y: ys, Points: true}, chart.Const("50 ms target", xs, 50)}})
	}
	if err := writePNG(dir, "dashboard.png", c); err != nil {
		return err
	}
	return writeFile(dir, ReportFile, dashboardReport(command, res))
}

func dashboardReport(command string, r DashboardResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice bench dashboard\n\n`%s` — %s; %s\n\n", command, r.Machine, r.Bed)
	fmt.Fprintf(&b, "A poller on the source agent every %.0f ms (an open page polls each second): GET /v1/overview, the running migration's series, GET /metrics.\n\nDuring the unthrottled migrations with the poller (the copy takes all the CPU the source's quota leaves):\n\n", r.PollMs)
	b.WriteString("| endpoint | requests | errors | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n")
	for _, e := range r.Endpoints {
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.2f | %.2f |\n", e.Endpoint, e.Requests, e.Errors, e.P50Ms, e.P99Ms, e.MaxMs)
	}
	verdict := "within"
	if r.P99Ms > 50 {
		verdict = "ABOVE"
	}
	fmt.Fprintf(&b, "\nWorst p99 %.2f ms: %s the 50 ms target.\n\n", r.P99Ms, verdict)
	fmt.Fprintf(&b, "During the migration under the PID (setpoint %.1f ms), with the poller:\n\n", r.ControlledSetpointMs)
	b.WriteString("| endpoint | requests | errors | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n")
	for _, e := range r.Controlled {
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.2f | %.2f |\n", e.Endpoint, e.Requests, e.Errors, e.P50Ms, e.P99Ms, e.MaxMs)
	}
	verdict = "within"
	if r.ControlledP99Ms > 50 {
		verdict = "ABOVE"
	}
	fmt.Fprintf(&b, "\nWorst p99 %.2f ms: %s the 50 ms target.\n\n", r.ControlledP99Ms, verdict)
	b.WriteString("| # | poller | copy | from → to | migration s | freeze ms |\n|---:|---|---|---|---:|---:|\n")
	for i, run := range r.Runs {
		copy := "unthrottled"
		if run.Controlled {
			copy = "PID"
		}
		fmt.Fprintf(&b, "| %d | %v | %s | %s → %s | %.2f | %.1f |\n", i+1, run.Poller, copy, run.From, run.To, run.Seconds, run.FreezeMs)
	}
	cost := "within the spread of the runs without it: no measurable cost"
	switch {
	case r.Without.N < 2:
		cost = "one run without it: no spread to judge against"
	case r.DeltaPct > r.SpreadPct:
		cost = "slower by more than the spread of the runs without it: a measurable cost"
	case r.DeltaPct < -r.SpreadPct:
		cost = "faster by more than the spread of the runs without it: noise larger than the spread"
	}
	fmt.Fprintf(&b, "\nMigration time: %.2f s with the poller (n=%d) against %.2f s without (n=%d, %.2f–%.2f s): %+.1f %%, %s (spread %.1f %%).\n",
		r.With.Mean, r.With.N, r.Without.Mean, r.Without.N, r.Without.Min, r.Without.Max, r.DeltaPct, cost, r.SpreadPct)
	fmt.Fprintf(&b, "\nLedger: %d writes acknowledged, %d missing, %d duplicated.\n", r.WritesAcknowledged, r.WritesMissing, r.WritesDuplicated)
	return b.String()
}
