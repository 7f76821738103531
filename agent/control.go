package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/monitor"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// The control loop of a source-side migration (Slacker §4: the per-server
// migration controller). Every step it reads the proxy's latency windows of
// every running tenant on the source agent and on the target agent — the
// "servers" the migration competes on — and, when the spec names one, the
// clients' own window (client.Control.ClientLatencyURL), runs the
// migration's controller under its governor (control.Governor) and sets the
// migration's send throttle. The record of every step is served at GET
// /v1/migrations/{id}/series.

// controlPlan is a Control spec resolved: its profile, top speed and
// setpoint. checkControl stores the spec with the resolved profile and top
// speed, so resolving a stored spec again gives the same plan.
type controlPlan struct {
	spec     client.Control
	profile  control.Profile
	setpoint time.Duration
	stat     control.Statistic
	// model is the agent's interference model (Config.InterferenceModel);
	// nil = control.DefaultModel.
	model *control.Model
}

// resolveControl checks spec and resolves its profile and top speed. Bad
// specs are 400s: checked before anything starts.
func resolveControl(spec client.Control) (controlPlan, error) {
	if err := spec.Validate(); err != nil {
		return controlPlan{}, errf(http.StatusBadRequest, "%v", err)
	}
	prof, _ := control.ProfileFromJSON(spec.Profile)
	spec.Controller = cmp.Or(spec.Controller, "pid")
	if spec.MaxRate == 0 {
		spec.MaxRate = prof.MaxRate
	}
	stat := control.Statistic(spec.Stat)
	var err error
	if spec.Profile, err = json.Marshal(prof); err != nil {
		return controlPlan{}, err
	}
	return controlPlan{spec: spec, profile: prof, setpoint: time.Duration(spec.SetpointMs * float64(time.Millisecond)), stat: stat}, nil
}

// controller builds the controller the plan names, the PID with reserve
// (ns·steps, control.PIDParams.Reserve).
func (cp controlPlan) controller(reserve time.Duration) (control.Controller, error) {
	bad := func(format string, args ...any) error {
		return errf(http.StatusBadRequest, "control: "+format, args...)
	}
	spec := cp.spec
	switch spec.Controller {
	case "fixed":
		r := spec.Rate
		if r == 0 {
			r = spec.MaxRate
		}
		c, err := control.NewFixed(math.Min(r, spec.MaxRate))
		if err != nil {
			return nil, bad("%v", err)
		}
		return c, nil
	case "pid":
		p := cp.profile.PID(cp.setpoint, spec.MaxRate, cp.stat)
		p.Reserve = reserve
		c, err := control.NewPID(p)
		if err != nil {
			return nil, bad("%v", err)
		}
		return c, nil
	case "integral":
		p := control.DefaultIntegralParams()
		p.MaxRate, p.K = spec.MaxRate, spec.K
		if cp.setpoint > 0 {
			p.DefaultContract = cp.setpoint
		}
		c, err := control.NewIntegral(p)
		if err != nil {
			return nil, bad("%v (k comes from `sluice tune`)", err)
		}
		return c, nil
	case "interference":
		if spec.Device == "" {
			return nil, bad("interference needs device (a /proc/diskstats name, e.g. vda)")
		}
		m := control.DefaultModel()
		if cp.model != nil {
			m = *cp.model
		}
		p := cp.profile.InterferenceParams(m, spec.MaxRate)
		c, err := control.NewInterference(p)
		if err != nil {
			return nil, bad("%v", err)
		}
		return c, nil
	}
	return nil, bad("unknown controller %q (pid, fixed, integral, interference)", spec.Controller)
}

// readAhead is the read-ahead buffer cap of migration cm's snapshot, bytes:
// its profile's (control.Profile.BufferMB) under the interference
// controller, which buffers on purpose; 0 (the transfer's default) for
// the others and without a control spec.
func readAhead(cm catalog.Migration) int64 {
	var spec client.Control
	if len(cm.Control) == 0 || json.Unmarshal(cm.Control, &spec) != nil || spec.Controller != "interference" {
		return 0
	}
	cp, err := resolveControl(spec)
	if err != nil {
		return 0
	}
	return cp.profile.ReadAhead()
}

// byLatency reports whether the plan's controller steers by latency.
func (cp controlPlan) byLatency() bool {
	return cp.spec.Controller == "pid" || cp.spec.Controller == "integral"
}

// checkControl validates a spec for a new migration of this agent and
// returns it resolved, as the catalog keeps it.
func (a *Agent) checkControl(spec *client.Control) (json.RawMessage, error) {
	if spec == nil {
		return nil, nil
	}
	cp, err := resolveControl(*spec)
	if err != nil {
		return nil, err
	}
	cp.model = a.cfg.model
	if _, err := cp.controller(0); err != nil {
		return nil, err
	}
	if a.cfg.Proxy == "" && cp.spec.ClientLatencyURL == "" && cp.byLatency() {
		return nil, errf(http.StatusBadRequest, "control: the %s controller steers by the latency the proxy measures; this agent has no proxy configured (or give client_latency_url)", cp.spec.Controller)
	}
	return json.Marshal(cp.spec)
}

// startControl runs the control loop of run r until ctx ends, if cm carries a
// control spec, and puts the controller's initial rate in force at once: the
// copy's first byte is paced by it. It returns at once.
func (a *Agent) startControl(ctx context.Context, cm catalog.Migration, r *run) {
	if len(cm.Control) == 0 {
		return
	}
	var spec client.Control
	err := json.Unmarshal(cm.Control, &spec)
	var cp controlPlan
	if err == nil {
		cp, err = resolveControl(spec)
		cp.model = a.cfg.model
	}
	var reserve time.Duration
	if err == nil && spec.Controller == "pid" && cp.profile.LearnReserve && cp.profile.MeanHorizon > 0 && a.cfg.Proxy != "" {
		reserve = a.learnReserve(ctx, cm)
	}
	var ctrl control.Controller
	if err == nil {
		ctrl, err = cp.controller(reserve)
	}
	if err != nil {
		a.log.Error("control loop: bad stored spec; migration runs at its fixed rate", "migration", cm.ID, "err", err)
		return
	}
	r.send.SetRate(ctrl.Initial())
	r.prefetch.SetRate(ctrl.Initial())
	obs := a.observer(cp)
	peer, err := a.peerClient(cm.PeerURL)
	if err != nil {
		a.log.Error("control loop: peer; migration runs at its initial rate", "migration", cm.ID, "err", err)
		return
	}
	l := &loop.Loop{
		Controller: control.NewGovernor(ctrl, cp.profile.Governor(cp.setpoint, cp.spec.MaxRate, cp.byLatency())),
		Send:       r.send,
		Prefetch:   r.prefetch,
		Period:     cp.profile.Step(),
		Setpoint:   cp.setpoint,
		Observe: func(ctx context.Context, at time.Time) control.Observation {
			if obs.lat != nil {
				sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				obs.lat.Servers = a.serverAddrs(sctx, peer)
				cancel()
			}
			return obs.Observe(ctx, at)
		},
		Status: r.loopStatus,
	}
	r.mu.Lock()
	r.loop, r.plan, r.reserve = l, &cp, reserve
	r.mu.Unlock()
	go func() {
		if err := l.Run(ctx, nil); err != nil && ctx.Err() == nil {
			a.log.Error("control loop stopped", "migration", cm.ID, "err", err)
		}
	}()
	a.log.Info("control loop running", "migration", cm.ID, "controller", cp.spec.Controller, "profile", cp.profile.Label(),
		"setpoint_ms", cp.spec.SetpointMs, "max_rate", cp.spec.MaxRate, "initial_rate", ctrl.Initial())
}

// observer is the control loop's monitor for plan cp: the proxy's latency
// windows (per tenant for the integral controller), the clients' own window
// when the plan names one, host I/O for interference, and the agent's CPU
// quota.
type observer struct {
	*monitor.Observer
	lat *monitor.ProxyLatency
}

func (a *Agent) observer(cp controlPlan) observer {
	o := observer{Observer: &monitor.Observer{}}
	if a.cfg.Proxy != "" {
		o.lat = &monitor.ProxyLatency{Proxy: a.proxyClient()}
		if cp.spec.Controller == "integral" {
			o.lat.PerTenant = true
			o.lat.Contracts = map[string]time.Duration{}
			for name, ms := range cp.spec.ContractsMs {
				o.lat.Contracts[name] = time.Duration(ms * float64(time.Millisecond))
			}
		}
		o.Latency = o.lat
	}
	if cp.spec.ClientLatencyURL != "" {
		o.Client = &monitor.ClientLatency{URL: cp.spec.ClientLatencyURL}
	}
	if cp.spec.Controller == "interference" {
		o.Host = &monitor.Host{Device: cp.spec.Device}
	}
	if p := a.cpuStatPath(); p != "" {
		o.CPU = &monitor.CPUQuota{Stat: p}
	}
	return o
}

// loopStatus is the migration's progress as the control loop sees it.
func (r *run) loopStatus() loop.Status {
	r.mu.Lock()
	p := r.prog
	r.mu.Unlock()
	st := loop.Status{Phase: string(p.Phase), Bytes: p.BytesDone, Lag: p.LagBytes, Remaining: remaining(p, r.lim.Rate())}
	switch p.Phase {
	case migration.PhaseSnapshot:
		st.Stage = control.StageCopy
	case migration.PhaseCatchUp, migration.PhaseWarm:
		st.Stage = control.StageCatchUp
	}
	return st
}

// learnReserve returns the PID's reserve for migration cm's handover: the
// median excess (never below 0) of the proxy's last control.ReserveHistory measured
// handovers of the tenant; 0 if it has none or does not answer within 1 s.
func (a *Agent) learnReserve(ctx context.Context, cm catalog.Migration) time.Duration {
	tn, err := a.cat.Tenant(cm.TenantID)
	if err != nil {
		return 0
	}
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	hs, err := a.proxyClient().Handovers(qctx, tn.Name)
	if err != nil {
		a.log.Warn("control loop: the proxy's handover record is unavailable; no handover reserve", "migration", cm.ID, "err", err)
		return 0
	}
	r := reserveOf(hs, control.ReserveHistory)
	a.log.Info("control loop: handover reserve", "migration", cm.ID, "reserve_ms_s", float64(r.Microseconds())/1000, "from_handovers", min(len(hs), control.ReserveHistory))
	return r
}

// reserveOf is the median ExcessMSS of the last n handovers of hs, at least
// 0, as a duration (ms·s → ns·steps at 1 s steps).
func reserveOf(hs []proxyclient.Handover, n int) time.Duration {
	if len(hs) > n {
		hs = hs[len(hs)-n:]
	}
	xs := make([]float64, len(hs))
	for i, h := range hs {
		xs[i] = h.ExcessMSS
	}
	return time.Duration(max(0, stats.Median(xs)) * float64(time.Millisecond))
}

// remaining is the time the snapshot in progress p still needs at rate
// (bytes/s): the loop's estimate of the time to the handover
// (control.Observation.Remaining). 0 (unknown) outside the snapshot, whose
// copy is most of a migration's time, before its size is known, and at
// rate 0 (paused) or unlimited.
func remaining(p migration.Progress, rate float64) time.Duration {
	if p.Phase != migration.PhaseSnapshot || p.BytesTotal <= 0 || rate <= 0 || math.IsInf(rate, 0) {
		return 0
	}
	s := float64(max(0, p.BytesTotal-p.BytesDone)) / rate
	return time.Duration(min(s, 1e6) * float64(time.Second))
}

// serverAddrs lists host:port of every serving tenant here and on the peer:
// the postmasters whose clients the migration may hurt. A peer that does not
// answer contributes nothing this step (its tenants' windows are then
// missing, not zero).
func (a *Agent) serverAddrs(ctx context.Context, peer *client.Client) []string {
	var out []string
	add := func(host string, port int) { out = append(out, net.JoinHostPort(host, strconv.Itoa(port))) }
	if ts, err := a.cat.Tenants(); err == nil {
		for _, t := range ts {
			if t.State == catalog.Running || t.State == catalog.MigratingOut {
				add(a.cfg.Tenant.AdvertiseHost, t.Port)
			}
		}
	}
	if ts, err := peer.Tenants(ctx, false); err == nil {
		for _, t := range ts {
			if t.State == string(catalog.Running) || t.State == string(catalog.MigratingOut) {
				add(t.Host, t.Port)
			}
		}
	}
	return out
}

// cpuStatPath is the cpu.stat the control loop samples (Config.CPUStat);
// "" = none. The default, the agent's own cgroup, is looked up when asked, so
// an agent moved into its server's cgroup after it started finds it.
func (a *Agent) cpuStatPath() string {
	switch a.cfg.CPUStat {
	case "off":
		return ""
	case "":
		p, err := monitor.OwnCPUStat()
		if err != nil {
			return ""
		}
		return p
	}
	return a.cfg.CPUStat
}

// controlView fills a migration's progress with its loop's last step.
func controlView(r *run, p *client.Progress) {
	r.mu.Lock()
	l, cp, reserve := r.loop, r.plan, r.reserve
	r.mu.Unlock()
	if l == nil {
		return
	}
	p.Controller, p.SetpointMs, p.MaxRate = cp.spec.Controller, cp.spec.SetpointMs, cp.spec.MaxRate
	if cp.spec.Controller == "pid" {
		p.Profile = cp.profile.Label()
	}
	p.ReserveMsS = float64(reserve.Microseconds()) / 1000
	p.LatencyMs = -1
	if last, ok := l.Last(); ok {
		p.LatencyMs = last.LatencyMs
		p.CPUThrottledPct = last.CPUThrottledPct
	}
}

// MigrationSeries returns the control loop's record of a running or
// recently finished migration of this agent: its points with T > since
// (seconds since the loop started; < 0 = all).
func (a *Agent) MigrationSeries(id string, since float64) ([]loop.Point, error) {
	if r := a.mig.get(id); r != nil {
		r.mu.Lock()
		l := r.loop
		r.mu.Unlock()
		if l != nil {
			return l.Since(since), nil
		}
		return []loop.Point{}, nil
	}
	a.mig.mu.Lock()
	pts, ok := a.mig.series[id]
	a.mig.mu.Unlock()
	if ok {
		i := sort.Search(len(pts), func(i int) bool { return pts[i].T > since })
		return pts[i:], nil
	}
	if _, err := a.cat.Migration(id); err != nil {
		return nil, errf(http.StatusNotFound, "unknown migration %q on agent %s", id, a.cfg.Name)
	}
	return []loop.Point{}, nil
}

func (a *Agent) seriesRoute(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/migrations/{id}/series", func(w http.ResponseWriter, r *http.Request) {
		since := -1.0
		if q := r.URL.Query().Get("since"); q != "" {
			f, err := strconv.ParseFloat(q, 64)
			if err != nil || math.IsNaN(f) {
				writeError(w, errf(http.StatusBadRequest, "bad since %q: want seconds since the loop started", q))
				return
			}
			since = f
		}
		v, err := a.MigrationSeries(r.PathValue("id"), since)
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	})
}
