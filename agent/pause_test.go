package agent

import (
	"math"
	"testing"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/throttle"
)

// TestPausable: while paused the throttle stays at 0 whatever the control
// loop or the operator asks; resuming applies the rate asked for last.
func TestPausable(t *testing.T) {
	lim := throttle.NewLimiter(8<<20, 0)
	p := newPausable(lim)
	p.SetRate(4 << 20)
	if lim.Rate() != 4<<20 {
		t.Fatalf("rate %v, want 4 MiB/s", lim.Rate())
	}
	p.setPaused(true)
	p.SetRate(6 << 20)
	if paused, want := p.state(); lim.Rate() != 0 || !paused || want != 6<<20 {
		t.Fatalf("paused: throttle %v, state %v %v; want 0, paused, 6 MiB/s asked", lim.Rate(), paused, want)
	}
	p.setPaused(false)
	if lim.Rate() != 6<<20 {
		t.Fatalf("resumed at %v, want the 6 MiB/s asked last", lim.Rate())
	}
	p.SetRate(math.Inf(1))
	if !math.IsInf(lim.Rate(), 1) {
		t.Fatalf("unlimited: %v", lim.Rate())
	}
}

// TestAutoResume: a run paused in the copy is resumed once its phase no
// longer copies, and only then.
func TestAutoResume(t *testing.T) {
	r := &run{lim: throttle.NewLimiter(1<<20, 0), pre: throttle.NewLimiter(1<<20, 0)}
	r.send, r.prefetch = newPausable(r.lim), newPausable(r.pre)
	r.setPaused(true)
	if r.autoResume(migration.PhaseSnapshot) || r.lim.Rate() != 0 || r.pre.Rate() != 0 {
		t.Fatalf("resumed in the snapshot: %v %v", r.lim.Rate(), r.pre.Rate())
	}
	if !r.autoResume(migration.PhaseCatchUp) || r.lim.Rate() != 1<<20 || r.pre.Rate() != 1<<20 {
		t.Fatalf("not resumed in catch-up: %v %v", r.lim.Rate(), r.pre.Rate())
	}
	if r.autoResume(migration.PhaseWarm) {
		t.Fatal("resumed twice")
	}
}
