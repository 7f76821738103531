package agent

import (
	"testing"

	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
)

// The loop measures what the copy moved in the phase the migration names
// its hot copy.
func TestLoopCopyPhaseIsTheSnapshot(t *testing.T) {
	if loop.CopyPhase != string(migration.PhaseSnapshot) {
		t.Fatalf("loop.CopyPhase %q, migration.PhaseSnapshot %q", loop.CopyPhase, migration.PhaseSnapshot)
	}
}
