package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
)

// TestSnapshotStreamStalls: a snapshot stream between two agents whose link
// stops carrying bytes — a relay between them (wireTap) stops forwarding
// without closing anything, as a cut link does — fails with the stall error once a
// write has waited the stall limit, instead of hanging until TCP's
// retransmission limit; the same stream over the link before the cut goes
// through.
func TestSnapshotStreamStalls(t *testing.T) {
	rec := migration.New("stall1", "1", "src", "tgt", migration.Live, time.Now())
	cfg := newTestConfig(t, "tgt")
	ta := discardAgent(t, cfg, rec)
	relay := startTap(t, strings.TrimPrefix(ta.URL(), "http://"))
	c, err := client.New("http://" + relay.ln.Addr().String())
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
