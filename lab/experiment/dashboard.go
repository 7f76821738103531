package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/dashboard"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// Dashboard measures what the operator's page and Prometheus' scrapes cost:
// on the bed's two servers, under a workload, it moves one tenant back and
// forth unthrottled (the copy then takes whatever CPU the source server's
// quota leaves, so anything else the agent does slows it), half of the
// migrations with a poller on the source agent and half without, in ABBA
// order (Pairs pairs: off-on, on-off, …) so that drift and direction fall
// on both arms alike. The poller asks, every Poll, what an open page and a
// scrape ask: GET /v1/overview, the running migration's GET
// …/series?since=T, and GET /metrics. Reported: each endpoint's latency
// percentiles while the migrations ran, and the migrations' times with
// and without the poller. Nothing the workload wrote is lost (ledger).
type DashboardOptions struct {
	Common
	// Pairs of migrations, one with the poller and one without; default 2.
	Pairs int
	// Poll is the poller's period; default 100 ms (ten open pages).
	Poll time.Duration
	// Screenshot, when set, is where a PNG of the page goes, taken during
	// the migration under the PID: the page showing latency against the
	// setpoint and the controller's rate. It needs Debian's chromium.
	Screenshot string
	// Chromium is the browser for Screenshot; default "chromium".
	Chromium string
}

// DashboardResult is `sluice bench dashboard --json`.
type DashboardResult struct {
	Machine string  `json:"machine"`
	Bed     string  `json:"bed"`
	PollMs  float64 `json:"poll_ms"`
	// Endpoints are the answers during the unthrottled migrations with the
	// poller; P99Ms the worst endpoint's p99.
	Endpoints []EndpointLatency `json:"endpoints"`
	P99Ms     float64           `json:"p99_ms"`
	// Controlled are the answers during the last migration, under the PID
	// at ControlledSetpointMs (the product's default way to migrate);
	// ControlledP99Ms the worst endpoint's p99.
	Controlled           []EndpointLatency  `json:"controlled_endpoints"`
	ControlledP99Ms      float64            `json:"controlled_p99_ms"`
	ControlledSetpointMs float64            `json:"controlled_setpoint_ms"`
	Runs                 []DashboardRun     `json:"runs"`
	Without              MigrationTimeStats `json:"without_poller"`
	With                 MigrationTimeStats `json:"with_poller"`
	// DeltaPct is how much longer (negative: shorter) the migrations with
	// the poller took, % of the mean without.
	DeltaPct float64 `json:"delta_pct"`
	// SpreadPct is the spread of the migrations without the poller
	// (max − min, % of their mean): the run-to-run noise a cost must exceed
	// to be measurable.
	SpreadPct          float64 `json:"spread_pct"`
	WritesAcknowledged int64   `json:"writes_acknowledged"`
	WritesMissing      int64   `json:"writes_missing"`
	WritesDuplicated   int64   `json:"writes_duplicated"`
	Screenshot         string  `json:"screenshot,omitempty"`
}

// EndpointLatency is one endpoint's answers while migrations ran.
type EndpointLatency struct {
	Endpoint string  `json:"endpoint"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// DashboardRun is one migration.
type DashboardRun struct {
	Poller     bool    `json:"poller"`
	Controlled bool    `json:"controlled"` // under the PID (else unthrottled)
	From       string  `json:"from"`
	To         string  `json:"to"`
	Seconds    float64 `json:"seconds"` // the agent's summary: created → finished
	FreezeMs   float64 `json:"freeze_ms"`
}

// MigrationTimeStats are one arm's migration times, seconds.
type MigrationTimeStats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_s"`
	Min  float64 `json:"min_s"`
	Max  float64 `json:"max_s"`
}

// Dashboard runs the benchmark on bed (two servers) and writes
// requests.csv, summary.json, report.md and dashboard.png to o.Out.
func Dashboard(ctx context.Context, bed *testbed.Bed, o DashboardOptions) (DashboardResult, error) {
	if err := o.defaults(); err != nil {
		return DashboardResult{}, err
	}
	if o.Pairs == 0 {
		o.Pairs = 2
	}
	if o.Poll == 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Chromium == "" {
		o.Chromium = "chromium"
	}
	say := o.Progress
	res := DashboardResult{Machine: Machine(), Bed: bed.Describe(), PollMs: float64(o.Poll) / float64(time.Millisecond)}
	say("loading %d MB into tenant dash on %s", o.Size/1e6, bed.Servers[0].Name)
	tn, err := bed.CreateTenant(ctx, 0, "dash", o.Size, o.Seed)
	if err != nil {
		return res, err
	}
	wc := o.Workload
	wc.DSN, wc.Records, wc.Duration, wc.Seed = tn.DSN, tn.Rows, 4*time.Hour, o.Seed+1
	run, err := workload.NewRunner(wc)
	if err != nil {
		return res, err
	}
	bg := runBackground(ctx, run)
	defer bg.stop()
	time.Sleep(o.Warmup)
	var samples []requestSample
	for i := range 2 * o.Pairs {
		// ABBA: pair k is off-on for even k, on-off for odd k.
		on := (i%2 == 1) == (i/2%2 == 0)
		r, got, err := o.migrateOnce(ctx, bed, tn, on, agentclient.StartMigration{})
		if err != nil {
			return res, err
		}
		samples = append(samples, got...)
		res.Runs = append(res.Runs, r)
		say("migration %d %s → %s: %.1f s (poller %v, %d requests)", i+1, r.From, r.To, r.Seconds, on, len(got))
		time.Sleep(5 * time.Second) // the handover's aftermath drains
	}
	cr, csamples, sp, err := o.controlled(ctx, bed, tn)
	if err != nil {
		return res, err
	}
	res.Runs = append(res.Runs, cr)
	res.ControlledSetpointMs = round(sp, 2)
	res.Controlled, res.ControlledP99Ms = endpointStats(csamples)
	res.Screenshot = o.Screenshot
	if err := bg.stop(); err != nil && !errors.Is(err, context.Canceled) {
		return res, fmt.Errorf("experiment: workload: %w", err)
	}
	chk, err := dtVerify(ctx, tn.DSN, run.Ledger)
	if err != nil {
		return res, err
	}
	res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
	res.summarise(samples)
	if err := writeDashboard(o.Out, o.Command, res, samples); err != nil {
		return res, err
	}
	if !chk.OK() {
		return res, fmt.Errorf("experiment: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return res, nil
}

// migrateOnce moves tn to the server that does not own it with req, with
// the poller on the source agent when on, and returns the run and the
// poller's samples.
func (o *DashboardOptions) migrateOnce(ctx context.Context, bed *testbed.Bed, tn testbed.Tenant, on bool, req agentclient.StartMigration) (DashboardRun, []requestSample, error) {
	from, _, err := bed.Owner(ctx, tn)
	if err != nil {
		return DashboardRun{}, nil, err
	}
	to := 1 - from
	var p *poller
	if on {
		p = newPoller(bed.Servers[from].URL, o.Poll)
		go p.run()
	}
	m, err := bed.Migrate(ctx, tn, to, req, nil)
	var got []requestSample
	if p != nil {
		got = p.stop()
	}
	if err != nil {
		return DashboardRun{}, nil, err
	}
	r := DashboardRun{Poller: on, From: bed.Servers[from].Name, To: bed.Servers[to].Name}
	if s := m.Summary; s != nil {
		r.Seconds, r.FreezeMs = round(s.Seconds, 2), round(s.FreezeMS, 1)
	}
	return r, got, nil
}

// requestSample is one answer the poller timed.
type requestSample struct {
	At       float64 // seconds since the poller started
	Endpoint string
	Ms       float64
	Err      bool
}

// poller asks an agent what an open page and a Prometheus scrape ask.
type poller struct {
	base, token string
	every       time.Duration
	hc          *http.Client
	stopc, done chan struct{}
	start       time.Time

	mu      sync.Mutex
	samples []requestSample
}

func newPoller(base string, every time.Duration) *poller {
	tok, _ := auth.Find(base, "")
	return &poller{base: base, token: tok, every: every, hc: &http.Client{Timeout: 10 * time.Second},
		stopc: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
}

func (p *poller) run() {
	defer close(p.done)
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	since := map[string]float64{}
	for {
		var ov agentclient.Overview
		p.get("overview", "/v1/overview", &ov)
		for _, m := range ov.Migrations {
			if m.Done || m.Role != "source" {
				continue
			}
			s, ok := since[m.ID]
			if !ok {
				s = -1
			}
			var pts []struct {
				T float64 `json:"t"`
			}
			p.get("series", "/v1/migrations/"+url.PathEscape(m.ID)+"/series?since="+strconv.FormatFloat(s, 'f', -1, 64), &pts)
			if len(pts) > 0 {
				since[m.ID] = pts[len(pts)-1].T
			}
		}
		p.get("metrics", "/metrics", nil)
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
	}
}

// get times one GET of path, decoding JSON into out when out is set.
func (p *poller) get(endpoint, path string, out any) {
	t0 := time.Now()
	req, _ := http.NewRequest(http.MethodGet, p.base+path, nil)
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.hc.Do(req)
	bad := err != nil
	if err == nil {
		if out != nil {
			bad = json.NewDecoder(resp.Body).Decode(out) != nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		bad = bad || resp.StatusCode != http.StatusOK
	}
	s := requestSample{At: t0.Sub(p.start).Seconds(), Endpoint: endpoint, Ms: float64(time.Since(t0)) / float64(time.Millisecond), Err: bad}
	p.mu.Lock()
	p.samples = append(p.samples, s)
	p.mu.Unlock()
}

func (p *poller) stop() []requestSample {
	close(p.stopc)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.samples
}

// summarise fills r's endpoint percentiles (the unthrottled migrations'
// samples) and the migration-time comparison (unthrottled runs only).
func (r *DashboardResult) summarise(samples []requestSample) {
	r.Endpoints, r.P99Ms = endpointStats(samples)
	var with, without []float64
	for _, run := range r.Runs {
		switch {
		case run.Controlled:
		case run.Poller:
			with = append(with, run.Seconds)
		default:
			without = append(without, run.Seconds)
		}
	}
	r.With, r.Without = timeStats(with), timeStats(without)
	if r.Without.Mean > 0 {
		r.DeltaPct = round(100*(r.With.Mean-r.Without.Mean)/r.Without.Mean, 1)
		r.SpreadPct = round(100*(r.Without.Max-r.Without.Min)/r.Without.Mean, 1)
	}
}

// endpointStats is each endpoint's percentiles over samples, and the worst p99.
func endpointStats(samples []requestSample) ([]EndpointLatency, float64) {
	by := map[string][]requestSample{}
	for _, s := range samples {
		by[s.Endpoint] = append(by[s.Endpoint], s)
	}
	var out []EndpointLatency
	worst := 0.0
	for _, ep := range []string{"overview", "series", "metrics"} {
		e := EndpointLatency{Endpoint: ep}
		var ms []float64
		for _, s := range by[ep] {
			e.Requests++
			if s.Err {
				e.Errors++
				continue
			}
			ms = append(ms, s.Ms)
		}
		sort.Float64s(ms)
		e.P50Ms, e.P99Ms = round(quantile(ms, 0.5), 2), round(quantile(ms, 0.99), 2)
		if len(ms) > 0 {
			e.MaxMs = round(ms[len(ms)-1], 2)
		}
		out = append(out, e)
		worst = math.Max(worst, e.P99Ms)
	}
	return out, worst
}

func timeStats(xs []float64) MigrationTimeStats {
	if len(xs) == 0 {
		return MigrationTimeStats{}
	}
	s := MigrationTimeStats{N: len(xs), Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		s.Mean += x / float64(len(xs))
		s.Min, s.Max = math.Min(s.Min, x), math.Max(s.Max, x)
	}
	s.Mean = round(s.Mean, 2)
	return s
}

// quantile is the nearest-rank q-quantile of sorted xs (NaN when empty).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// pageURL is the page of the agent at base with its token, as `sluice
// dashboard` prints it.
func pageURL(base string) string {
	tok, _ := auth.Find(base, "")
	return base + dashboard.Prefix + "#token=" + url.QueryEscape(tok)
}
