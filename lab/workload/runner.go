package workload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/internal/stats"
)

// Config describes a run. Zero fields take the defaults noted.
type Config struct {
	DSN          string       // connection string (normally the sluice proxy)
	Rate         float64      // mean arrivals per second (Poisson); must be > 0
	MPL          int          // connections serving the queue; default 8
	OpsPerTx     int          // operations per transaction; default 10
	ReadFraction float64      // share of operations that read; default 0.85
	Distribution Distribution // key distribution; default zipfian
	Records      int64        // key space [0, Records); required
	Duration     time.Duration
	Seed         uint64 // seeds arrivals, keys and values
	// QueueCap bounds the arrival queue; arrivals beyond it are dropped and
	// counted (an open-loop generator never blocks). Default 1<<20.
	QueueCap int
}

func (c Config) withDefaults() (Config, error) {
	if c.MPL == 0 {
		c.MPL = 8
	}
	if c.OpsPerTx == 0 {
		c.OpsPerTx = 10
	}
	if c.ReadFraction == 0 {
		c.ReadFraction = 0.85
	}
	if c.Distribution == "" {
		c.Distribution = Zipfian
	}
	if c.QueueCap == 0 {
		c.QueueCap = 1 << 20
	}
	switch {
	case c.DSN == "":
		return c, errors.New("workload: no connection string")
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return c, fmt.Errorf("workload: rate must be a positive number of transactions/s, got %v", c.Rate)
	case c.MPL < 1 || c.MPL > 1000:
		return c, fmt.Errorf("workload: mpl must be in [1, 1000], got %d", c.MPL)
	case c.OpsPerTx < 1:
		return c, fmt.Errorf("workload: ops per transaction must be ≥ 1, got %d", c.OpsPerTx)
	case c.ReadFraction < 0 || c.ReadFraction > 1:
		return c, fmt.Errorf("workload: read fraction must be in [0, 1], got %v", c.ReadFraction)
	case c.Records < 1:
		return c, fmt.Errorf("workload: records must be ≥ 1, got %d", c.Records)
	case c.Duration <= 0:
		return c, fmt.Errorf("workload: duration must be positive, got %v", c.Duration)
	}
	return c, nil
}

// Second is the workload's view of one second of wall time.
type Second struct {
	T        int     `json:"t"`         // seconds since the run started
	Count    int     `json:"count"`     // transactions completed (acknowledged) in this second
	Errors   int     `json:"errors"`    // transactions that failed in this second
	MeanMs   float64 `json:"mean_ms"`   // mean latency (queue + execution) of completed transactions
	P50Ms    float64 `json:"p50_ms"`    //
	P95Ms    float64 `json:"p95_ms"`    //
	P99Ms    float64 `json:"p99_ms"`    //
	QueueMs  float64 `json:"queue_ms"`  // mean queue wait of those transactions
	Rate     float64 `json:"rate"`      // arrival rate in force at the end of the second
	QueueLen int     `json:"queue_len"` // arrivals waiting at the end of the second
}

// Summary covers a whole run.
type Summary struct {
	Seconds       float64 `json:"seconds"`
	Transactions  int64   `json:"transactions"`
	Errors        int64   `json:"errors"`
	Dropped       int64   `json:"dropped"` // arrivals the queue could not take
	ThroughputTPS float64 `json:"throughput_tps"`
	MeanMs        float64 `json:"mean_latency_ms"`
	P50Ms         float64 `json:"p50_latency_ms"`
	P95Ms         float64 `json:"p95_latency_ms"`
	P99Ms         float64 `json:"p99_latency_ms"`
	WritesAcked   int64   `json:"writes_acknowledged"`
	// SpanningAcked counts acknowledged transactions that touched more
	// than one partition (keyspace workloads in router mode).
	SpanningAcked int64 `json:"spanning_acknowledged,omitempty"`
	// Skipped counts transactions a driver chose not to run (a direct-mode
	// keyspace transaction that would span partitions); not in Transactions.
	Skipped int64 `json:"skipped,omitempty"`
	// ErrorsByCode counts failed transactions by SQLSTATE ("other" when the
	// error carried none: a connection failure, a timeout).
	ErrorsByCode map[string]int64 `json:"errors_by_sqlstate,omitempty"`
}

// ErrorCode returns err's SQLSTATE, or "other" if it has none.
func ErrorCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return "other"
}

// Runner runs one workload. Its arrival rate may be changed while it runs.
type Runner struct {
	cfg     Config
	closed  bool            // Arrivals.Closed
	stop    <-chan struct{} // Arrivals.Stop; nil never fires
	drv     driver
	rate    atomic.Uint64 // math.Float64bits of arrivals/s
	queue   chan time.Time
	dropped atomic.Int64
	// spanAcked counts acknowledged transactions across partitions.
	spanAcked atomic.Int64
	Ledger    *Ledger
	codes     map[string]int64 // errors by SQLSTATE; guarded by mu
	skipped   int64            // guarded by mu

	mu struct {
		sync.Mutex
		start   time.Time
		seconds []bucket
		txs     []Tx // every transaction, failed ones too, in the order recorded
	}
}

// Tx is one transaction's timeline, as offsets from the run's start.
type Tx struct {
	Arrival time.Duration // its scheduled arrival (latency counts from here)
	Begin   time.Duration // when a connection began it (Begin − Arrival is its queue wait)
	End     time.Duration // when it was acknowledged, or failed
	Failed  bool          // it ended in an error (and was rolled back)
	Worker  int           // the connection (0 … MPL−1) that ran it
}

type bucket struct {
	lat    []float64
	queue  float64
	errors int
}

// NewRunner validates cfg and returns a runner with an empty ledger.
func NewRunner(cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := newRunner(cfg.loop(), nil)
	r.cfg = cfg
	r.drv = &slacker{cfg: cfg, ledger: r.Ledger}
	return r, nil
}

// Arrivals is the part of a run the runner itself owns: open-loop Poisson
// arrivals at Rate for Duration (or a closed loop), served by MPL workers from one FIFO queue
// of at most QueueCap. Drivers own the rest. Zero MPL means 8, zero
// QueueCap 1<<20.
type Arrivals struct {
	Rate     float64       // mean arrivals per second; > 0 unless Closed
	MPL      int           // workers (connections); [1, 1000]
	Duration time.Duration // how long arrivals are generated; > 0
	Seed     uint64        // seeds arrivals and the workers' RNGs
	QueueCap int           // arrivals beyond it are dropped and counted
	// Closed makes the run saturating (closed loop): each worker starts its
	// next transaction as soon as its last ends, until Duration; Rate and
	// QueueCap are ignored and a transaction's latency is its execution
	// alone (no queue). Zero: open loop, Poisson arrivals at Rate.
	Closed bool
	// Stop, when closed, ends arrivals before Duration: the run then ends
	// as at Duration (accepted arrivals served, the ledger verified), so a
	// caller can end it on an event. nil: Duration alone.
	Stop <-chan struct{}
}

func (c Config) loop() Arrivals {
	return Arrivals{Rate: c.Rate, MPL: c.MPL, Duration: c.Duration, Seed: c.Seed, QueueCap: c.QueueCap}
}

// withDefaults fills zero fields and range-checks the rest.
func (a Arrivals) withDefaults() (Arrivals, error) {
	if a.MPL == 0 {
		a.MPL = 8
	}
	if a.QueueCap == 0 {
		a.QueueCap = 1 << 20
	}
	switch {
	case !a.Closed && (!(a.Rate > 0) || math.IsInf(a.Rate, 0)):
		return a, fmt.Errorf("workload: rate must be a positive number of transactions/s, got %v", a.Rate)
	case a.MPL < 1 || a.MPL > 1000:
		return a, fmt.Errorf("workload: mpl must be in [1, 1000], got %d", a.MPL)
	case a.Duration <= 0:
		return a, fmt.Errorf("workload: duration must be positive, got %v", a.Duration)
	case a.QueueCap < 1:
		return a, fmt.Errorf("workload: queue capacity must be ≥ 1, got %d", a.QueueCap)
	}
	return a, nil
}

// newRunner returns a runner of drv's transactions; lp is validated.
func newRunner(lp Arrivals, drv driver) *Runner {
	r := &Runner{
		cfg:    Config{Rate: lp.Rate, MPL: lp.MPL, Duration: lp.Duration, Seed: lp.Seed, QueueCap: lp.QueueCap},
		closed: lp.Closed,
		stop:   lp.Stop,
		drv:    drv,
		Ledger: &Ledger{},
	}
	if lp.Closed {
		r.queue = make(chan time.Time) // unbuffered: a token each time a worker is free
	} else {
		r.queue = make(chan time.Time, lp.QueueCap)
	}
	r.codes = map[string]int64{}
	r.SetRate(lp.Rate)
	return r
}

// SetRate changes the mean arrival rate (transactions/s, > 0) from now on.
func (r *Runner) SetRate(rate float64) {
	if rate > 0 {
		r.rate.Store(math.Float64bits(rate))
	}
}

// Latencies returns the latencies (ms) of the transactions completed in
// seconds [from, to) of the run (seconds since Run started), in completion
// order within each second. A window past the run's end is cut short.
func (r *Runner) Latencies(from, to int) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []float64
	for t := max(from, 0); t < to && t < len(r.mu.seconds); t++ {
		out = append(out, r.mu.seconds[t].lat...)
	}
	return out
}

// Transactions returns the transactions that ended in [from, to) of the
// run (offsets from Run's start), failed ones included, in the order they were recorded:
// the detail behind a second's figures, e.g. who waited how long around a
// handover.
func (r *Runner) Transactions(from, to time.Duration) []Tx {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Tx
	for _, tx := range r.mu.txs { // appended as recorded: End is only nearly sorted
		if tx.End >= from && tx.End < to {
			out = append(out, tx)
		}
	}
	return out
}

// Started returns the instant the run's clock starts from (second 0 of
// Second.T, offset 0 of Tx): after its connections were opened. Zero until
// Run got there.
func (r *Runner) Started() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.start
}

// Rate returns the arrival rate in force.
func (r *Runner) Rate() float64 { return math.Float64frombits(r.rate.Load()) }

// Run generates arrivals for cfg.Duration, serves them with MPL connections,
// and returns when every accepted arrival has been served or ctx ends.
// Ledger ids are unique across runs that follow one another on the same
// table (each run takes an epoch above every id recorded); runs at the same
// time on the same table must not share it.
// each, if not nil, is called once per elapsed second with that second's
// figures, from one goroutine, in order.
func (r *Runner) Run(ctx context.Context, each func(Second)) (Summary, error) {
	if err := r.drv.open(ctx, r.cfg.MPL); err != nil {
		return Summary{}, err
	}
	defer r.drv.close()
	start := time.Now()
	r.mu.Lock()
	r.mu.start = start
	r.mu.Unlock()

	var wg sync.WaitGroup
	for i := 0; i < r.cfg.MPL; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx, i, start)
		}()
	}
	genDone := make(chan struct{})
	go func() {
		defer close(genDone)
		if r.closed {
			r.saturate(ctx, start)
		} else {
			r.generate(ctx, start)
		}
		close(r.queue)
	}()
	reportDone := make(chan struct{})
	stopReport := make(chan struct{})
	go func() {
		defer close(reportDone)
		r.report(start, each, stopReport)
	}()
	<-genDone
	wg.Wait()
	close(stopReport)
	<-reportDone
	return r.summary(time.Since(start)), ctx.Err()
}

// preciseLead is how long before an arrival the generator leaves Go's timer
// (late by up to a millisecond) for the kernel's sleep.
const preciseLead = 2 * time.Millisecond

// waitUntil returns at t, or false as soon as ctx is done: a cancellable
// wait on timer to within preciseLead of t, then the kernel's precise sleep
// for the rest. An arrival's latency starts at its scheduled time, so the
// generator's own lateness must stay small. Call it from a goroutine that
// called preciseThread.
func waitUntil(ctx context.Context, timer *time.Timer, t time.Time) bool {
	if d := time.Until(t) - preciseLead; d > 0 {
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
	}
	if d := time.Until(t); d > 0 {
		preciseSleep(d)
	}
	return true
}

// generate pushes Poisson arrival times into the queue until the duration ends.
func (r *Runner) generate(ctx context.Context, start time.Time) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xa771))
	end := start.Add(r.cfg.Duration)
	next := start
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer preciseThread()()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / r.Rate() * float64(time.Second)))
		if next.After(end) {
			return
		}
		if !waitUntil(ctx, timer, next) {
			return
		}
		select {
		case <-r.stop:
			return
		default:
		}
		select {
		case r.queue <- next:
		default:
			r.dropped.Add(1)
		}
	}
}

// saturate hands a free worker a zero arrival (begin at once) until the
// duration ends: the closed loop of Arrivals.Closed.
func (r *Runner) saturate(ctx context.Context, start time.Time) {
	end := time.NewTimer(time.Until(start.Add(r.cfg.Duration)))
	defer end.Stop()
	for {
		select {
		case r.queue <- time.Time{}:
		case <-end.C:
			return
		case <-r.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// driver is what a Runner's workers run: the transactions of one
// workload against its servers. The runner owns arrivals, queueing and
// latency; the driver owns connections, the SQL and the ledger.
type driver interface {
	// open prepares for workers 0 … workers−1 before the run's clock starts.
	open(ctx context.Context, workers int) error
	// txn runs one transaction for worker w (one goroutine per worker).
	// It returns errSkipped for a transaction it chose not to run.
	txn(ctx context.Context, w *workerState) error
	// close releases what open took, after every worker has returned.
	close()
}

// workerState is one worker's own: its RNG and transaction counter, and
// the run's elapsed time when the transaction began.
type workerState struct {
	id  int
	rng *rand.Rand
	seq int64
	at  time.Duration
	// spans is set by the driver when the transaction touches more than
	// one partition; acknowledged ones are Summary.SpanningAcked.
	spans bool
}

// errSkipped marks a transaction the driver did not run (a direct-mode
// transaction spanning partitions); it is counted, not timed.
var errSkipped = errors.New("workload: transaction skipped")

func (r *Runner) worker(ctx context.Context, id int, start time.Time) {
	w := &workerState{id: id, rng: rand.New(rand.NewPCG(r.cfg.Seed, uint64(id)+1))}
	for arrival := range r.queue {
		if ctx.Err() != nil {
			continue // drain
		}
		begin := time.Now()
		if arrival.IsZero() { // closed loop: no queue
			arrival = begin
		}
		w.seq++
		w.at = begin.Sub(start)
		w.spans = false
		err := r.drv.txn(ctx, w)
		if err == nil && w.spans {
			r.spanAcked.Add(1)
		}
		r.record(id, arrival, begin, time.Now(), err)
	}
}

func (r *Runner) record(worker int, arrival, begin, end time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(err, errSkipped) {
		r.skipped++
		return
	}
	if err != nil {
		r.codes[ErrorCode(err)]++
	}
	r.mu.txs = append(r.mu.txs, Tx{Arrival: arrival.Sub(r.mu.start), Begin: begin.Sub(r.mu.start),
		End: end.Sub(r.mu.start), Failed: err != nil, Worker: worker})
	sec := int(end.Sub(r.mu.start) / time.Second)
	for len(r.mu.seconds) <= sec {
		r.mu.seconds = append(r.mu.seconds, bucket{})
	}
	b := &r.mu.seconds[sec]
	if err != nil {
		b.errors++
		return
	}
	b.lat = append(b.lat, float64(end.Sub(arrival))/float64(time.Millisecond))
	b.queue += float64(begin.Sub(arrival)) / float64(time.Millisecond)
}

func (r *Runner) report(start time.Time, each func(Second), stop <-chan struct{}) {
	emit := func(t int) {
		r.mu.Lock()
		var b bucket
		if t < len(r.mu.seconds) {
			b = r.mu.seconds[t]
			b.lat = append([]float64(nil), b.lat...)
		}
		r.mu.Unlock()
		if each == nil {
			return
		}
		s := Second{T: t, Count: len(b.lat), Errors: b.errors, Rate: r.Rate(), QueueLen: len(r.queue)}
		if len(b.lat) > 0 {
			sort.Float64s(b.lat)
			s.MeanMs = stats.Mean(b.lat)
			s.P50Ms, s.P95Ms, s.P99Ms = Quantile(b.lat, 0.5), Quantile(b.lat, 0.95), Quantile(b.lat, 0.99)
			s.QueueMs = b.queue / float64(len(b.lat))
		}
		each(s)
	}
	t := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			// Report the seconds that completed; the partial last one too.
			for ; float64(t) < time.Since(start).Seconds(); t++ {
				emit(t)
			}
			return
		case <-tick.C:
			for ; time.Since(start) >= time.Duration(t+1)*time.Second; t++ {
				emit(t)
			}
		}
	}
}

func (r *Runner) summary(elapsed time.Duration) Summary {
	r.mu.Lock()
	all := make([]float64, 0, len(r.mu.txs))
	var errs int64
	for _, tx := range r.mu.txs {
		if tx.Failed {
			errs++
			continue
		}
		all = append(all, float64(tx.End-tx.Arrival)/float64(time.Millisecond))
	}
	r.mu.Unlock()
	sort.Float64s(all)
	s := Summary{
		Seconds:       elapsed.Seconds(),
		Transactions:  int64(len(all)),
		Errors:        errs,
		Dropped:       r.dropped.Load(),
		SpanningAcked: r.spanAcked.Load(),
		WritesAcked:   int64(r.Ledger.Len()),
	}
	r.mu.Lock()
	s.Skipped = r.skipped
	if len(r.codes) > 0 {
		s.ErrorsByCode = maps.Clone(r.codes)
	}
	r.mu.Unlock()
	if elapsed > 0 {
		s.ThroughputTPS = float64(len(all)) / elapsed.Seconds()
	}
	if len(all) > 0 {
		s.MeanMs = stats.Mean(all)
		s.P50Ms, s.P95Ms, s.P99Ms = Quantile(all, 0.5), Quantile(all, 0.95), Quantile(all, 0.99)
	}
	return s
}

// Quantile is the q-th quantile (0..1) of sorted xs by the nearest-rank
// method; 0 for none.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}
