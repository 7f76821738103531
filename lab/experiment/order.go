package experiment

import (
	"fmt"
	"slices"
)

// sweepTrial is one trial of a sweep's order: fixed rate Index (Loop −1),
// or PID setpoint Index with loop Loop (0: the base; 1...: Common.Variants
// in order).
type sweepTrial struct{ Index, Loop int }

// sweepOrder is the order of a sweep's trials over nFixed fixed rates and
// nSP setpoints of nLoops loops each. Fixed and PID alternate in pairs —
// F P, P F, F P, ... — so that drift over the sweep (the table gains dead
// tuples) falls on both ladders alike; and a setpoint's loops run in
// reverse order on every other setpoint. The tenant changes servers with
// each trial, so each ladder, and each loop, then migrates in both
// directions as often: with plain F P F P, or the loops always in one
// order, one of them would always move the tenant the same way, and a
// difference between the servers would read as the loop's.
func sweepOrder(nFixed, nSP, nLoops int) []sweepTrial {
	var out []sweepTrial
	for i := 0; i < max(nFixed, nSP); i++ {
		var fixed, pid []sweepTrial
		if i < nFixed {
			fixed = []sweepTrial{{i, -1}}
		}
		if i < nSP {
			for v := range nLoops {
				pid = append(pid, sweepTrial{i, v})
			}
		}
		if i%2 == 1 {
			slices.Reverse(pid)
			fixed, pid = pid, fixed
		}
		out = append(append(out, fixed...), pid...)
	}
	return out
}

// MaxRounds bounds SweepOptions.Rounds.
const MaxRounds = 50

// repeatOrder is a sweep's order for rounds rounds (SweepOptions.Rounds)
// of round.
func repeatOrder(round []sweepTrial, rounds int) []sweepTrial {
	var out []sweepTrial
	for range max(1, rounds) {
		out = append(out, round...)
	}
	return out
}

// roundSuffix ends the names of round k's trials (from 1): none for the
// first, "-rk" after it.
func roundSuffix(k int) string {
	if k <= 1 {
		return ""
	}
	return fmt.Sprintf("-r%d", k)
}

// untilUndisturbed calls once with attempt 1, 2, … while it asks to run
// again (its trial was disturbed and has a re-run left) and fails not.
func untilUndisturbed(once func(attempt int) (again bool, err error)) error {
	for attempt := 1; ; attempt++ {
		if again, err := once(attempt); err != nil || !again {
			return err
		}
	}
}

// PairFixedFirst says whether the n-th pair at a setpoint (from 1) runs its
// fixed trial first: every second pair does, once a PID trial at that
// setpoint has given a copy rate (lastRate, bytes/s; 0 = none yet).
func PairFixedFirst(n int, lastRate float64) bool {
	return n%2 == 0 && lastRate > 0
}
