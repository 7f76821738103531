package agent

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
)

// TestSnapshotStreamStalls: a snapshot stream between two agents whose link
// stops carrying bytes — a relay between them stops forwarding without
// closing anything, as a cut link does — fails with the stall error once a
// write has waited the stall limit, instead of hanging until TCP's
// retransmission limit; the same stream over the link before the cut goes
// through.
func TestSnapshotStreamStalls(t *testing.T) {
	rec := migration.New("stall1", "1", "src", "tgt", migration.Live, time.Now())
	cfg := newTestConfig(t, "tgt")
	ta := discardAgent(t, cfg, rec)
	relay := startCutRelay(t, strings.TrimPrefix(ta.URL(), "http://"))
	c, err := client.New("http://" + relay.addr())
	if err != nil {
		t.Fatal(err)
	}
	rt := &RemoteTarget{c: c.WithToken(cfg.Token), stall: 2 * time.Second}
	chunk := make([]byte, 1<<20)
	stream := func() error {
		w, err := rt.OpenSnapshot(ctxT(t), rec)
		if err != nil {
			return err
		}
		for range 64 { // far more than the sockets' buffers hold
			if _, err := w.Write(chunk); err != nil {
				w.Close()
				return err
			}
		}
		return w.Close()
	}
	if err := stream(); err != nil {
		t.Fatalf("a snapshot stream over the link: %v", err)
	}
	relay.cut()
	err = stream()
	if !errors.Is(err, errStalled) {
		t.Fatalf("a snapshot stream over a cut link: %v, want the stall error", err)
	}
	t.Logf("over the cut link: %v", err)
}

// cutRelay forwards TCP connections to up until cut; then it stops
// forwarding, holding every connection open, until the test ends.
type cutRelay struct {
	ln     net.Listener
	up     string
	cutCh  chan struct{}
	ended  chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	connMu sync.Mutex
	conns  []net.Conn
}

func startCutRelay(t *testing.T, up string) *cutRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &cutRelay{ln: ln, up: up, cutCh: make(chan struct{}), ended: make(chan struct{})}
	go r.accept()
	t.Cleanup(func() {
		close(r.ended)
		ln.Close()
		r.connMu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.connMu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *cutRelay) addr() string { return r.ln.Addr().String() }

func (r *cutRelay) cut() { r.once.Do(func() { close(r.cutCh) }) }

func (r *cutRelay) accept() {
	for {
		down, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.up)
		if err != nil {
			down.Close()
			continue
		}
		r.connMu.Lock()
		r.conns = append(r.conns, down, up)
		r.connMu.Unlock()
		r.wg.Add(2)
		go r.pipe(up, down)
		go r.pipe(down, up)
	}
}

// pipe copies src to dst until either ends or the link is cut; cut, it
// takes nothing more from src (whose sender's buffers then fill) and
// closes nothing until the test ends.
func (r *cutRelay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-r.cutCh:
			<-r.ended
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			return
		}
	}
}
