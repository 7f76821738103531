package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/proxy"
)

// Options are a run's settings. The zero value of each field picks its
// default, except where said.
type Options struct {
	// Seed fixes every random draw of the run (arrivals, demands, bursts,
	// measurement noise). Same scenario, controller and seed: same result.
	Seed uint64
	// Setpoint is the latency the run is judged against (and the PID's
	// target). Default: the scenario's.
	Setpoint time.Duration
	// Contract is the latency contract of every store: a 1 s window whose
	// mean latency exceeds it is a violation. Default: each store's own
	// contract, else the setpoint.
	Contract time.Duration
	// Step is the control period, whole seconds. Default 1 s (Slacker). A
	// PID's profile must step at the same period: its gains are per step.
	Step time.Duration
	// Window is the span of the latency window the controller is shown,
	// whole seconds. Default DefaultWindow.
	Window time.Duration
	// Noise is the relative standard deviation of the measurement noise on
	// the latencies the controller sees (one factor per store and step,
	// 1+Noise·N(0,1)). 0 means the default 0.03 (3%); negative means exact.
	Noise float64
	// Warmup is how long the workload runs before the migration starts, whole
	// seconds. Default 10 s.
	Warmup time.Duration
	// MaxDuration abandons a migration still running after it. Default 20 min.
	MaxDuration time.Duration
	// Tail is how long the workload is simulated after the migration ends,
	// for plots. Default 5 s.
	Tail time.Duration
	// Tick is the granularity of the migration's flows (the workload itself
	// is event-driven). Default 10 ms; must divide 1 s.
	Tick time.Duration
}

// Defaults of Options.
const (
	DefaultStep = time.Second
	// DefaultWindow is the proxy's latency window (Slacker's 3 s): the
	// window's lag is part of the loop the profiles' gains were measured
	// on, so the simulator shows controllers the window the product does.
	DefaultWindow      = proxy.DefaultWindow
	DefaultNoise       = 0.03
	DefaultWarmup      = 10 * time.Second
	DefaultMaxDuration = 20 * time.Minute
	DefaultTail        = 5 * time.Second
	DefaultTick        = 10 * time.Millisecond
)

// resolve fills defaults and checks ranges.
func (o Options) resolve(s Scenario) (Options, error) {
	if o.Setpoint == 0 {
		o.Setpoint = s.Setpoint
	}
	if o.Step == 0 {
		o.Step = DefaultStep
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	switch {
	case o.Noise == 0:
		o.Noise = DefaultNoise
	case o.Noise < 0:
		o.Noise = 0
	}
	if o.Warmup == 0 {
		o.Warmup = DefaultWarmup
	}
	if o.MaxDuration == 0 {
		o.MaxDuration = DefaultMaxDuration
	}
	if o.Tail == 0 {
		o.Tail = DefaultTail
	}
	if o.Tick == 0 {
		o.Tick = DefaultTick
	}
	whole := func(d time.Duration) bool { return d >= time.Second && d%time.Second == 0 }
	switch {
	case o.Setpoint <= 0:
		return o, fmt.Errorf("sim: setpoint must be > 0, got %v", o.Setpoint)
	case o.Contract < 0:
		return o, fmt.Errorf("sim: contract must be >= 0, got %v", o.Contract)
	case !whole(o.Step):
		return o, fmt.Errorf("sim: step must be whole seconds, got %v", o.Step)
	case !whole(o.Window):
		return o, fmt.Errorf("sim: window must be whole seconds, got %v", o.Window)
	case !whole(o.Warmup):
		return o, fmt.Errorf("sim: warm-up must be whole seconds, got %v", o.Warmup)
	case o.MaxDuration < time.Second:
		return o, fmt.Errorf("sim: max duration must be >= 1s, got %v", o.MaxDuration)
	case o.Tail < 0:
		return o, fmt.Errorf("sim: tail must be >= 0, got %v", o.Tail)
	case o.Tick <= 0 || time.Second%o.Tick != 0:
		return o, fmt.Errorf("sim: tick must divide 1s, got %v", o.Tick)
	case math.IsNaN(o.Noise) || math.IsInf(o.Noise, 0):
		return o, fmt.Errorf("sim: noise must be finite")
	}
	return o, s.Validate()
}

// Point is one 1 s window of a run, ending at T.
type Point struct {
	T        float64       // end of the window, s since the migration started
	Latency  time.Duration // mean latency of all transactions completed in the window (0: none)
	Count    int           // transactions completed in the window
	Stores   []StorePoint  // per store, in scenario order
	Rate     float64       // bytes sent in the window (= mean send rate, bytes/s)
	Read     float64       // bytes read from disk in the window (bytes/s)
	Buffered float64       // bytes in the read-ahead buffer at T
	Moved    float64       // bytes sent since the start at T
	Queue    int           // transactions waiting for a client thread at T
	Load     float64       // load multiplier in the window
	Phase    string        // "warmup", "migrating", "done" or "idle"

	// The control step at T, if there was one (Command is its rate).
	Observed time.Duration // process variable shown: max of the stores' noisy window means
	Command  float64       // commanded send rate from T on, bytes/s
	Prefetch float64       // commanded read-ahead rate from T on, bytes/s
	Hold     bool
	Reason   string
}

// StorePoint is one store's share of a Point.
type StorePoint struct {
	Latency  time.Duration // mean latency of the store's transactions completed in the window
	Count    int
	InSystem int // running + waiting at the end of the window
}

// StoreResult is one store's figures over the migration.
type StoreResult struct {
	Name              string
	Migrating         bool
	Contract          time.Duration
	IdleLatency       time.Duration // same workload, no migration, same span
	MeanLatency       time.Duration
	P95Latency        time.Duration
	P99Latency        time.Duration
	ViolationFraction float64 // share of 1 s windows with mean latency > Contract
	Count             int     // transactions completed during the migration
}

// Result is the outcome of one run. Latency figures cover the transactions
// that completed while the migration ran ([0, MigrationSeconds]).
type Result struct {
	Scenario   string
	Controller string
	Seed       uint64
	Setpoint   time.Duration
	// IdleLatency is the mean latency of the same workload (same seed) with
	// no migration, over the same span.
	IdleLatency time.Duration
	MeanLatency time.Duration
	P95Latency  time.Duration
	P99Latency  time.Duration
	// ViolationFraction is the share of 1 s windows in which a store's mean
	// latency exceeded its contract; with several stores, the worst store's.
	ViolationFraction float64
	// MigrationSeconds is how long the migration took (or MaxDuration if it
	// did not complete).
	MigrationSeconds float64
	// MeanRate is bytes sent / MigrationSeconds, bytes/s.
	MeanRate  float64
	Completed bool
	// AvgVictimRatio is the mean over 1 s windows of max_i L_i/LC_i, and
	// AvgVictimLatency the mean latency of that victim store (Aqueduct's
	// average victim latency, generalised to per-store contracts).
	AvgVictimRatio   float64
	AvgVictimLatency time.Duration
	Steps            int // control steps taken
	Stores           []StoreResult
	Points           []Point
	Idle             []Point // the idle twin's windows
}

// Run simulates scenario s with controller c (which must be fresh) and
// returns the result, including the idle twin's figures. It is deterministic
// in (s, c's behaviour, opt) and does no I/O.
func Run(s Scenario, c control.Controller, opt Options) (Result, error) {
	if c == nil {
		return Result{}, fmt.Errorf("sim: run %s: nil controller", s.Name)
	}
	o, err := opt.resolve(s)
	if err != nil {
		return Result{}, err
	}
	e := newEngine(s, c, o)
	e.run()
	idle := newEngine(s, nil, o)
	idle.horizon = e.endT
	idle.run()
	return summarize(s, o, e, idle), nil
}

// IdleLatency is the mean latency of scenario s with no migration over its
// first span of simulated time (after the warm-up), and per store.
func IdleLatency(s Scenario, opt Options, span time.Duration) (time.Duration, []time.Duration, error) {
	o, err := opt.resolve(s)
	if err != nil {
		return 0, nil, err
	}
	idle := newEngine(s, nil, o)
	idle.horizon = span.Seconds()
	idle.run()
	all, per := idleMeans(idle, span.Seconds())
	return all, per, nil
}

func idleMeans(idle *engine, end float64) (time.Duration, []time.Duration) {
	var sum float64
	var n int
	per := make([]time.Duration, len(idle.stores))
	for i, s := range idle.stores {
		var ss float64
		var k int
		for j, t := range s.compT {
			if t <= end {
				ss += s.compL[j]
				k++
			}
		}
		if k > 0 {
			per[i] = secs(ss / float64(k))
		}
		sum += ss
		n += k
	}
	if n == 0 {
		return 0, per
	}
	return secs(sum / float64(n)), per
}

func summarize(s Scenario, o Options, e, idle *engine) Result {
	r := Result{
		Scenario:         s.Name,
		Controller:       e.ctrl.Name(),
		Seed:             o.Seed,
		Setpoint:         o.Setpoint,
		MigrationSeconds: e.endT,
		Completed:        e.done && e.sent >= e.size,
		Steps:            e.steps,
		Points:           e.points,
		Idle:             idle.points,
	}
	if !e.done {
		r.MigrationSeconds = o.MaxDuration.Seconds()
	}
	if r.MigrationSeconds > 0 {
		r.MeanRate = e.sent / r.MigrationSeconds
	}
	end := r.MigrationSeconds
	var idlePer []time.Duration
	r.IdleLatency, idlePer = idleMeans(idle, end)

	var all []float64
	for i, st := range e.stores {
		var lat []float64
		for j, t := range st.compT {
			if t <= end {
				lat = append(lat, st.compL[j])
			}
		}
		all = append(all, lat...)
		sr := StoreResult{
			Name:        st.cfg.Name,
			Migrating:   st.cfg.Migrating,
			Contract:    secs(st.contract),
			IdleLatency: idlePer[i],
			Count:       len(lat),
		}
		sr.MeanLatency, sr.P95Latency, sr.P99Latency = stats(lat)
		sr.ViolationFraction = violations(e.points, i, st.contract, end)
		r.ViolationFraction = math.Max(r.ViolationFraction, sr.ViolationFraction)
		r.Stores = append(r.Stores, sr)
	}
	r.MeanLatency, r.P95Latency, r.P99Latency = stats(all)
	r.AvgVictimRatio, r.AvgVictimLatency = victim(e.points, e.stores, end)
	return r
}

// stats returns the mean, p95 and p99 of lat (seconds); it reorders lat.
func stats(lat []float64) (mean, p95, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	var sum float64
	for _, v := range lat {
		sum += v
	}
	slices.Sort(lat)
	return secs(sum / float64(len(lat))), secs(quantile(lat, 0.95)), secs(quantile(lat, 0.99))
}

// migrationWindows returns the points whose 1 s window lies within (0, end]:
// the windows of the migration. The last, partial window is left out, as it
// mixes in latency from after the migration ended (the latency figures count
// transactions completed by the end only, too).
func migrationWindows(points []Point, end float64) []Point {
	var w []Point
	for _, p := range points {
		if p.T > 0 && p.T <= end+1e-9 {
			w = append(w, p)
		}
	}
	return w
}

// violations is the share of the migration's 1 s windows in which store i's
// mean latency exceeded contract (s). A window where nothing completed while
// transactions were waiting counts as a violation (the store was stalled).
func violations(points []Point, i int, contract, end float64) float64 {
	w := migrationWindows(points, end)
	if len(w) == 0 {
		return 0
	}
	bad := 0
	for _, p := range w {
		sp := p.Stores[i]
		if sp.Count == 0 {
			if sp.InSystem > 0 {
				bad++
			}
			continue
		}
		if sp.Latency.Seconds() > contract {
			bad++
		}
	}
	return float64(bad) / float64(len(w))
}

// victim returns the mean over the migration's windows of the worst
// latency/contract ratio, and the mean latency of the store that had it.
func victim(points []Point, stores []*storeSim, end float64) (float64, time.Duration) {
	w := migrationWindows(points, end)
	var ratio, lat float64
	n := 0
	for _, p := range w {
		best, bl := -1.0, 0.0
		for i, sp := range p.Stores {
			if sp.Count == 0 || stores[i].contract <= 0 {
				continue
			}
			if q := sp.Latency.Seconds() / stores[i].contract; q > best {
				best, bl = q, sp.Latency.Seconds()
			}
		}
		if best >= 0 {
			ratio += best
			lat += bl
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return ratio / float64(n), secs(lat / float64(n))
}
