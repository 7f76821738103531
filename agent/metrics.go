package agent

import (
	"encoding/json"
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
)

// The agent's Prometheus metrics, GET /metrics (with the token, as every
// agent endpoint; Prometheus sends it with authorization.credentials_file).
// Figures are read from the catalog and the running migrations when scraped
// (a scrape costs the migrations nothing but a catalog read); only the
// failed-step counter is counted as it happens. Live figures are per
// source-side running migration, labelled by tenant name: a tenant has at
// most one migration running, so the label set is bounded by the agent's
// tenants. docs/metrics.md lists them with their meaning.

// freezeBuckets are sluice_migration_freeze_seconds' buckets, seconds: a
// handover's freeze is normally tens of ms; past a few seconds it is a
// problem to see.
var freezeBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// agentMetrics is one agent's registry (not the process-global one: a
// process may run several agents, as the tests do).
type agentMetrics struct {
	reg          *prometheus.Registry
	stepFailures *prometheus.CounterVec
}

func newAgentMetrics(a *Agent) *agentMetrics {
	m := &agentMetrics{reg: prometheus.NewRegistry()}
	m.stepFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_migration_step_failures_total",
		Help: "Migration steps that failed and were retried (the agent logs each with its cause), by the phase they belong to.",
	}, []string{"phase"})
	// Every phase's count is exported from the start (0), so that a rate()
	// over it has a first sample.
	for _, ph := range []migration.Phase{migration.PhasePrepare, migration.PhaseSnapshot, migration.PhaseCatchUp,
		migration.PhaseWarm, migration.PhaseHandover, migration.PhaseCleanup, migration.PhaseRollback} {
		m.stepFailures.WithLabelValues(string(ph))
	}
	m.reg.MustRegister(m.stepFailures, migrationCollector{a},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *agentMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// stepFailed counts one failed, retried step of a migration in phase ph.
func (m *agentMetrics) stepFailed(ph migration.Phase) {
	m.stepFailures.WithLabelValues(string(ph)).Inc()
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	mRunning   = desc("sluice_migrations_running", "Migrations in progress on this agent, by its role in them (source or target).", "role")
	mFinished  = desc("sluice_migrations_finished_total", "Migrations this agent drove (as source) that finished, by outcome (committed or aborted).", "outcome")
	mMovedAll  = desc("sluice_migration_finished_moved_bytes_total", "Bytes the finished migrations this agent drove moved (snapshot and copy).")
	mFreeze    = desc("sluice_migration_freeze_seconds", "Client-visible freeze of the handovers of the migrations this agent drove (live: writes held; stop-and-copy: the downtime), by mode.", "mode")
	mTenants   = desc("sluice_agent_tenants", "Tenants on this agent by lifecycle state.", "state")
	mPhase     = desc("sluice_migration_phase", "1 for the running migration's current phase (prepare, snapshot, catch-up, warm, handover, cleanup, rollback), per tenant.", "tenant", "phase")
	mMoved     = desc("sluice_migration_moved_bytes", "Bytes the running migration's current phase has moved (snapshot: sent).", "tenant")
	mSize      = desc("sluice_migration_size_bytes", "Estimated total bytes of the running migration's current counting phase (absent when unknown).", "tenant")
	mRate      = desc("sluice_migration_rate_bytes_per_second", "Measured send rate of the running migration (the copy's so far; in catch-up, the WAL's).", "tenant")
	mThrottle  = desc("sluice_migration_throttle_bytes_per_second", "The running migration's throttle now: the controller's output or the operator's rate; 0 paused; absent when unlimited.", "tenant")
	mPaused    = desc("sluice_migration_paused", "1 while an operator has paused the running migration's copy.", "tenant")
	mETA       = desc("sluice_migration_eta_seconds", "Estimated time to the end of the running migration's current phase (absent when unknown).", "tenant")
	mLag       = desc("sluice_migration_lag_bytes", "WAL the running migration's target still has to replay (absent when unknown).", "tenant")
	mElapsed   = desc("sluice_migration_elapsed_seconds", "Time since the running migration's driver started.", "tenant")
	mSetpoint  = desc("sluice_migration_setpoint_seconds", "The control loop's latency setpoint for the running migration.", "tenant")
	mLatency   = desc("sluice_migration_latency_seconds", "The clients' latency the control loop measured at its last step (its process variable; absent without data).", "tenant")
	mCtrlRate  = desc("sluice_migration_controller_rate_bytes_per_second", "The send rate the control loop decided at its last step.", "tenant")
	mCtrlMax   = desc("sluice_migration_controller_max_rate_bytes_per_second", "The control loop's top speed for the running migration.", "tenant")
	allMetrics = []*prometheus.Desc{mRunning, mFinished, mMovedAll, mFreeze, mTenants, mPhase, mMoved, mSize, mRate, mThrottle, mPaused, mETA, mLag, mElapsed, mSetpoint, mLatency, mCtrlRate, mCtrlMax}
)

// migrationCollector reads the agent's migrations and tenants at scrape time.
type migrationCollector struct{ a *Agent }

func (c migrationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allMetrics {
		ch <- d
	}
}

func (c migrationCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	ts, err := a.cat.Tenants()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(mTenants, err)
		return
	}
	names := map[int64]string{}
	states := map[catalog.State]int{}
	for _, tn := range ts {
		names[tn.ID] = tn.Name
		states[tn.State]++
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(mTenants, prometheus.GaugeValue, float64(n), string(st))
	}
	ms, err := a.cat.Migrations()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(mRunning, err)
		return
	}
	running := map[catalog.Role]int{catalog.Source: 0, catalog.Target: 0}
	outcomes := map[string]float64{"committed": 0, "aborted": 0}
	var moved float64
	freezes := map[string][]float64{}
	for _, m := range ms {
		if !m.Done {
			running[m.Role]++
			if m.Role == catalog.Source {
				c.live(ch, m, names[m.TenantID])
			}
			continue
		}
		if m.Role != catalog.Source {
			continue
		}
		outcomes[m.Outcome]++
		var rec migration.Record
		if json.Unmarshal(m.Record, &rec) != nil {
			continue
		}
		moved += float64(max(rec.SnapshotBytes+rec.CopyBytes, m.Moved))
		if m.Outcome == "committed" {
			freezes[string(rec.Mode)] = append(freezes[string(rec.Mode)], rec.Freeze.Seconds())
		}
	}
	for role, n := range running {
		ch <- prometheus.MustNewConstMetric(mRunning, prometheus.GaugeValue, float64(n), string(role))
	}
	for o, n := range outcomes {
		ch <- prometheus.MustNewConstMetric(mFinished, prometheus.CounterValue, n, o)
	}
	ch <- prometheus.MustNewConstMetric(mMovedAll, prometheus.CounterValue, moved)
	for _, mode := range []migration.Mode{migration.Live, migration.StopAndCopy} {
		ch <- constHistogram(mFreeze, freezes[string(mode)], string(mode))
	}
}

// live sends the figures of source-side migration m, running, of tenant.
func (c migrationCollector) live(ch chan<- prometheus.Metric, m catalog.Migration, tenant string) {
	v := c.a.migrationView(m)
	p := v.Progress
	gauge := func(d *prometheus.Desc, x float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, tenant)
	}
	if p.Phase != "" {
		ch <- prometheus.MustNewConstMetric(mPhase, prometheus.GaugeValue, 1, tenant, p.Phase)
	}
	gauge(mMoved, float64(p.Bytes))
	if p.TotalBytes > 0 {
		gauge(mSize, float64(p.TotalBytes))
	}
	gauge(mRate, p.Rate)
	if p.ETASeconds >= 0 {
		gauge(mETA, p.ETASeconds)
	}
	if p.LagBytes >= 0 {
		gauge(mLag, float64(p.LagBytes))
	}
	r := c.a.mig.get(m.ID)
	if r == nil {
		return
	}
	gauge(mElapsed, p.Elapsed)
	paused, _ := r.send.state()
	gauge(mPaused, b2f(paused))
	if lim := r.lim.Rate(); !math.IsInf(lim, 1) {
		gauge(mThrottle, lim)
	}
	r.mu.Lock()
	l, cp := r.loop, r.plan
	r.mu.Unlock()
	if l == nil {
		return
	}
	gauge(mSetpoint, cp.spec.SetpointMs/1000)
	gauge(mCtrlMax, cp.spec.MaxRate)
	if last, ok := l.Last(); ok {
		gauge(mCtrlRate, last.Rate)
		if last.LatencyMs >= 0 {
			gauge(mLatency, last.LatencyMs/1000)
		}
	}
}

// constHistogram is the histogram of xs (seconds) over freezeBuckets.
func constHistogram(d *prometheus.Desc, xs []float64, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(freezeBuckets))
	var sum float64
	for _, x := range xs {
		sum += x
		for _, b := range freezeBuckets {
			if x <= b {
				buckets[b]++
			}
		}
	}
	return prometheus.MustNewConstHistogram(d, uint64(len(xs)), sum, buckets, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
