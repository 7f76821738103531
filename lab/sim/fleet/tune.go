package fleet

import (
	"fmt"
	"math"

	"github.com/sluicedb/sluice/control/tune"
)

// Profiling of a server before the plan, as `sluice tune` does on a live
// one: a staircase of fixed rates, ProfileHold seconds each.
const (
	ProfileSteps = 40 // rungs of the default ladder, every Bandwidth/ProfileSteps
	ProfileHold  = 10 // seconds per rung: the rung's latency is the mean of that many noisy windows
	StartShare   = 0.75
)

// tuneServer profiles server i at its load now (no move running) and
// returns the integral's K = (1 − Pole)/G, G the queue model's gain at the
// binding store's reference P·LC (control/tune.FitQueue, GainAt), and a
// start rate: the highest rung whose binding latency stayed within
// StartShare of its contract, else the lowest non-zero rung within every
// contract. The ladder is refined below the first rung over a contract
// when fewer than 4 rungs lie within them, as lab/sim's profile does.
func tuneServer(w *world, i int) (k, start float64, err error) {
	bw := w.f.Servers[i].Bandwidth
	top := bw
	var rates, lats []float64
	var lc float64
	for range 3 {
		rates, lats, lc, start = profileServer(w, i, top)
		if len(rates) >= 4 || len(rates) == 0 {
			break
		}
		top = rates[len(rates)-1] + top/ProfileSteps // the first rung over
	}
	id := w.f.Servers[i].ID
	if len(rates) < 3 {
		return 0, 0, fmt.Errorf("fleet: tune %s: %d rungs within the contracts", id, len(rates))
	}
	q, err := tune.FitQueue(rates, lats)
	if err != nil {
		return 0, 0, fmt.Errorf("fleet: tune %s: %w", id, err)
	}
	ref := w.f.Config.P * lc
	k, err = tune.ProposeK(q.GainAt(math.Max(ref, q.L0*1.01)), w.f.Config.Pole)
	if err != nil {
		return 0, 0, fmt.Errorf("fleet: tune %s: %w", id, err)
	}
	return k, start, nil
}

// profileServer plays rungs 0, top/ProfileSteps, … on server i until some
// store's rung mean is over its contract, and returns the rungs within
// the contracts with the binding store's latencies (the store with the
// least P·LC − L at the last of them), its contract and the start rate.
func profileServer(w *world, i int, top float64) (rates, lats []float64, lc, start float64) {
	s := &w.srv[i]
	bw := w.f.Servers[i].Bandwidth
	p := w.f.Config.P
	per := make([][]float64, len(s.stores))
	for k := 0; k <= ProfileSteps; k++ {
		r := top * float64(k) / ProfileSteps
		rho := s.fg + r/bw
		over := false
		for n, j := range s.stores {
			st := &w.f.Stores[j]
			m := latency(st.L0, rho) * (1 + Noise/math.Sqrt(ProfileHold)*w.noise.NormFloat64())
			per[n] = append(per[n], m)
			over = over || m > st.Contract
		}
		if over {
			break
		}
		rates = append(rates, r)
	}
	if len(rates) == 0 {
		return nil, nil, 0, 0
	}
	last, b := len(rates)-1, 0
	best := math.Inf(1)
	for n, j := range s.stores {
		if e := p*w.f.Stores[j].Contract - per[n][last]; e < best {
			best, b = e, n
		}
	}
	lc = w.f.Stores[s.stores[b]].Contract
	lats = per[b][:len(rates)]
	for n, r := range rates {
		if r > 0 && (start == 0 || lats[n] <= StartShare*lc) {
			start = r
		}
	}
	return rates, lats, lc, start
}
