package plan

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicedb/sluice/control"
)

// Window is one store's latency over the last window, as the proxy measures
// it per tenant (ms); Count 0 = no transaction ended in it. Idle says more:
// the proxy has no client session of the store open either (a session
// between transactions counts), so no one is waiting on it.
type Window struct {
	Store         string
	Count         int
	MeanMs, P99Ms float64
	P95Ms         float64
	Idle          bool
}

// Controller returns the control loop of a plan with a latency method: for
// MethodIntegral Aqueduct's integral controller (control.Integral: acts on
// the worst store's E_i = P·LC_i − L_i), for MethodPID the profile's PID
// on the worst store's latency as a fraction of its contract (Observe
// scales every store to the reference contract RefContract). maxRate is
// the plan's MaxRate, else prof.MaxRate; K the plan's, else
// control.HeuristicIntegralK on the tightest contract. Rates are the plan's
// aggregate, bytes/s.
func Controller(p Plan, prof control.Profile) (control.Controller, error) {
	maxRate := MaxRate(p, prof)
	switch p.Method {
	case MethodIntegral:
		ip := control.DefaultIntegralParams()
		ip.MaxRate, ip.K = maxRate, p.K
		ip.DefaultContract = RefContract(p)
		if ip.K == 0 {
			ip.K = control.HeuristicIntegralK(maxRate, RefContract(p))
		}
		return control.NewIntegral(ip)
	case MethodPID:
		return control.NewPID(prof.PID(RefContract(p), maxRate, control.StatMean))
	}
	return nil, fmt.Errorf("plan: method %s has no control loop", p.Method)
}

// MaxRate is the plan's top aggregate rate, bytes/s.
func MaxRate(p Plan, prof control.Profile) float64 {
	if p.MaxRate > 0 {
		return p.MaxRate
	}
	return prof.MaxRate
}

// RefContract is the tightest store contract of p (the PID's setpoint, to
// which Observe scales every store for it).
func RefContract(p Plan) time.Duration {
	lc := math.Inf(1)
	for _, s := range p.Stores {
		lc = math.Min(lc, s.ContractMs)
	}
	if math.IsInf(lc, 1) {
		lc = DefaultContractMs
	}
	return msDur(lc)
}

// Observe turns the stores' windows into the control loop's observation at
// at. Every store of the plan is looked for; a store with no window, or
// none with a transaction, gives no signal, unless its window is Idle (no
// client connected): then an idle signal, which the integral counts as
// full slack, so that a plan on servers nobody uses moves at speed rather
// than hold at its floor. err (the proxy did not answer) gives one failed signal: the
// controllers hold the rate. For MethodIntegral each signal carries its
// store's contract; for MethodPID each latency is scaled by RefContract /
// LC_i, so the PID's single setpoint is every store's own contract and its
// max over signals is the worst store.
//
// A running move that started less than settle before at (the profile's
// settle time: its backup checkpoint, and the last move's handover, are
// still in the windows) makes the step Settling: every signal carries
// control.ErrSettling with its values, and the controllers hold, as a
// single migration's governor has them hold after its copy's start.
func Observe(p Plan, ws []Window, err error, at time.Time, settle time.Duration) control.Observation {
	obs := control.Observation{At: at, Lag: -1}
	if err != nil {
		obs.Signals = []control.Signal{{Name: "proxy", Err: err}}
		return obs
	}
	defer func() {
		for _, m := range p.Moves {
			if m.Status == Running && at.Sub(m.Started) < settle {
				obs.Settling = true
			}
		}
		for i := range obs.Signals {
			if obs.Settling && !obs.Signals[i].Idle { // no clients, no windows to disturb
				obs.Signals[i].Err = control.ErrSettling
			}
		}
	}()
	ref := RefContract(p)
	for _, s := range p.Stores {
		i := slices.IndexFunc(ws, func(w Window) bool { return w.Store == s.Name && w.Count > 0 })
		if i < 0 {
			if slices.ContainsFunc(ws, func(w Window) bool { return w.Store == s.Name && w.Idle }) {
				obs.Signals = append(obs.Signals, control.Signal{Name: s.Name, Contract: msDur(s.ContractMs), Idle: true})
			}
			continue
		}
		w, lc := ws[i], msDur(s.ContractMs)
		sig := control.Signal{Name: s.Name, Mean: msDur(w.MeanMs), P95: msDur(w.P95Ms), P99: msDur(w.P99Ms), Count: w.Count, Contract: lc}
		if p.Method == MethodPID {
			f := float64(ref) / float64(lc)
			sig.Mean, sig.P95, sig.P99 = time.Duration(float64(sig.Mean)*f), time.Duration(float64(sig.P95)*f), time.Duration(float64(sig.P99)*f)
			sig.Contract = 0
		}
		obs.Signals = append(obs.Signals, sig)
	}
	return obs
}

// Worst returns the store with the smallest P·LC_i − L_i in ws (the
// integral default P), its mean latency and contract; "" if none.
func Worst(p Plan, ws []Window) (name string, latMs, contractMs float64) {
	best := math.Inf(1)
	for _, s := range p.Stores {
		for _, w := range ws {
			if w.Store == s.Name && w.Count > 0 {
				if e := control.DefaultIntegralParams().P*s.ContractMs - w.MeanMs; e < best {
					best, name, latMs, contractMs = e, s.Name, w.MeanMs, s.ContractMs
				}
			}
		}
	}
	return name, latMs, contractMs
}

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
