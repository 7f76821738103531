package agent

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
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
// migration's controller and sets the migration's send throttle. The record of every step is served at
// GET /v1/migrations/{id}/series.

// newController builds the controller a Control spec names. Bad specs are
// 400s: checked before anything starts.
func newController(spec client.Control, reserve time.Duration) (control.Controller, error) {
	bad := func(format string, args ...any) error {
		return errf(http.StatusBadRequest, "control: "+format, args...)
	}
	if !(spec.MaxRate > 0) || math.IsInf(spec.MaxRate, 0) {
		return nil, bad("max_rate %v must be a positive number of bytes/s", spec.MaxRate)
	}
	if math.IsNaN(spec.SetpointMs) || spec.SetpointMs < 0 {
		return nil, bad("setpoint_ms %v must be positive", spec.SetpointMs)
	}
	if spec.StepMs != 0 && (spec.StepMs < 100 || spec.StepMs > 60000) {
		return nil, bad("step_ms %v outside 100..60000", spec.StepMs)
	}
	if u := spec.ClientLatencyURL; u != "" {
		if err := client.CheckClientLatencyURL(u); err != nil {
			return nil, bad("client_latency_url %v", err)
		}
	}
	sp := time.Duration(spec.SetpointMs * float64(time.Millisecond))
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
		if sp <= 0 {
			return nil, bad("pid needs setpoint_ms")
		}
		p := control.DefaultPIDParams()
		p.Setpoint, p.MaxRate = sp, spec.MaxRate
		if spec.Rate > 0 {
			// The operator's starting rate (default a tenth of max_rate).
			p.Initial = math.Min(spec.Rate/spec.MaxRate, 1)
		}
		for _, g := range []struct {
			v   *float64
			dst *float64
		}{{spec.Kp, &p.Kp}, {spec.Ki, &p.Ki}, {spec.Kd, &p.Kd}} {
			if g.v != nil {
				*g.dst = *g.v
			}
		}
		p.StartGrowth = spec.StartGrowth
		p.RearmGrowth = spec.RearmGrowth
		p.StartBackoff = spec.StartBackoff
		p.IdleFloor = spec.IdleFloor
		p.ErrorFloor = spec.ErrorFloor
		p.Headroom = spec.Headroom
		p.MeanHorizon, p.MeanBand = spec.MeanHorizon, spec.MeanBand
		if r := spec.HandoverReserveMsS; r != nil {
			if !(*r >= 0) || math.IsInf(*r, 0) {
				return nil, bad("handover_reserve_ms_s %v must be >= 0", *r)
			}
			reserve = time.Duration(*r * float64(time.Millisecond))
		}
		p.Reserve = reserve
		switch control.ErrorForm(spec.ErrorForm) {
		case "":
		case control.ErrorLinear, control.ErrorHybrid:
			p.Error = control.ErrorForm(spec.ErrorForm)
		default:
			return nil, bad("error_form %q: want linear or hybrid", spec.ErrorForm)
		}
		c, err := control.NewPID(p)
		if err != nil {
			return nil, bad("%v", err)
		}
		return c, nil
	case "integral":
		p := control.DefaultIntegralParams()
		p.MaxRate, p.K = spec.MaxRate, spec.K
		if sp > 0 {
			p.DefaultContract = sp
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
		p := control.DefaultInterferenceParams()
		p.MaxRate = spec.MaxRate
		c, err := control.NewInterference(p)
		if err != nil {
			return nil, bad("%v", err)
		}
		return c, nil
	}
	return nil, bad("unknown controller %q (fixed, pid, integral, interference)", spec.Controller)
}

// checkControl validates a spec for a new migration of this agent.
func (a *Agent) checkControl(spec *client.Control) (json.RawMessage, error) {
	if spec == nil {
		return nil, nil
	}
	if _, err := newController(*spec, 0); err != nil {
		return nil, err
	}
	if a.cfg.Proxy == "" && spec.ClientLatencyURL == "" && spec.Controller != "fixed" && spec.Controller != "interference" {
		return nil, errf(http.StatusBadRequest, "control: the %s controller steers by the latency the proxy measures; this agent has no proxy configured (or give client_latency_url)", spec.Controller)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// startControl runs the control loop of run r until ctx ends, if cm carries a
// control spec. It returns at once.
func (a *Agent) startControl(ctx context.Context, cm catalog.Migration, r *run) {
	if len(cm.Control) == 0 {
		return
	}
	var spec client.Control
	if err := json.Unmarshal(cm.Control, &spec); err != nil {
		a.log.Error("control loop: bad stored spec; migration runs at its fixed rate", "migration", cm.ID, "err", err)
		return
	}
	var reserve time.Duration
	if spec.Controller == "pid" && spec.MeanHorizon > 0 && spec.HandoverReserveMsS == nil && a.cfg.Proxy != "" {
		reserve = a.learnReserve(ctx, cm)
	}
	ctrl, err := newController(spec, reserve)
	if err != nil {
		a.log.Error("control loop: bad stored spec; migration runs at its fixed rate", "migration", cm.ID, "err", err)
		return
	}
	obs := &monitor.Observer{}
	var lat *monitor.ProxyLatency
	if a.cfg.Proxy != "" {
		lat = &monitor.ProxyLatency{Proxy: proxyclient.New(a.cfg.Proxy, nil)}
		if spec.Controller == "integral" {
			lat.PerTenant = true
			lat.Contracts = map[string]time.Duration{}
			for name, ms := range spec.ContractsMs {
				lat.Contracts[name] = time.Duration(ms * float64(time.Millisecond))
			}
		}
		obs.Latency = lat
	}
	if spec.ClientLatencyURL != "" {
		obs.Client = &monitor.ClientLatency{URL: spec.ClientLatencyURL}
	}
	if spec.Controller == "interference" {
		obs.Host = &monitor.Host{Device: spec.Device}
	}
	if p := a.cpuStatPath(); p != "" {
		obs.CPU = &monitor.CPUQuota{Stat: p}
	}
	peer, err := a.peerClient(cm.PeerURL)
	if err != nil {
		a.log.Error("control loop: peer; migration runs at its fixed rate", "migration", cm.ID, "err", err)
		return
	}
	l := &loop.Loop{
		Controller: ctrl,
		Send:       r.lim,
		Prefetch:   r.pre,
		Period:     time.Duration(spec.StepMs * float64(time.Millisecond)),
		Setpoint:   time.Duration(spec.SetpointMs * float64(time.Millisecond)),
		MaxRate:    spec.MaxRate,
		Observe: func(ctx context.Context, at time.Time) control.Observation {
			if lat != nil {
				sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				lat.Servers = a.serverAddrs(sctx, peer)
				cancel()
			}
			return obs.Observe(ctx, at)
		},
		Status: func() (string, int64) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return string(r.prog.Phase), r.prog.BytesDone
		},
		Lag: func() int64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.prog.LagBytes
		},
		Remaining: func() time.Duration {
			r.mu.Lock()
			p := r.prog
			r.mu.Unlock()
			return remaining(p, r.lim.Rate())
		},
	}
	if spec.Controller == "pid" || spec.Controller == "integral" {
		l.Settle = ControlSettle
	}
	r.mu.Lock()
	r.loop, r.spec = l, &spec
	if pid, ok := ctrl.(*control.PID); ok {
		r.reserve = pid.Params().Reserve
	}
	r.mu.Unlock()
	go func() {
		if err := l.Run(ctx, nil); err != nil && ctx.Err() == nil {
			a.log.Error("control loop stopped", "migration", cm.ID, "err", err)
		}
	}()
	a.log.Info("control loop running", "migration", cm.ID, "controller", spec.Controller, "setpoint_ms", spec.SetpointMs, "max_rate", spec.MaxRate)
}

// ReserveHistory is how many of a tenant's last handovers the PID's
// learned reserve is the median of (client.Control.HandoverReserveMsS).
const ReserveHistory = 3

// learnReserve returns the PID's reserve for migration cm's handover: the
// median excess (never below 0) of the proxy's last ReserveHistory measured
// handovers of the tenant; 0 if it has none or does not answer within 1 s.
func (a *Agent) learnReserve(ctx context.Context, cm catalog.Migration) time.Duration {
	tn, err := a.cat.Tenant(cm.TenantID)
	if err != nil {
		return 0
	}
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	hs, err := proxyclient.New(a.cfg.Proxy, nil).Handovers(qctx, tn.Name)
	if err != nil {
		a.log.Warn("control loop: the proxy's handover record is unavailable; no handover reserve", "migration", cm.ID, "err", err)
		return 0
	}
	r := reserveOf(hs, ReserveHistory)
	a.log.Info("control loop: handover reserve", "migration", cm.ID, "reserve_ms_s", float64(r.Microseconds())/1000, "from_handovers", min(len(hs), ReserveHistory))
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

// ControlSettle is how long the latency controllers hold their starting rate
// after the copy's first byte (loop.Loop.Settle): the proxy's window (3 s by
// default), so the snapshot's start-up — pg_backup_start's fast checkpoint, a
// 27–87 ms spike on the testbed's 0.25-CPU servers whatever the rate — has
// left the window before the controller reads it.
const ControlSettle = 3 * time.Second

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
	l, spec, reserve := r.loop, r.spec, r.reserve
	r.mu.Unlock()
	if l == nil {
		return
	}
	p.Controller, p.SetpointMs = spec.Controller, spec.SetpointMs
	p.ReserveMsS = float64(reserve.Microseconds()) / 1000
	p.LatencyMs = -1
	if s := l.Series(); len(s) > 0 {
		p.LatencyMs = s[len(s)-1].LatencyMs
		p.CPUThrottledPct = s[len(s)-1].CPUThrottledPct
	}
}

// MigrationSeries returns the control loop's record of a running or
// recently finished migration of this agent.
func (a *Agent) MigrationSeries(id string) ([]loop.Point, error) {
	if r := a.mig.get(id); r != nil {
		r.mu.Lock()
		l := r.loop
		r.mu.Unlock()
		if l != nil {
			return l.Series(), nil
		}
		return []loop.Point{}, nil
	}
	a.mig.mu.Lock()
	pts, ok := a.mig.series[id]
	a.mig.mu.Unlock()
	if ok {
		return pts, nil
	}
	if _, err := a.cat.Migration(id); err != nil {
		return nil, errf(http.StatusNotFound, "unknown migration %q on agent %s", id, a.cfg.Name)
	}
	return []loop.Point{}, nil
}

func (a *Agent) seriesRoute(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/migrations/{id}/series", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.MigrationSeries(r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	})
}
