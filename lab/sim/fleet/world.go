package fleet

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/sluicedb/sluice/plan/rebalance"
)

// world is the fleet in motion: where every store is, each server's load
// this second, the moves and the schedule. Run and Oracle each step their
// own world through the same load draws; only how a move's rate is chosen
// differs (a policy).
type world struct {
	f     *Fleet
	srv   []srvState
	st    []stState
	moves []move
	queue []int // pending moves, in start priority
	t     int   // current second
	done  int   // moves finished
	end   float64
	noise *rand.Rand // measurement noise (Run only)
}

type srvState struct {
	base   float64 // Σ load of its stores
	stores []int
	drift  float64
	rng    *rand.Rand // the load drift's own stream
	fg     float64    // foreground utilisation this second
	move   int        // move in progress, -1 none
	part   bool       // takes part in some move of the plan
}

type stState struct {
	server int
	win    [Window]float64 // last measured windows, seconds (ring)
	n      int             // windows measured on this server so far
}

type move struct {
	tenant   int
	from, to int
	bytes    float64
	moved    float64
	rate     float64 // bytes/s in force this second
	started  int     // second it started, -1 pending
	finished float64 // seconds
}

// newWorld sets f's stores on their initial servers and queues plan's moves
// by start priority: the larger of the bytes its source and its destination
// have to move in the whole plan first (the busiest servers are the plan's
// critical path), then plan order.
func newWorld(f *Fleet, plan rebalance.Result) *world {
	w := &world{f: f, srv: make([]srvState, len(f.Servers)), st: make([]stState, len(f.Stores))}
	sid := make(map[string]int, len(f.Servers))
	for i, s := range f.Servers {
		sid[s.ID] = i
		w.srv[i] = srvState{move: -1, rng: rand.New(rand.NewPCG(f.Config.Seed, uint64(i)+1))}
	}
	tid := make(map[string]int, len(f.Stores))
	for j, st := range f.Stores {
		tid[st.ID] = j
		w.st[j].server = st.Server
		w.srv[st.Server].stores = append(w.srv[st.Server].stores, j)
		w.srv[st.Server].base += st.Load
	}
	total := make([]float64, len(f.Servers))
	for _, m := range plan.Moves {
		mv := move{tenant: tid[m.Tenant], from: sid[m.From], to: sid[m.To], bytes: float64(m.Bytes), started: -1}
		w.moves = append(w.moves, mv)
		total[mv.from] += mv.bytes
		total[mv.to] += mv.bytes
		w.srv[mv.from].part, w.srv[mv.to].part = true, true
	}
	for i := range w.moves {
		w.queue = append(w.queue, i)
	}
	busiest := func(i int) float64 { return max(total[w.moves[i].from], total[w.moves[i].to]) }
	slices.SortStableFunc(w.queue, func(a, b int) int { return cmp.Compare(busiest(b), busiest(a)) })
	return w
}

// loads draws this second's foreground utilisation of every server: its
// stores' load times the wave and a bounded AR(1) drift.
func (w *world) loads() {
	for i := range w.srv {
		s := &w.srv[i]
		s.drift = math.Max(-driftMax, math.Min(driftMax, DriftCoef*s.drift+DriftSigma*s.rng.NormFloat64()))
		m := 1 + WaveAmplitude*math.Sin(2*math.Pi*float64(w.t)/WavePeriod+w.f.Servers[i].Phase) + s.drift
		s.fg = s.base * m
	}
}

// start starts every pending move whose servers are both free, in
// priority order.
func (w *world) start() {
	kept := w.queue[:0]
	for _, i := range w.queue {
		m := &w.moves[i]
		if w.srv[m.from].move < 0 && w.srv[m.to].move < 0 {
			m.started = w.t
			w.srv[m.from].move, w.srv[m.to].move = i, i
			continue
		}
		kept = append(kept, i)
	}
	w.queue = kept
}

// rho is server i's utilisation this second: foreground plus its move's
// I/O (read at a source, write at a destination) over its bandwidth.
func (w *world) rho(i int) float64 {
	s := &w.srv[i]
	r := s.fg
	if s.move >= 0 {
		r += w.moves[s.move].rate / w.f.Servers[i].Bandwidth
	}
	return r
}

// latency is the mean latency of a store with idle-server latency l0 on a
// server at utilisation rho: l0/(1 − rho), saturated at Saturation.
func latency(l0, rho float64) float64 { return l0 / (1 - math.Min(rho, Saturation)) }

// progress moves every active move's bytes for this second and cuts over
// the ones that finish: the tenant's load and stores change server, both
// servers are free from the next second.
func (w *world) progress() {
	for i := range w.moves {
		m := &w.moves[i]
		if m.started < 0 || m.finished > 0 {
			continue
		}
		left := m.bytes - m.moved
		if m.rate >= left {
			m.moved = m.bytes
			m.finished = float64(w.t) + left/m.rate
			w.cutover(m)
			w.done++
			w.end = math.Max(w.end, m.finished)
			continue
		}
		m.moved += m.rate
	}
}

func (w *world) cutover(m *move) {
	st := &w.f.Stores[m.tenant]
	from, to := &w.srv[m.from], &w.srv[m.to]
	from.stores = slices.DeleteFunc(from.stores, func(j int) bool { return j == m.tenant })
	from.base -= st.Load
	to.stores = append(to.stores, m.tenant)
	to.base += st.Load
	from.move, to.move = -1, -1
	w.st[m.tenant] = stState{server: m.to}
}

// rhoMax is the utilisation at which server i's tightest store reaches its
// contract: 1 − min_i L0_i/LC_i.
func (w *world) rhoMax(i int) float64 {
	worst := 0.0
	for _, j := range w.srv[i].stores {
		st := &w.f.Stores[j]
		worst = math.Max(worst, st.L0/st.Contract)
	}
	return math.Min(1-worst, Saturation)
}

// finished reports whether every move has ended.
func (w *world) finished() bool { return w.done == len(w.moves) }
