package pg

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/throttle"
)

// TestControlLoopPacesSnapshot wires a migration the way the agent does: the
// control loop (here a Fixed controller) sets the rate of the limiter that
// Run's snapshot and warm stream through, every step. The snapshot cannot
// beat the rate: the token bucket lets at most rate×t + burst bytes through.
func TestControlLoopPacesSnapshot(t *testing.T) {
	f := newFixture(t, 8)
	const rate = 16 << 20            // bytes/s
	lim := throttle.NewLimiter(0, 0) // paused until the loop's first step
	ctl, err := control.NewFixed(rate)
	if err != nil {
		t.Fatal(err)
	}
	var phase atomic.Value
	phase.Store(string(migration.PhasePending))
	var bytes atomic.Int64
	l := &loop.Loop{
		Controller: ctl,
		Observe:    func(_ context.Context, at time.Time) control.Observation { return control.Observation{At: at} },
		Send:       lim,
		Period:     100 * time.Millisecond,
		Status: func() loop.Status {
			return loop.Status{Phase: phase.Load().(string), Bytes: bytes.Load(), Lag: -1}
		},
	}
	lctx, stopLoop := context.WithCancel(context.Background())
	defer stopLoop()
	l.Step(lctx, time.Now())
	go l.Run(lctx, nil)
	env := migration.Env{
		Source: f.source, Target: f.target, Router: migration.DirectRouter{}, Limiter: lim, ProgressEvery: time.Nanosecond,
		Progress: func(p migration.Progress) { phase.Store(string(p.Phase)); bytes.Store(p.BytesDone) },
	}
	start := time.Now()
	var snapStart, snapEnd time.Time
	env.Persist = func(r migration.Record) error {
		if r.Phase == migration.PhaseSnapshot && snapStart.IsZero() {
			snapStart = time.Now()
		}
		if r.SnapshotDone && snapEnd.IsZero() {
			snapEnd = time.Now()
		}
		return nil
	}
	rec, err := migration.Run(context.Background(), migration.New("m1", "t1", "a", "b", migration.Live, start), env)
	if err != nil {
		t.Fatal(err)
	}
	stopLoop()
	took := snapEnd.Sub(snapStart)
	burst := int64(lim.Burst())
	if min := time.Duration(float64(rec.SnapshotBytes-burst) / rate * float64(time.Second)); took < min {
		t.Fatalf("snapshot of %d bytes took %s, faster than %d bytes/s allows (%s)", rec.SnapshotBytes, took, rate, min)
	}
	sawSnapshot := false
	for _, p := range l.Series() {
		if p.Rate != rate {
			t.Fatalf("loop applied rate %v, want %v", p.Rate, rate)
		}
		sawSnapshot = sawSnapshot || p.Phase == string(migration.PhaseSnapshot)
	}
	if !sawSnapshot {
		t.Fatal("the loop never stepped during the snapshot")
	}
	t.Logf("snapshot %d bytes in %s at %d bytes/s", rec.SnapshotBytes, took, rate)
}
