package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicedb/sluice/control"
)

// errNoTxn is the Err of a Signal whose window saw no transaction complete.
var errNoTxn = errors.New("no transaction completed in the window")

// RNG streams: every random quantity has its own PCG stream, so the idle twin
// of a run (no migration) sees exactly the same arrivals and service demands.
const (
	streamLoad    = 1
	streamNoise   = 2
	streamArrival = 1000 // + store index
	streamWork    = 2000 // + store index
)

// minSpeed is the slowest a transaction ever runs (fraction of full speed),
// so a migration that takes more than a store's share never stalls it to 0.
const minSpeed = 0.02

// txn is one transaction of one store.
type txn struct {
	arrive float64 // arrival time, s
	work   float64 // service demand at full speed, s
	fin    float64 // store's virtual-work clock value at which it completes
}

// txnHeap is a binary min-heap of running transactions ordered by fin. All
// running transactions of a store progress at the same speed, so they finish
// in fin order.
type txnHeap []txn

func (h *txnHeap) push(x txn) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].fin <= a[i].fin {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *txnHeap) pop() txn {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && a[l].fin < a[m].fin {
			m = l
		}
		if r < n && a[r].fin < a[m].fin {
			m = r
		}
		if m == i {
			break
		}
		a[m], a[i] = a[i], a[m]
		i = m
	}
	*h = a
	return top
}

// storeSim is the running state of one store.
type storeSim struct {
	cfg       Store
	contract  float64 // s
	rate      float64 // base arrivals/s
	mu, sigma float64 // lognormal parameters of the demand
	arrRng    *rand.Rand
	workRng   *rand.Rand

	queue   []txn // FIFO of waiting transactions, from qhead
	qhead   int
	active  txnHeap
	v       float64 // virtual-work clock: seconds of full-speed work done per running txn
	speed   float64 // current speed of each running txn, fraction of full speed
	nextArr float64 // next candidate arrival time

	// Current 1 s window.
	winSum float64
	winLat []float64
	// Latencies of the last windows (ring), for the control window.
	ring [][]float64
	// Completions during the current control step (HostIO).
	stepDone int

	// Completions at t >= 0: time and latency, s.
	compT []float64
	compL []float64
}

func (s *storeSim) waiting() int { return len(s.queue) - s.qhead }

// engine is one simulation run. It is single-threaded and uses virtual time
// only.
type engine struct {
	scn   Scenario
	opt   Options
	ctrl  control.Controller // nil: no migration (idle twin)
	load  Load
	lmax  float64
	noise *rand.Rand
	epoch time.Time

	stores  []*storeSim
	nActive int
	t       float64

	tick      float64 // s
	perSec    int     // ticks per second
	perStep   int     // seconds per control step
	winSecs   int     // seconds per control window
	horizon   float64 // idle twin: stop at this time
	maxT      float64 // migration time limit
	tailSecs  float64
	stopAt    float64 // once set (>= 0), stop when t reaches it
	stopSet   bool
	started   bool
	done      bool
	endT      float64
	size      float64
	sent      float64
	readBytes float64
	buf       float64
	rate      float64 // commanded send rate, bytes/s
	prefetch  float64 // commanded read rate, bytes/s
	readRate  float64 // actual disk read rate in the current tick, bytes/s
	u         float64 // capacity share of the migration in the current tick
	ufg       float64 // disk share of the foreground's offered I/O in the current tick
	lastDec   control.Decision
	steps     int

	// Accumulators over the current second and control step.
	secSent, secRead   float64
	stepRead           float64
	stepBusy, stepUtil float64
	stepStart          float64

	points []Point
}

// newEngine prepares a run. opt must be resolved (see Options.resolve).
func newEngine(scn Scenario, ctrl control.Controller, opt Options) *engine {
	e := &engine{
		scn:     scn,
		opt:     opt,
		ctrl:    ctrl,
		noise:   rand.New(rand.NewPCG(opt.Seed, streamNoise)),
		epoch:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		tick:    opt.Tick.Seconds(),
		perSec:  int(math.Round(float64(time.Second) / float64(opt.Tick))),
		perStep: int(opt.Step / time.Second),
		winSecs: int(opt.Window / time.Second),
		maxT:    opt.MaxDuration.Seconds(),
		size:    float64(scn.Plant.Size),
		t:       -opt.Warmup.Seconds(),
	}
	e.tailSecs = opt.Tail.Seconds()
	e.load = scn.NewLoad(rand.New(rand.NewPCG(opt.Seed, streamLoad)))
	e.lmax = e.load.Max()
	for i, st := range scn.Stores {
		s := &storeSim{
			cfg:     st,
			rate:    st.Rate,
			arrRng:  rand.New(rand.NewPCG(opt.Seed, streamArrival+uint64(i))),
			workRng: rand.New(rand.NewPCG(opt.Seed, streamWork+uint64(i))),
			ring:    make([][]float64, e.winSecs),
			speed:   1,
		}
		s.contract = contractOf(st, opt).Seconds()
		s.sigma = math.Sqrt(math.Log(1 + st.WorkCV*st.WorkCV))
		s.mu = math.Log(st.Work.Seconds()) - s.sigma*s.sigma/2
		s.nextArr = e.t + e.gap(s)
		e.stores = append(e.stores, s)
	}
	return e
}

// contractOf is the latency contract of st in a run with opt.
func contractOf(st Store, opt Options) time.Duration {
	switch {
	case opt.Contract > 0:
		return opt.Contract
	case st.Contract > 0:
		return st.Contract
	}
	return opt.Setpoint
}

// gap draws the time to the next candidate arrival of s (thinning at the
// load's maximum).
func (e *engine) gap(s *storeSim) float64 {
	r := s.rate * e.lmax
	if r <= 0 {
		return math.Inf(1)
	}
	return s.arrRng.ExpFloat64() / r
}

// run simulates until the migration has finished (plus the tail) or, for the
// idle twin, until horizon.
func (e *engine) run() {
	nextTick := 0 // index of the next tick boundary
	t0 := e.t
	e.stepStart = e.t
	for {
		tn := t0 + float64(nextTick)*e.tick
		kind, who := -1, -1 // -1 tick, 0 arrival, 1 completion
		for i, s := range e.stores {
			if s.nextArr < tn {
				tn, kind, who = s.nextArr, 0, i
			}
			if len(s.active) > 0 {
				if tc := e.t + (s.active[0].fin-s.v)/s.speed; tc < tn {
					tn, kind, who = tc, 1, i
				}
			}
		}
		e.advance(tn)
		switch kind {
		case 0:
			e.arrive(e.stores[who])
		case 1:
			e.complete(e.stores[who])
		default:
			if nextTick > 0 && nextTick%e.perSec == 0 {
				e.second()
				if e.stopSet && e.t >= e.stopAt-1e-9 {
					return
				}
			}
			e.onTick(nextTick)
			nextTick++
		}
	}
}

// advance moves time to tn, progressing every running transaction.
func (e *engine) advance(tn float64) {
	dt := tn - e.t
	if dt <= 0 {
		return
	}
	for _, s := range e.stores {
		if len(s.active) > 0 {
			s.v += s.speed * dt
		}
	}
	if e.nActive > 0 || e.u > 0 {
		e.stepBusy += dt
	}
	e.stepUtil += dt * math.Min(1, e.u+e.ufg)
	e.t = tn
}

// setSpeeds recomputes every store's speed after the number of running
// transactions or the migration's share changed.
func (e *engine) setSpeeds() {
	share := 1.0
	if c := e.scn.Plant.Parallelism; float64(e.nActive) > c {
		share = c / float64(e.nActive)
	}
	for _, s := range e.stores {
		s.speed = math.Max(minSpeed, 1-s.cfg.Exposure*e.u-e.ufg) * share
	}
}

func (e *engine) arrive(s *storeSim) {
	accept := e.lmax <= 0 || s.arrRng.Float64()*e.lmax < e.load.At(e.t)
	s.nextArr = e.t + e.gap(s)
	if !accept {
		return
	}
	x := txn{arrive: e.t, work: math.Exp(s.mu + s.sigma*s.workRng.NormFloat64())}
	if len(s.active) < s.cfg.MPL {
		e.start(s, x)
		return
	}
	s.queue = append(s.queue, x)
}

func (e *engine) start(s *storeSim, x txn) {
	x.fin = s.v + x.work
	s.active.push(x)
	e.nActive++
	e.setSpeeds()
}

func (e *engine) complete(s *storeSim) {
	x := s.active.pop()
	s.v = math.Max(s.v, x.fin)
	e.nActive--
	lat := e.t - x.arrive
	s.winSum += lat
	s.winLat = append(s.winLat, lat)
	s.stepDone++
	if e.t >= 0 {
		s.compT = append(s.compT, e.t)
		s.compL = append(s.compL, lat)
	}
	if s.waiting() > 0 {
		next := s.queue[s.qhead]
		s.qhead++
		if s.qhead > 1024 && s.qhead*2 > len(s.queue) {
			s.queue = append(s.queue[:0], s.queue[s.qhead:]...)
			s.qhead = 0
		}
		e.start(s, next)
		return
	}
	e.setSpeeds()
}

// second closes the 1 s window ending now.
func (e *engine) second() {
	T := math.Round(e.t)
	p := Point{
		T:        T,
		Rate:     e.secSent,
		Read:     e.secRead,
		Buffered: e.buf,
		Moved:    e.sent,
		Load:     e.load.At(T - 0.5),
		Phase:    e.phase(T),
		Stores:   make([]StorePoint, len(e.stores)),
	}
	var sum float64
	var n int
	for i, s := range e.stores {
		k := len(s.winLat)
		sp := StorePoint{Count: k, InSystem: len(s.active) + s.waiting()}
		if k > 0 {
			sp.Latency = secs(s.winSum / float64(k))
		}
		p.Stores[i] = sp
		sum += s.winSum
		n += k
		p.Queue += s.waiting()
		// Rotate the ring: the oldest window's slice is reused.
		old := s.ring[0]
		copy(s.ring, s.ring[1:])
		s.ring[len(s.ring)-1] = s.winLat
		s.winLat = old[:0]
		s.winSum = 0
	}
	p.Count = n
	if n > 0 {
		p.Latency = secs(sum / float64(n))
	}
	e.points = append(e.points, p)
	e.secSent, e.secRead = 0, 0
}

func (e *engine) phase(T float64) string {
	switch {
	case T <= 0:
		return "warmup"
	case e.ctrl == nil:
		return "idle"
	case e.done && T-1 >= e.endT:
		return "done"
	}
	return "migrating"
}

// onTick runs at tick boundary i: control steps on whole seconds, then the
// migration's flows for the coming tick.
func (e *engine) onTick(i int) {
	e.setForeground()
	if e.ctrl == nil {
		if !e.stopSet && e.t >= 0 {
			e.stopAt, e.stopSet = math.Ceil(e.horizon), true
		}
		return
	}
	if e.t >= -1e-9 && !e.started {
		e.started = true
	}
	atSecond := i%e.perSec == 0
	sec := int(math.Round(e.t))
	if e.started && !e.done && atSecond && sec%e.perStep == 0 {
		e.control()
	}
	if !e.started || e.done {
		e.readRate, e.u = 0, 0
		e.setSpeeds()
		return
	}
	if e.t >= e.maxT-1e-9 {
		// Out of time: the migration is abandoned here.
		e.done, e.endT = true, e.maxT
		e.stopAt, e.stopSet = math.Ceil(e.maxT+e.tailSecs), true
		e.readRate, e.u = 0, 0
		e.setSpeeds()
		return
	}
	e.flow()
}

// setForeground sets the disk share of the workload's offered I/O for the
// coming tick.
func (e *engine) setForeground() {
	p := e.scn.Plant
	m := e.load.At(e.t)
	var u float64
	for _, s := range e.stores {
		u += s.rate * m * p.OpsPerTxn * p.IOTime.Seconds()
	}
	e.ufg = u
	e.setSpeeds()
}

// flow moves data for one tick at the commanded rates: sends come out of the
// read-ahead buffer, reading through to disk when it is empty; prefetch
// fills the buffer up to its cap. Only disk reads use server capacity.
func (e *engine) flow() {
	dt := e.tick
	unsent := e.size - e.sent
	unread := e.size - e.readBytes
	want := math.Min(e.rate*dt, unsent)
	fromBuf := math.Min(want, e.buf)
	through := math.Min(want-fromBuf, unread)
	send := fromBuf + through
	read := through
	room := float64(e.scn.Plant.Buffer) - (e.buf - fromBuf)
	extra := math.Max(0, math.Min(e.prefetch*dt-through, math.Min(room, unread-through)))
	read += extra
	e.buf += extra - fromBuf
	e.readBytes += read
	finish := e.sent+send >= e.size-0.5
	if finish {
		// Completion inside this tick, at the send rate.
		frac := 1.0
		if e.rate > 0 {
			frac = math.Min(1, unsent/(e.rate*dt))
		}
		e.endT = e.t + frac*dt
		e.sent = e.size
		e.done = true
		e.stopAt, e.stopSet = math.Ceil(e.endT+e.tailSecs), true
	} else {
		e.sent += send
	}
	e.secSent += send
	e.secRead += read
	e.stepRead += read
	e.readRate = read / dt
	e.u = math.Min(1, e.readRate/e.scn.Plant.Capacity)
	e.setSpeeds()
}

// control builds the observation of the window ending now and asks the
// controller for the next rate. The observation carries the migration's
// progress as the agent's loop reports a snapshot's: the copy's stage and
// bytes, and the time it still needs at the rate in force; the replay lag
// is unknown (there is no catch-up stage).
func (e *engine) control() {
	obs := control.Observation{At: e.epoch.Add(secs(e.t))}
	var pv time.Duration
	for _, s := range e.stores {
		sig := control.Signal{Name: s.cfg.Name, Contract: secs(s.contract)}
		var all []float64
		for _, w := range s.ring {
			all = append(all, w...)
		}
		sig.Count = len(all)
		if len(all) == 0 {
			sig.Err = errNoTxn
		} else {
			var sum float64
			for _, v := range all {
				sum += v
			}
			slices.Sort(all)
			f := 1.0
			if e.opt.Noise > 0 {
				f = math.Max(0.05, 1+e.opt.Noise*e.noise.NormFloat64())
			}
			sig.Mean = secs(f * sum / float64(len(all)))
			sig.P95 = secs(f * quantile(all, 0.95))
			sig.P99 = secs(f * quantile(all, 0.99))
			pv = max(pv, sig.Mean)
		}
		obs.Signals = append(obs.Signals, sig)
	}
	obs.Host = e.hostIO()
	obs.Stage, obs.Bytes, obs.Lag, obs.Remaining = control.StageCopy, int64(e.sent), -1, e.remaining()
	d := e.ctrl.Next(obs)
	e.steps++
	e.rate = clampRate(d.Rate, e.scn.Plant.MaxRate)
	e.prefetch = clampRate(d.Prefetch, e.scn.Plant.MaxRate)
	e.lastDec = d
	if n := len(e.points); n > 0 && e.points[n-1].T == math.Round(e.t) {
		p := &e.points[n-1]
		p.Observed = pv
		p.Command = e.rate
		p.Prefetch = e.prefetch
		p.Hold = d.Hold
		p.Reason = d.Reason
	}
}

// remaining is the time the copy still needs at the rate in force, as the
// agent reports it (control.Observation.Remaining): 0 (unknown) when paused,
// at most 10⁶ s.
func (e *engine) remaining() time.Duration {
	if e.rate <= 0 {
		return 0
	}
	return secs(min((e.size-e.sent)/e.rate, 1e6))
}

// hostIO derives the block-device figures of the last control step from the
// plant's load: transactions' page I/O plus the migration's reads.
func (e *engine) hostIO() *control.HostIO {
	dur := e.t - e.stepStart
	defer func() {
		e.stepStart = e.t
		e.stepRead, e.stepBusy, e.stepUtil = 0, 0, 0
		for _, s := range e.stores {
			s.stepDone = 0
		}
	}()
	if dur <= 0 {
		return &control.HostIO{Err: errNoTxn}
	}
	p := e.scn.Plant
	var done int
	for _, s := range e.stores {
		done += s.stepDone
	}
	ops := float64(done) * p.OpsPerTxn
	migOps := 0.0
	if p.MigIOBytes > 0 {
		migOps = e.stepRead / p.MigIOBytes
	}
	return &control.HostIO{
		IOPS:       (ops + migOps) / dur,
		IOTicks:    1000 * e.stepBusy / dur,
		Throughput: (ops*p.OpBytes + e.stepRead) / dur,
		Util:       math.Min(1, e.stepUtil/dur),
	}
}

// clampRate limits a controller's output to [0, max]; NaN is 0.
func clampRate(r, max float64) float64 {
	if math.IsNaN(r) || r < 0 {
		return 0
	}
	return math.Min(r, max)
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}

// secs converts seconds to a Duration.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
