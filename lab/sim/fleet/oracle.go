package fleet

import (
	"fmt"
	"math"

	"github.com/sluicedb/sluice/plan/rebalance"
)

// Oracle returns the plan time of the perfect-knowledge schedule: the same
// moves, started by the same rule (in the same priority, whenever both of a
// move's servers are free), through the same load draws, but each second
// every running move goes at
//
//	min(MaxRate, slack(source), slack(destination))
//	slack(s) = Bandwidth_s · (ρmax_s − fg_s(t)),  ρmax_s = 1 − max_i L0_i/LC_i
//
// the rate at which the server's tightest store sits exactly at its
// contract this very second (0 if it is already there). It knows every
// server's load ahead of any measurement, ignores the measurement noise and
// needs no ramp: no controller can move faster without exceeding a
// contract on average. A move's last second counts its fraction.
// It returns that time and the schedule second by second.
func Oracle(f *Fleet, plan rebalance.Result) (float64, []Second, error) {
	w := newWorld(f, plan)
	var series []Second
	for ; !w.finished() && w.t < MaxSteps; w.t++ {
		w.loads()
		w.start()
		sec := Second{T: w.t}
		for i := range w.moves {
			m := &w.moves[i]
			if m.started >= 0 && m.finished == 0 {
				m.rate = math.Min(MaxRate, math.Min(slack(w, m.from), slack(w, m.to)))
				sec.Running++
				sec.Rate += m.rate
			}
		}
		series = append(series, sec)
		w.progress()
	}
	if !w.finished() {
		return float64(w.t), series, fmt.Errorf("fleet: oracle: the plan does not finish within %d s even with perfect knowledge", MaxSteps)
	}
	return w.end, series, nil
}

// slack is the migration rate server i can bear this second with its
// tightest store exactly at its contract.
func slack(w *world, i int) float64 {
	return math.Max(0, w.f.Servers[i].Bandwidth*(w.rhoMax(i)-w.srv[i].fg))
}
