// Package demo runs sluice end to end on one machine: two agents (two
// "servers"), a proxy, a tenant of a few hundred MB, Slacker's YCSB workload
// through the proxy, and a live migration whose speed the source agent's
// control loop sets from the latency the proxy measures. It ends with a
// row-by-row check of the workload's acknowledged writes on the new owner,
// a summary, a CSV time series and a PNG plot.
//
// It is what `make demo` (`sluice demo`) shows a newcomer first.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent"
	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// Options configure a demo run. Zero values take the defaults noted.
type Options struct {
	Out        string        // output directory; default "out/demo"
	Size       int64         // tenant data, bytes; default 200 MB
	Setpoint   time.Duration // 0: 2 × the measured baseline mean latency (at least baseline + 5 ms)
	TxRate     float64       // workload arrivals/s; default 200
	MPL        int           // workload connections; default 8
	MaxRate    float64       // migration's top speed, bytes/s; default 100 MB/s
	Controller string        // fixed, pid (default), integral
	Baseline   time.Duration // baseline measurement; default 15 s
	Seed       uint64
	Progress   io.Writer // live progress lines; nil = none
}

// Check reports the first bad option, before anything is started.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.Out == "" {
		o.Out = filepath.Join("out", "demo")
	}
	if o.Size == 0 {
		o.Size = 200e6
	}
	if o.TxRate == 0 {
		o.TxRate = 200
	}
	if o.MPL == 0 {
		o.MPL = 8
	}
	if o.MaxRate == 0 {
		o.MaxRate = 100e6
	}
	if o.Controller == "" {
		o.Controller = "pid"
	}
	if o.Baseline == 0 {
		o.Baseline = 15 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch {
	case o.Size < 1e6:
		return o, fmt.Errorf("demo: size %d bytes is below 1 MB", o.Size)
	case o.Setpoint < 0:
		return o, fmt.Errorf("demo: setpoint %v must be positive", o.Setpoint)
	case !(o.TxRate > 0) || math.IsInf(o.TxRate, 0):
		return o, fmt.Errorf("demo: workload rate %v must be a positive number", o.TxRate)
	case !(o.MaxRate > 0) || math.IsInf(o.MaxRate, 0):
		return o, fmt.Errorf("demo: max rate %v must be a positive number of bytes/s", o.MaxRate)
	case o.Controller != "pid" && o.Controller != "fixed" && o.Controller != "integral":
		return o, fmt.Errorf("demo: controller %q: want pid, fixed or integral", o.Controller)
	}
	return o, nil
}

// Result is the demo's summary; its JSON keys are `sluice demo --json`'s.
type Result struct {
	SetpointMs            float64 `json:"setpoint_ms"`
	BaselineMeanLatencyMs float64 `json:"baseline_mean_latency_ms"`
	AchievedMeanLatencyMs float64 `json:"achieved_mean_latency_ms"`
	MigrationSeconds      float64 `json:"migration_seconds"`
	BytesCopied           int64   `json:"bytes_copied"`
	FreezeMs              float64 `json:"freeze_ms"`
	WritesAcknowledged    int64   `json:"writes_acknowledged"`
	WritesMissing         int64   `json:"writes_missing"`
	WritesDuplicated      int64   `json:"writes_duplicated"`
}

// Run performs the demo. It stops everything it started before returning.
func Run(ctx context.Context, opt Options) (Result, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	root, err := pgcluster.MkdirTemp("sluice-demo-")
	if err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(root)
	say := func(format string, args ...any) { fmt.Fprintf(opt.Progress, format+"\n", args...) }

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // agents stop with ctx

	// The proxy: clients' front door and the loop's latency instrument.
	px, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true})
	if err != nil {
		return Result{}, err
	}
	if err := px.Start(ctx); err != nil {
		return Result{}, err
	}
	defer px.Close()
	pc := proxyclient.New(px.APIAddr(), nil)

	// Two agents, two "servers".
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var agents [2]*agent.Agent
	for i, name := range []string{"server-a", "server-b"} {
		base, err := freeBase()
		if err != nil {
			return Result{}, err
		}
		dir := filepath.Join(root, name)
		a, err := agent.New(agent.Config{Name: name, Root: dir, Listen: "127.0.0.1:0", Proxy: "http://" + px.APIAddr(), Logger: quiet,
			Tenant: agent.TenantDefaults{BasePort: base, SharedBuffers: "32MB", Settings: map[string]string{"fsync": "off", "max_wal_size": "1GB"}}})
		if err != nil {
			return Result{}, err
		}
		agents[i] = a
		wg.Add(1)
		go func() { defer wg.Done(); a.Serve(ctx) }()
	}
	src, err := agentclient.New(agents[0].URL())
	if err != nil {
		return Result{}, err
	}
	dst, err := agentclient.New(agents[1].URL())
	if err != nil {
		return Result{}, err
	}
	defer stopTenants(src, dst)

	say("creating tenant \"demo\" on server-a")
	tn, err := src.CreateTenant(ctx, agentclient.CreateTenant{Name: "demo"})
	if err != nil {
		return Result{}, fmt.Errorf("demo: create tenant: %w", err)
	}
	if err := pc.SetRoute(ctx, proxyclient.Route{Tenant: tn.Name, Addr: net.JoinHostPort(tn.Host, fmt.Sprint(tn.Port)), Database: tn.Database}); err != nil {
		return Result{}, err
	}
	dsn := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", px.Addr(), tn.Name)

	say("loading %s of YCSB usertable through the proxy", units.FormatBytes(float64(opt.Size)))
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return Result{}, fmt.Errorf("demo: connect through the proxy: %w", err)
	}
	rows := workload.RowsForSize(opt.Size)
	loaded, err := workload.Load(ctx, conn, rows, opt.Seed+1, nil)
	if err == nil {
		_, err = conn.Exec(ctx, "CHECKPOINT")
	}
	conn.Close(context.Background())
	if err != nil {
		return Result{}, err
	}
	say("loaded %d rows, %s on disk", loaded.Rows, units.FormatBytes(float64(loaded.Bytes)))

	wcfg := workload.Config{DSN: dsn, Rate: opt.TxRate, MPL: opt.MPL, Records: rows, Duration: opt.Baseline, Seed: opt.Seed + 2}
	say("measuring the baseline: %.0f transactions/s for %v", opt.TxRate, opt.Baseline)
	base, err := workload.NewRunner(wcfg)
	if err != nil {
		return Result{}, err
	}
	bsum, err := base.Run(ctx, nil)
	if err != nil {
		return Result{}, fmt.Errorf("demo: baseline: %w", err)
	}
	res := Result{BaselineMeanLatencyMs: bsum.MeanMs}
	sp := opt.Setpoint
	if sp == 0 {
		sp = time.Duration(math.Max(2*bsum.MeanMs, bsum.MeanMs+5) * float64(time.Millisecond))
	}
	res.SetpointMs = float64(sp) / float64(time.Millisecond)
	say("baseline mean latency %.1f ms; setpoint %.1f ms", bsum.MeanMs, res.SetpointMs)

	// The workload runs through the migration; the ledger proves nothing is lost.
	wcfg.Duration = 30 * time.Minute
	run, err := workload.NewRunner(wcfg)
	if err != nil {
		return Result{}, err
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var secsMu sync.Mutex
	var secs []workload.Second
	workDone := make(chan error, 1)
	go func() {
		_, err := run.Run(wctx, func(s workload.Second) { secsMu.Lock(); secs = append(secs, s); secsMu.Unlock() })
		workDone <- err
	}()
	time.Sleep(3 * time.Second) // let the workload settle before the migration starts
	wStart := time.Now()

	say("migrating tenant %d to server-b, %s controller, setpoint %.1f ms, at most %s", tn.ID, opt.Controller, res.SetpointMs, units.FormatRate(opt.MaxRate))
	ctl := &agentclient.Control{Controller: opt.Controller, SetpointMs: res.SetpointMs, MaxRate: opt.MaxRate}
	// The loop steers by what the clients see (queue wait + execution, the
	// latency the summary reports) next to the proxy's windows.
	u, stopServe, err := run.ServeWindow("127.0.0.1:0", tn.Name)
	if err != nil {
		return res, fmt.Errorf("demo: %w", err)
	}
	defer stopServe()
	ctl.ClientLatencyURL = u
	switch opt.Controller {
	case "integral":
		ctl.K = control.HeuristicIntegralK(opt.MaxRate, sp)
	}
	m, err := src.StartMigration(ctx, agentclient.StartMigration{Tenant: tn.ID, To: agents[1].URL(), Rate: opt.MaxRate / 10, Control: ctl})
	if err != nil {
		return Result{}, fmt.Errorf("demo: start migration: %w", err)
	}
	migStart := time.Now()
	for !m.Done {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Second):
		}
		if m, err = src.Migration(ctx, m.ID); err != nil {
			return res, err
		}
		p := m.Progress
		lat := lastLatency(&secsMu, secs)
		of := "" // phases that count no bytes of their own have no total
		if p.TotalBytes > 0 {
			of = "of " + units.FormatBytes(float64(p.TotalBytes))
		}
		say("%-9s %9s %-12s %12s  ETA %5s  lag %-9s  latency %6.1f ms (setpoint %.1f)", p.Phase, units.FormatBytes(float64(p.Bytes)),
			of, units.FormatRate(p.Rate), eta(p.ETASeconds), lagText(p.LagBytes), lat, res.SetpointMs)
		if p.Warning != "" {
			say("warning: %s", p.Warning)
		}
	}
	migEnd := time.Now()
	if m.Outcome != "committed" {
		stopWork()
		<-workDone
		return res, fmt.Errorf("demo: migration %s ended %s: %s", m.ID, m.Outcome, m.Error)
	}
	series, _ := src.MigrationSeries(ctx, m.ID)
	time.Sleep(2 * time.Second) // some traffic on the new owner
	stopWork()
	<-workDone

	if m.Summary != nil {
		res.BytesCopied, res.FreezeMs = m.Summary.Bytes, m.Summary.FreezeMS
	}
	res.MigrationSeconds = migEnd.Sub(migStart).Seconds()
	secsMu.Lock()
	all := append([]workload.Second(nil), secs...)
	secsMu.Unlock()
	res.AchievedMeanLatencyMs = meanBetween(all, migStart.Sub(wStart).Seconds()+3, migEnd.Sub(wStart).Seconds()+3)

	// Row by row on the new owner, through the proxy (its route followed the handover).
	vconn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, fmt.Errorf("demo: verify: %w", err)
	}
	chk, err := workload.Verify(ctx, vconn, run.Ledger)
	vconn.Close(context.Background())
	if err != nil {
		return res, err
	}
	res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
	if err := writeOutputs(opt.Out, res, all, series, migStart.Sub(wStart).Seconds()+3); err != nil {
		return res, err
	}
	if !chk.OK() {
		return res, fmt.Errorf("demo: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return res, nil
}

func lastLatency(mu *sync.Mutex, secs []workload.Second) float64 {
	mu.Lock()
	defer mu.Unlock()
	for i := len(secs) - 1; i >= 0; i-- {
		if secs[i].Count > 0 {
			return secs[i].MeanMs
		}
	}
	return math.NaN()
}

// meanBetween is the transaction-weighted mean latency of the seconds in [from, to).
func meanBetween(secs []workload.Second, from, to float64) float64 {
	var sum float64
	var n int
	for _, s := range secs {
		if float64(s.T) >= from && float64(s.T) < to {
			sum += s.MeanMs * float64(s.Count)
			n += s.Count
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func eta(s float64) string {
	if s < 0 || math.IsNaN(s) {
		return "?"
	}
	return fmt.Sprintf("%.0fs", s)
}

func lagText(b int64) string {
	if b < 0 {
		return "-"
	}
	return units.FormatBytes(float64(b))
}

// freeBase returns a tenant base port with a free port right above it.
func freeBase() (int, error) {
	for i := 0; i < 50; i++ {
		p, err := pgcluster.FreePort()
		if err != nil {
			return 0, err
		}
		if p < 2000 || p > 64000 {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p - 1, nil
		}
	}
	return 0, errors.New("demo: no free port")
}

// stopTenants stops every tenant the demo's agents run; postmasters outlive agents.
func stopTenants(cs ...*agentclient.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range cs {
		ts, err := c.Tenants(ctx, true)
		if err != nil {
			continue
		}
		for _, t := range ts {
			c.DeleteTenant(ctx, t.ID)
		}
	}
}

// writeOutputs writes summary.json, loop.csv (the control loop's record) and
// demo.png. offset converts the loop's time (since the migration started) to
// the workload's (since it started).
func writeOutputs(dir string, res Result, secs []workload.Second, series []loop.Point, offset float64) error {
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "loop.csv"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	loop.WriteCSV(f, series)
	f.Close()
	var t, lat, sp, rate, rt []float64
	for _, s := range secs {
		if s.Count > 0 {
			t = append(t, float64(s.T))
			lat = append(lat, s.MeanMs)
		}
	}
	sort.Slice(series, func(i, j int) bool { return series[i].T < series[j].T })
	for _, p := range series {
		rt = append(rt, p.T+offset)
		rate = append(rate, p.Rate/1e6)
	}
	sp = []float64{res.SetpointMs, res.SetpointMs}
	c := chart.Chart{
		Title:  fmt.Sprintf("sluice demo: live migration under a %.1f ms setpoint — %.1f s, freeze %.0f ms", res.SetpointMs, res.MigrationSeconds, res.FreezeMs),
		XLabel: "seconds since the workload started",
		Panels: []chart.Panel{
			{YLabel: "latency, ms (1 s windows)", YMax: 4 * res.SetpointMs, Series: []chart.Series{
				{Name: "transaction latency", X: t, Y: lat},
				{Name: "setpoint", X: []float64{0, float64(len(secs))}, Y: sp, Dashed: true},
			}},
			{YLabel: "migration rate, MB/s", Series: []chart.Series{{Name: "rate set by the controller", X: rt, Y: rate}}},
		},
	}
	pf, err := os.Create(filepath.Join(dir, "demo.png"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer pf.Close()
	return chart.WritePNG(pf, c)
}
