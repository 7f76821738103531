package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/plan/rebalance"
)

// Result is what a fleet run reports.
type Result struct {
	Servers  int
	Tenants  int
	Moves    int
	SubMoves int   // Σ ⌈bytes/SubMove⌉ over the moves
	Bytes    int64 // Σ the moves' bytes
	Over     int   // servers the planner could not bring under the target

	PlanSeconds   float64 // virtual time from the plan's start to its last cutover
	Completed     bool    // false: abandoned after MaxSteps
	OracleSeconds float64 // the perfect-knowledge schedule's (Oracle)

	// WorstViolation is the largest violation fraction over the servers
	// that took part in a move: the share of the 1 s windows during their
	// moves in which some store on the server was above its contract.
	WorstViolation float64
	WorstServer    string
	// MeanViolation is that fraction over all those servers' move windows.
	MeanViolation float64
	// BystanderViolation is the largest violation fraction, over the whole
	// plan, of the servers that took part in no move.
	BystanderViolation float64
	MaxConcurrent      int     // most moves running in one second
	MeanRate           float64 // Σ bytes over Σ move-seconds, bytes/s per move

	// Series is the run second by second, OracleSeries the oracle's, and
	// Worst the worst server's (WorstServer) every second of the run.
	Series, OracleSeries []Second
	Worst                []ServerSecond
}

// Second is one second of a run.
type Second struct {
	T         int     // seconds since the plan started
	Running   int     // moves running
	Rate      float64 // Σ their rates, bytes/s
	Violating int     // servers in a move with some store's window over its contract
}

// ServerSecond is one second of one server.
type ServerSecond struct {
	T      int
	Ratio  float64 // the largest window latency ÷ contract over its stores
	Rate   float64 // its move's rate, bytes/s (0: no move)
	InMove bool
}

// srvCtl is a server's controller and its violation tally.
type srvCtl struct {
	ctl              *control.Integral
	k                float64
	rate             float64 // the controller's rate in force
	windows          int     // 1 s windows while in a move
	violated         int     // of those, windows with some store over its contract
	all, allViolated int
	trRatio, trRate  []float32 // per second: largest window ÷ contract, move rate (servers that take part only)
}

// Run executes plan on f: every server that takes part is tuned before the
// plan (tuneServer), then each second every running move goes at the lower
// of its two servers' integral rates, and the controllers see their stores'
// latency over the last Window seconds (see the package doc).
func Run(f *Fleet, plan rebalance.Result) (Result, error) {
	w := newWorld(f, plan)
	w.noise = rand.New(rand.NewPCG(f.Config.Seed, 0x5eed))
	ctl := make([]srvCtl, len(f.Servers))
	w.loads()
	for i := range w.srv {
		if !w.srv[i].part {
			continue
		}
		k, start, err := tuneServer(w, i)
		if err != nil {
			return Result{}, err
		}
		if err := ctl[i].reset(k, start, f.Config.P); err != nil {
			return Result{}, fmt.Errorf("fleet: server %s: %w", f.Servers[i].ID, err)
		}
	}
	r := Result{Servers: len(f.Servers), Tenants: len(f.Stores), Moves: len(plan.Moves), Bytes: plan.Bytes, Over: len(plan.Over)}
	for _, m := range plan.Moves {
		r.SubMoves += int((m.Bytes + SubMove - 1) / SubMove)
	}
	var moveSeconds float64
	for ; !w.finished() && w.t < MaxSteps; w.t++ {
		if w.t > 0 {
			w.loads()
		}
		w.start()
		running := 0
		for i := range w.moves {
			m := &w.moves[i]
			if m.started >= 0 && m.finished == 0 {
				m.rate = math.Min(MaxRate, math.Min(ctl[m.from].rate, ctl[m.to].rate))
				running++
				moveSeconds++
			}
		}
		r.MaxConcurrent = max(r.MaxConcurrent, running)
		sec := Second{T: w.t, Running: running}
		for i := range w.moves {
			if m := &w.moves[i]; m.started >= 0 && m.finished == 0 {
				sec.Rate += m.rate
			}
		}
		sec.Violating = measure(w, ctl)
		r.Series = append(r.Series, sec)
		steer(w, ctl)
		w.progress()
	}
	r.Completed = w.finished()
	r.PlanSeconds = w.end
	if !r.Completed {
		r.PlanSeconds = float64(w.t)
	}
	if moveSeconds > 0 {
		r.MeanRate = float64(plan.Bytes) / moveSeconds
	}
	tally(&r, w, ctl)
	o, series, err := Oracle(f, plan)
	if err != nil {
		return r, err
	}
	r.OracleSeconds, r.OracleSeries = o, series
	return r, nil
}

// tally fills r's violation figures and the worst server's trace.
func tally(r *Result, w *world, ctl []srvCtl) {
	var win, vio int
	worst := -1
	for i, c := range ctl {
		if w.srv[i].part {
			win += c.windows
			vio += c.violated
			if c.windows > 0 && (worst < 0 || float64(c.violated)/float64(c.windows) > r.WorstViolation) {
				r.WorstViolation, worst = float64(c.violated)/float64(c.windows), i
			}
		} else if c.all > 0 {
			r.BystanderViolation = math.Max(r.BystanderViolation, float64(c.allViolated)/float64(c.all))
		}
	}
	if win > 0 {
		r.MeanViolation = float64(vio) / float64(win)
	}
	if worst < 0 {
		return
	}
	r.WorstServer = w.f.Servers[worst].ID
	for t, ratio := range ctl[worst].trRatio {
		rate := float64(ctl[worst].trRate[t])
		r.Worst = append(r.Worst, ServerSecond{T: t, Ratio: float64(ratio), Rate: rate, InMove: rate > 0})
	}
}

// reset gives c a fresh integral at rate start.
func (c *srvCtl) reset(k, start, P float64) error {
	p := control.DefaultIntegralParams()
	p.K, p.MaxRate, p.Initial = k, MaxRate, math.Min(math.Max(start, 0), MaxRate)
	p.P = P
	ctl, err := control.NewIntegral(p)
	if err != nil {
		return err
	}
	c.ctl, c.k, c.rate = ctl, k, p.Initial
	return nil
}

// measure draws every store's 1 s window latency (true latency at its
// server's utilisation, times 1 + Noise·N(0,1)), keeps the last Window of
// them and tallies each server's windows over a contract.
// It returns how many servers in a move had a window over a contract.
func measure(w *world, ctl []srvCtl) (violating int) {
	for i := range w.srv {
		s := &w.srv[i]
		rho := w.rho(i)
		ratio := 0.0
		for _, j := range s.stores {
			st := &w.f.Stores[j]
			m := latency(st.L0, rho) * (1 + Noise*w.noise.NormFloat64())
			ss := &w.st[j]
			ss.win[ss.n%Window] = m
			ss.n++
			ratio = math.Max(ratio, m/st.Contract)
		}
		over := ratio > 1
		c := &ctl[i]
		c.all++
		if over {
			c.allViolated++
		}
		if s.part {
			rate := 0.0
			if s.move >= 0 {
				rate = w.moves[s.move].rate
			}
			c.trRatio, c.trRate = append(c.trRatio, float32(ratio)), append(c.trRate, float32(rate))
		}
		if s.move >= 0 {
			c.windows++
			if over {
				c.violated++
				violating++
			}
		}
	}
	return violating
}

// steer steps the integral of every server in a move on its stores' mean
// latency over the last Window seconds. The side that did not bind (its
// rate above the move's) is held to at most 1.25 × the move's rate + 1 MB/s:
// integrating an error its server never had to bear would wind it up, and
// the move would overshoot when the other side frees up (conditional
// integration).
func steer(w *world, ctl []srvCtl) {
	at := time.Unix(int64(w.t), 0)
	var sig []control.Signal
	for i := range w.moves {
		m := &w.moves[i]
		if m.started < 0 || m.finished > 0 {
			continue
		}
		for _, s := range [2]int{m.from, m.to} {
			sig = sig[:0]
			for _, j := range w.srv[s].stores {
				ss := &w.st[j]
				n := min(ss.n, Window)
				var sum float64
				for k := range n {
					sum += ss.win[k]
				}
				sig = append(sig, control.Signal{Name: w.f.Stores[j].ID, Mean: dur(sum / float64(n)), Contract: dur(w.f.Stores[j].Contract)})
			}
			c := &ctl[s]
			c.rate = c.ctl.Next(control.Observation{At: at, Signals: sig}).Rate
		}
		applied := math.Min(MaxRate, math.Min(ctl[m.from].rate, ctl[m.to].rate))
		for _, s := range [2]int{m.from, m.to} {
			if cap := 1.25*applied + 1e6; ctl[s].rate > cap {
				_ = ctl[s].reset(ctl[s].k, cap, w.f.Config.P) // k, cap and P were valid at the first reset
			}
		}
	}
}

func dur(s float64) time.Duration { return time.Duration(s * 1e9) }
