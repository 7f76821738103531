package pg

import (
	"context"
	"testing"
	"time"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestPositionWaitsForConsistency: after a standby refused a connection as
// not yet consistent, Position answers "in recovery, no LSNs" without
// connecting until ConsistencyRetry has passed; then it tries again (here,
// with no server at all, that is an error).
func TestPositionWaitsForConsistency(t *testing.T) {
	tgt := NewLocalTarget(t.TempDir(), pgcluster.Options{})
	m := migration.New("m1", "t1", "a", "b", migration.Live, time.Now())
	tgt.notReady = map[string]time.Time{m.ID: time.Now().Add(time.Minute)}
	p, err := tgt.Position(context.Background(), m)
	if err != nil || !p.InRecovery || p.Replay != 0 || p.Receive != 0 {
		t.Fatalf("Position while not ready: %+v, %v; want in recovery, no LSNs, no error", p, err)
	}
	tgt.notReady[m.ID] = time.Now().Add(-time.Millisecond)
	if _, err := tgt.Position(context.Background(), m); err == nil {
		t.Fatal("Position after the retry interval did not try to connect")
	}
}
