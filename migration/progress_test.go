package migration

import (
	"testing"
	"time"
)

// countingSource is a Source whose relay has shipped n bytes; only
// WALRelayed is called (the Target relays nothing).
type countingSource struct {
	fakeSource
	n int64
}

func (s *countingSource) WALRelayed() (int64, error) { return s.n, nil }

var _ Source = (*countingSource)(nil)

// TestCatchUpProgressRate: in CATCH-UP every progress report — the forced
// one before each poll as well — carries the WAL shipped per second since
// the phase began, while a copy's report keeps its own bytes' rate.
func TestCatchUpProgressRate(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	now := t0
	src := &countingSource{n: 7 << 20}
	var got []Progress
	r := &runner{env: Env{Source: src, Target: fakeTarget{}, Now: func() time.Time { return now }, ProgressEvery: time.Second,
		Progress: func(p Progress) { got = append(got, p) }}}

	rec := Record{ID: "m1", Phase: PhaseSnapshot}
	r.copyStart, r.copyTotal = t0, 100<<20
	now = t0.Add(2 * time.Second)
	r.progressBytes(rec, "stream-snapshot", 10<<20, true)

	rec.Phase = PhaseCatchUp
	r.catchUpStart, r.walAtCatchUp = now, src.n
	src.n += 6 << 20
	now = now.Add(3 * time.Second)
	r.progress(rec, "wait-catch-up", true)
	r.progress(rec, "wait-catch-up", false) // not due: dropped

	if len(got) != 2 {
		t.Fatalf("%d reports, want 2: %+v", len(got), got)
	}
	if want := float64(10<<20) / 2; got[0].Rate != want {
		t.Errorf("snapshot rate %v, want %v", got[0].Rate, want)
	}
	if want := float64(6<<20) / 3; got[1].Rate != want {
		t.Errorf("catch-up rate %v, want %v (6 MiB relayed in 3 s)", got[1].Rate, want)
	}
}
