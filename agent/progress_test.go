package agent

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/throttle"
)

// TestProgressShowsCheckpoint: while a run's snapshot waits for the
// source's checkpoint (its source's OnBackupStart hook, run.backupStart),
// the progress action names the checkpoint; once the backup started, and in
// any other phase, the driver's own action shows.
func TestProgressShowsCheckpoint(t *testing.T) {
	rec, _ := json.Marshal(migration.Record{Phase: migration.PhaseSnapshot, LagBytes: -1})
	cm := catalog.Migration{ID: "m1", Record: rec}
	r := &run{id: "m1", lim: throttle.NewLimiter(math.Inf(1), 0), started: time.Now()}
	r.send = newPausable(r.lim)
	r.prog = migration.Progress{ID: "m1", Phase: migration.PhaseSnapshot, Action: "stream-snapshot slot=s1"}
	a := &Agent{}
	a.mig.runs = map[string]*run{"m1": r}
	action := func() string { return a.migrationView(cm).Progress.Action }

	if got := action(); got != "stream-snapshot slot=s1" {
		t.Errorf("before the backup starts: action %q", got)
	}
	r.backupStart(false, "paced 3s")
	if got := action(); got != "checkpoint paced 3s" {
		t.Errorf("while the source checkpoints: action %q, want checkpoint paced 3s", got)
	}
	r.backupStart(true, "paced 3s")
	if got := action(); got != "stream-snapshot slot=s1" {
		t.Errorf("after the backup started: action %q, want the driver's", got)
	}
	r.backupStart(false, "spread")
	r.prog.Phase, r.prog.Action = migration.PhaseCatchUp, "wait-catch-up"
	if got := action(); got != "wait-catch-up" {
		t.Errorf("in catch-up: action %q, want the driver's", got)
	}
	r.prog.Warning, r.prog.ETA = "catch-up is not converging", 0
	if p := a.migrationView(cm).Progress; p.Warning != "catch-up is not converging" || p.ETASeconds != -1 {
		t.Errorf("a stalled catch-up: warning %q, ETA %v s; want the driver's warning and no ETA", p.Warning, p.ETASeconds)
	}
	r.prog.Warning, r.prog.ETA = "", 90*time.Second
	if p := a.migrationView(cm).Progress; p.Warning != "" || p.ETASeconds != 90 {
		t.Errorf("a draining catch-up: warning %q, ETA %v s; want none and 90 s", p.Warning, p.ETASeconds)
	}
}
