package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/control/tune"
)

// ProfileOptions configure a profiling run: a staircase of fixed rates, each
// held for Hold, measured after Settle (Aqueduct §5.1 ran one migration per
// rate; a staircase in one run is the same measurement done the way a live
// system would do it, without restarting the workload).
type ProfileOptions struct {
	// Rates is the ladder, bytes/s, ascending. Default: 0 then Steps equal
	// steps up to the plant's MaxRate.
	Rates []float64
	// Steps is the number of non-zero rungs of the default ladder. Default 24.
	Steps int
	// Hold is how long each rate is held, whole seconds. Default 15 s.
	Hold time.Duration
	// Settle is skipped at the start of each hold before measuring. Default 5 s.
	Settle time.Duration
	// The profile ends at the first rung where some store's mean latency
	// exceeds its contract (Options.Contract, else the store's own, else the
	// setpoint): that rung is reported but not fitted, as beyond the contract
	// the plant may be overloaded and latency unbounded. A control window
	// above AbortFactor × a contract aborts the rung at once.
	// P picks the victim store as Aqueduct's controller does: the store with
	// the smallest P·LC_i − L_i. Default 0.9.
	P float64
}

// Profiling tunables.
const (
	DefaultProfileSteps  = 24
	DefaultProfileHold   = 15 * time.Second
	DefaultProfileSettle = 5 * time.Second
	DefaultProfileP      = 0.9
	AbortFactor          = 3.0 // a window above 3× a store's contract aborts the profile
)

// ProfilePoint is one rung of the staircase.
type ProfilePoint struct {
	Rate    float64         // bytes/s
	Latency time.Duration   // victim store's mean latency over the measured part
	Victim  string          // the victim store
	Stores  []time.Duration // every store's mean latency
	Aborted bool            // the rung was cut short (latency ran away)
	Over    bool            // some store exceeded its contract: the last rung
}

// Fit is a linear fit latency = Intercept + G·rate over some profile points.
type Fit struct {
	G         float64 // seconds of latency per byte/s
	Intercept float64 // seconds
	R2        float64
	Points    int // points used
	MinRate   float64
	MaxRate   float64
	Fallback  bool // Local only: the global fit, as the local rungs showed less slope
}

// Profile is the outcome of ProfilePlant.
type Profile struct {
	Scenario   string
	Seed       uint64
	StoreNames []string       // order of ProfilePoint.Stores
	Points     []ProfilePoint // in ladder order, up to and including the first over a contract
	// Binding is the victim store at the last rung within the contracts: the
	// store whose contract limits the migration, and BindingContract its
	// contract.
	Binding         string
	BindingContract time.Duration
	// Global fits the victim latency of every rung within the contracts
	// (Aqueduct's method). Local fits the binding store's latency over the
	// operating region only: the rungs where it is in the upper half between
	// its idle latency and its contract (at least 3 rungs). The plant is
	// convex, so its slope where a controller works is steeper than the
	// global average; proposals should use Local. When the local rungs show
	// a smaller slope than the global fit (noise, a drifting load), Local is
	// the global fit with Fallback set.
	Global, Local Fit
}

// staircase plays a ladder of rates, Hold each, and aborts (rate 0 from then
// on) when a window's latency exceeds abort.
type staircase struct {
	rates   []float64
	hold    int             // steps per rung
	abort   []time.Duration // per store
	k       int
	aborted int // rung index that aborted, -1 if none
}

func (s *staircase) Name() string { return "staircase" }

func (s *staircase) Initial() float64 { return s.rates[0] }

func (s *staircase) Next(obs control.Observation) control.Decision {
	rung := s.k / s.hold
	s.k++
	if s.aborted < 0 && s.k > 1 {
		for i, sig := range obs.Signals {
			if sig.Err == nil && sig.Mean > s.abort[i] {
				s.aborted = (s.k - 2) / s.hold
			}
		}
	}
	if s.aborted >= 0 || rung >= len(s.rates) {
		return control.Decision{Rate: 0, Reason: "staircase done"}
	}
	r := s.rates[rung]
	return control.Decision{Rate: r, Prefetch: r, Reason: fmt.Sprintf("staircase rung %d", rung)}
}

// ProfilePlant runs the staircase on scenario s and fits the process gain.
//
// A tight contract may be crossed within the default ladder's first rungs,
// leaving too few points to fit. Then the ladder is refined: the staircase
// runs again on Steps equal rungs from 0 up to the first rung that crossed,
// at most ProfileRefinements times, until MinProfileRungs rungs lie within
// the contracts. Rates the caller gives are never refined.
func ProfilePlant(s Scenario, po ProfileOptions, opt Options) (Profile, error) {
	o, err := opt.resolve(s)
	if err != nil {
		return Profile{}, err
	}
	given := len(po.Rates) > 0
	if po, err = po.resolve(s, o); err != nil {
		return Profile{}, err
	}
	prof, e := profileLadder(s, po, o)
	for i := 0; !given && i < ProfileRefinements && prof.within() < MinProfileRungs; i++ {
		n := len(prof.Points)
		if n < 2 || !prof.Points[n-1].Over {
			break // the ladder never crossed, or crossed at rate 0: nothing finer helps
		}
		top := prof.Points[n-1].Rate
		po.Rates = []float64{0}
		for k := 1; k <= po.Steps; k++ {
			po.Rates = append(po.Rates, top*float64(k)/float64(po.Steps))
		}
		prof, e = profileLadder(s, po, o)
	}
	if len(prof.Points) > 0 && prof.within() == 0 {
		return prof, fmt.Errorf("sim: profile %s: %w: %s's latency %v with no migration is over its contract",
			s.Name, ErrContractBelowIdle, prof.Points[0].Victim, prof.Points[0].Latency.Round(10*time.Microsecond))
	}
	if err := prof.fitGains(e.stores); err != nil {
		return prof, fmt.Errorf("sim: profile %s: %w", s.Name, err)
	}
	return prof, nil
}

// ErrContractBelowIdle: some store's contract is not above its latency with
// no migration at all, so no rate meets it.
var ErrContractBelowIdle = errors.New("contract at or below the idle latency")

// Ladder refinement of ProfilePlant.
const (
	MinProfileRungs    = 4 // rungs within the contracts wanted for a fit (>= 3, FitGain's minimum)
	ProfileRefinements = 2 // at most this many finer ladders: 24² = 576× finer than the plant's max rate
)

// within counts p's rungs within the contracts.
func (p Profile) within() int {
	n := 0
	for _, pt := range p.Points {
		if !pt.Over {
			n++
		}
	}
	return n
}

// profileLadder plays po.Rates once and measures the rungs (po resolved).
func profileLadder(s Scenario, po ProfileOptions, o Options) (Profile, *engine) {
	perRung := int(po.Hold / o.Step)
	sc := &staircase{rates: po.Rates, hold: perRung, aborted: -1}
	for _, st := range s.Stores {
		sc.abort = append(sc.abort, time.Duration(AbortFactor*float64(contractOf(st, o))))
	}
	// The migration must not complete during the profile: make it endless.
	big := s
	big.Plant.Size = math.MaxInt64 / 4
	o.MaxDuration = time.Duration(len(po.Rates)) * po.Hold
	e := newEngine(big, sc, o)
	e.run()

	prof := Profile{Scenario: s.Name, Seed: o.Seed}
	for _, st := range s.Stores {
		prof.StoreNames = append(prof.StoreNames, st.Name)
	}
	prof.Points = measureRungs(e, po, sc.aborted)
	return prof, e
}

// resolve fills po's defaults for scenario s run with o and checks them.
func (po ProfileOptions) resolve(s Scenario, o Options) (ProfileOptions, error) {
	if po.Steps == 0 {
		po.Steps = DefaultProfileSteps
	}
	if po.Hold == 0 {
		po.Hold = DefaultProfileHold
	}
	if po.Settle == 0 {
		po.Settle = DefaultProfileSettle
	}
	if po.P == 0 {
		po.P = DefaultProfileP
	}
	switch {
	case po.Steps < 2:
		return po, fmt.Errorf("sim: profile: need at least 2 steps, got %d", po.Steps)
	case po.Hold%o.Step != 0 || po.Hold < 2*o.Step:
		return po, fmt.Errorf("sim: profile: hold must be a multiple of the step and at least 2 steps, got %v", po.Hold)
	case po.Settle < 0 || po.Settle >= po.Hold:
		return po, fmt.Errorf("sim: profile: settle must be in [0, hold), got %v", po.Settle)
	case !(po.P > 0 && po.P <= 1):
		return po, fmt.Errorf("sim: profile: P must be in (0,1], got %v", po.P)
	}
	if len(po.Rates) == 0 {
		po.Rates = []float64{0}
		for i := 1; i <= po.Steps; i++ {
			po.Rates = append(po.Rates, s.Plant.MaxRate*float64(i)/float64(po.Steps))
		}
	}
	for i, r := range po.Rates {
		if !(r >= 0) || math.IsInf(r, 0) || (i > 0 && r <= po.Rates[i-1]) {
			return po, fmt.Errorf("sim: profile: rates must be finite, >= 0 and ascending")
		}
	}
	return po, nil
}

// measureRungs returns the staircase's rungs as measured in run e, up to
// and including the first over a contract (or aborted: the rung index
// aborted, -1 for none).
func measureRungs(e *engine, po ProfileOptions, aborted int) []ProfilePoint {
	var pts []ProfilePoint
	hold, settle := po.Hold.Seconds(), po.Settle.Seconds()
	for i, r := range po.Rates {
		lo, hi := float64(i)*hold+settle, float64(i+1)*hold
		pt := ProfilePoint{Rate: r, Stores: make([]time.Duration, len(e.stores)), Aborted: aborted == i}
		best := math.Inf(1)
		for j, st := range e.stores {
			var sum float64
			var n int
			for _, p := range e.points {
				if p.T > lo && p.T <= hi {
					sum += p.Stores[j].Latency.Seconds() * float64(p.Stores[j].Count)
					n += p.Stores[j].Count
				}
			}
			if n > 0 {
				pt.Stores[j] = secs(sum / float64(n))
			}
			if pt.Stores[j].Seconds() > st.contract {
				pt.Over = true
			}
			if err := po.P*st.contract - pt.Stores[j].Seconds(); err < best {
				best, pt.Victim, pt.Latency = err, st.cfg.Name, pt.Stores[j]
			}
		}
		pt.Over = pt.Over || pt.Aborted
		pts = append(pts, pt)
		if pt.Over {
			break
		}
	}
	return pts
}

// fitGains fits p's Global and Local gains over its points within the
// contracts, and names its binding store (stores: the run's).
func (p *Profile) fitGains(stores []*storeSim) error {
	var xs, ys []float64
	var in []ProfilePoint
	for _, pt := range p.Points {
		if !pt.Over {
			xs = append(xs, pt.Rate)
			ys = append(ys, pt.Latency.Seconds())
			in = append(in, pt)
		}
	}
	var err error
	if p.Global, err = fit(xs, ys); err != nil {
		return fmt.Errorf("global fit: %w", err)
	}
	// Operating region of the binding store.
	last := in[len(in)-1]
	b := 0
	for j, st := range stores {
		if st.cfg.Name == last.Victim {
			b = j
		}
	}
	p.Binding, p.BindingContract = last.Victim, secs(stores[b].contract)
	idle := in[0].Stores[b].Seconds()
	cut := idle + 0.5*(stores[b].contract-idle)
	var lx, ly []float64
	for _, pt := range in {
		if y := pt.Stores[b].Seconds(); y >= cut {
			lx, ly = append(lx, pt.Rate), append(ly, y)
		}
	}
	if len(lx) < 3 {
		n := min(3, len(in))
		lx, ly = nil, nil
		for _, pt := range in[len(in)-n:] {
			lx, ly = append(lx, pt.Rate), append(ly, pt.Stores[b].Seconds())
		}
	}
	p.Local, err = fit(lx, ly)
	if err != nil && !errors.Is(err, tune.ErrNoGain) {
		return fmt.Errorf("local fit: %w", err)
	}
	if err != nil || p.Local.G < p.Global.G {
		// The plant is convex: its slope near the contract is at least the
		// average one. Less means a load that drifted during the few rungs
		// near the contract hid their slope (and a gain near 0 would give a
		// huge K); the global slope still holds over the range.
		p.Local = p.Global
		p.Local.Fallback = true
	}
	return nil
}

func fit(xs, ys []float64) (Fit, error) {
	g, b, r2, err := tune.FitGain(xs, ys)
	f := Fit{G: g, Intercept: b, R2: r2, Points: len(xs)}
	if len(xs) > 0 {
		f.MinRate, f.MaxRate = xs[0], xs[len(xs)-1]
	}
	return f, err
}
