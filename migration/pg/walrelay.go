package pg

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"

	"github.com/sluicedb/sluice/throttle"
)

// WALRelay is a TCP relay between the target's standby and the source
// postmaster that paces the source→standby direction (the WAL stream of
// CATCH-UP) at a rate it reads from Rate on every chunk: the delta the
// standby pulls is throttled like the snapshot (Slacker §4.2: deltas are
// throttled too). Without it, a standby that starts after a long snapshot
// pulls all the WAL written meanwhile at the disk's full speed — WAL the
// source then reads back from disk, competing with its clients.
//
// The pace never drops below Floor, so that a controller holding the rate
// at 0 cannot stop the stream during HANDOVER's wait for the replay.
type WALRelay struct {
	// Rate returns the current pace, bytes/s (+Inf = unlimited).
	Rate func() float64
	// Floor is the slowest pace, bytes/s; default DefaultWALFloor.
	Floor float64

	ln       net.Listener
	target   string
	unpaced  atomic.Bool  // Unpace: relay at full speed
	relayed  atomic.Int64 // source→standby bytes written, all connections
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	limiters map[*throttle.Limiter]struct{} // of the running paced copies
	wg       sync.WaitGroup
	closed   bool
	stop     context.Context // done once Close has begun
	stopped  context.CancelFunc
}

// Unpace lifts the pacing (on) or restores it (off), at once: a waiting
// chunk is woken. HANDOVER unpaces: from the hold on, the clients are held
// and the source is being fenced, so there is no latency left to protect,
// while every byte of WAL still to relay lengthens the freeze (the wait for
// the target to replay past the fence).
func (r *WALRelay) Unpace(on bool) {
	r.unpaced.Store(on)
	if !on {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for l := range r.limiters {
		l.SetRate(math.Inf(1))
	}
}

// DefaultWALFloor is WALRelay's slowest pace (1 MB/s).
const DefaultWALFloor = 1e6

// relayChunk is the most the relay reads and paces at once (64 KiB).
const relayChunk = 64 << 10

// StartWALRelay listens on host:0 and relays every connection to target
// (host:port), pacing target→client bytes by r.Rate.
func StartWALRelay(host, target string, rate func() float64) (*WALRelay, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("migration: WAL relay: %w", err)
	}
	r := &WALRelay{Rate: rate, Floor: DefaultWALFloor, ln: ln, target: target, conns: map[net.Conn]struct{}{}, limiters: map[*throttle.Limiter]struct{}{}}
	r.stop, r.stopped = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Target is the host:port the relay connects to.
func (r *WALRelay) Target() string { return r.target }

// Addr is the relay's host and port.
func (r *WALRelay) Addr() (string, int) {
	a := r.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

func (r *WALRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		if !r.track(c, s) {
			return
		}
		r.wg.Add(2)
		go func() { defer r.wg.Done(); io.Copy(s, c); s.(*net.TCPConn).CloseWrite() }()
		go func() { defer r.wg.Done(); r.paced(c, s); c.(*net.TCPConn).CloseWrite() }()
	}
}

// track registers a connection pair; false (and both closed) once closed.
func (r *WALRelay) track(c, s net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		s.Close()
		return false
	}
	r.conns[c], r.conns[s] = struct{}{}, struct{}{}
	return true
}

// paced copies src to dst at the relay's pace.
func (r *WALRelay) paced(dst io.Writer, src io.Reader) {
	lim := throttle.NewLimiter(math.Inf(1), relayChunk)
	r.mu.Lock()
	r.limiters[lim] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.limiters, lim)
		r.mu.Unlock()
	}()
	buf := make([]byte, relayChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			pace := r.Rate()
			if !(pace > 0) { // 0, negative, NaN
				pace = 0
			}
			if pace = math.Max(pace, r.Floor); pace <= 0 || r.unpaced.Load() {
				pace = math.Inf(1)
			}
			lim.SetRate(pace)
			if r.unpaced.Load() {
				// Unpace may have run between the check above and
				// SetRate, and set this limiter's rate before we did.
				lim.SetRate(math.Inf(1))
			}
			if lim.WaitN(r.stop, n) != nil {
				return
			}
			w, werr := dst.Write(buf[:n])
			r.relayed.Add(int64(w))
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Relayed is how many bytes the relay has passed from the source to the
// standbys (the paced direction) since it started, over all connections.
func (r *WALRelay) Relayed() int64 { return r.relayed.Load() }

// Close stops listening, closes every relayed connection and waits for the
// relay's goroutines.
func (r *WALRelay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.stopped()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}
