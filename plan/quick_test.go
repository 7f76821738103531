package plan

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// TestScheduleProperties drives random plans with random outcomes: no server
// ever has two running moves, every move starts once per attempt (a rolled
// back one again, up to MaxAttempts), and every plan ends.
func TestScheduleProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	for trial := range 500 {
		nAgents := 2 + rng.Intn(6)
		inv := Inventory{}
		var spec Spec
		for a := range nAgents {
			inv[fmt.Sprint("a", a)] = Agent{}
		}
		for i := range 1 + rng.Intn(12) {
			from, to := rng.Intn(nAgents), rng.Intn(nAgents-1)
			if to >= from {
				to++
			}
			name := fmt.Sprint("t", i)
			ag := inv[fmt.Sprint("a", from)]
			ag.Tenants = append(ag.Tenants, Tenant{ID: int64(i + 1), Name: name, Bytes: int64(rng.Intn(1000)) << 20})
			inv[fmt.Sprint("a", from)] = ag
			spec.Moves = append(spec.Moves, MoveSpec{Tenant: name, To: fmt.Sprint("a", to)})
		}
		p, err := Validate(spec, inv)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		now := t0
		starts := map[int]int{}
		p, acts := Step(p, Event{Kind: Tick}, now)
		for steps := 0; !p.State.Final(); steps++ {
			if steps > 1000 {
				t.Fatalf("trial %d: plan never ended: %+v", trial, p.Moves)
			}
			for _, a := range acts {
				if a.Kind == Start {
					starts[a.Move]++
				}
			}
			busy := map[string]int{}
			var running []int
			for i, m := range p.Moves {
				if m.Status == Running {
					busy[m.From]++
					busy[m.To]++
					running = append(running, i)
				}
			}
			for s, n := range busy {
				if n > 1 {
					t.Fatalf("trial %d: server %s has %d running moves", trial, s, n)
				}
			}
			if len(running) == 0 {
				t.Fatalf("trial %d: nothing running in state %s: %+v", trial, p.State, p.Moves)
			}
			now = now.Add(time.Second)
			i := running[rng.Intn(len(running))]
			ev := Event{Kind: Committed, Move: i}
			if rng.Intn(3) == 0 {
				ev = Event{Kind: RolledBack, Move: i, Err: "x"}
			}
			p, acts = Step(p, ev, now)
		}
		for i, m := range p.Moves {
			want := m.Attempts + 1
			if m.Status == Failed {
				want = MaxAttempts
			}
			if starts[i] != want || (m.Status != Done && m.Status != Failed) {
				t.Fatalf("trial %d: move %d %s after %d attempts started %d times", trial, i, m.Status, m.Attempts, starts[i])
			}
		}
	}
}
