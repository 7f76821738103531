package migration

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestOutage checks CATCH-UP's patience with an unreachable target: only
// ErrUnreachable errors are waited through, for Env.TargetOutage from the
// first, and not at all with a negative TargetOutage.
func TestOutage(t *testing.T) {
	now := time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC)
	env := Env{Now: func() time.Time { return now }}
	env.defaults()
	r := &runner{env: env}
	down := fmt.Errorf("remote target: position: %w: connection refused", ErrUnreachable)

	if d, ok := r.outage(errors.New("remote target: position: 409 conflict")); ok || d != 0 {
		t.Fatalf("an answered error: (%s, %v), want (0, false)", d, ok)
	}
	if d, ok := r.outage(down); !ok || d != 0 {
		t.Fatalf("first unreachable: (%s, %v), want (0, true)", d, ok)
	}
	now = now.Add(time.Minute)
	if d, ok := r.outage(down); !ok || d != time.Minute {
		t.Fatalf("unreachable for the default outage: (%s, %v), want (1m, true)", d, ok)
	}
	now = now.Add(time.Second)
	if d, ok := r.outage(down); ok || d != time.Minute+time.Second {
		t.Fatalf("unreachable past the outage: (%s, %v), want (1m1s, false)", d, ok)
	}

	// An answer resets the clock (execute clears r.unreachable).
	r.unreachable = time.Time{}
	if d, ok := r.outage(down); !ok || d != 0 {
		t.Fatalf("unreachable again after an answer: (%s, %v), want (0, true)", d, ok)
	}

	r = &runner{env: env}
	r.env.TargetOutage = -1
	if _, ok := r.outage(down); ok {
		t.Fatal("negative TargetOutage waited")
	}
}
