package catalog

import "errors"

// State is a tenant's lifecycle state on one agent.
//
//	           create                 start/stop
//	(none) ───────────▶ creating ──▶ running ◀────▶ stopped
//	                       │           │  ▲            │
//	                       │   migrate │  │ abort      │
//	                       │           ▼  │            │
//	                       │      migrating-out        │
//	                       │           │ commit        │
//	                       ▼           ▼               ▼
//	                    deleted ◀──── moved ◀──────────┘ (delete)
//
//	(none)|deleted|moved ──reserve──▶ migrating-in ──commit──▶ running
//	                                       └────abort──▶ deleted
//
// A deleted tenant's record stays as a tombstone so its ID can be reused
// deliberately; moved means the tenant now lives on another agent and only its
// leftover data directory (if any) is here.
type State string

const (
	Creating     State = "creating"      // initdb and first start under way
	Running      State = "running"       // postmaster should be up and serving
	Stopped      State = "stopped"       // postmaster stopped on request
	MigratingOut State = "migrating-out" // source side of a migration; still serving until handover
	MigratingIn  State = "migrating-in"  // target side of a migration; not serving clients yet
	Moved        State = "moved"         // migrated away; the tenant lives on another agent
	Deleted      State = "deleted"       // removed; tombstone
)

// ErrBadTransition is returned for a state change the lifecycle forbids.
var ErrBadTransition = errors.New("state change not allowed")

var transitions = map[State][]State{
	"":           {Creating, MigratingIn},
	Creating:     {Running, Stopped, Deleted},
	Running:      {Stopped, MigratingOut, Deleted},
	Stopped:      {Running, Deleted},
	MigratingOut: {Running, Moved},
	MigratingIn:  {Running, Deleted},
	Moved:        {Deleted, MigratingIn},
	Deleted:      {Creating, MigratingIn},
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok && s != ""
}

// Serving reports whether a tenant in state s is meant to have a live
// postmaster on this agent (the agent restarts it after a crash).
func (s State) Serving() bool { return s == Running || s == MigratingOut }

// CanTransition reports whether a tenant may move from state from to state to.
// The empty state stands for "no record yet". A no-op (from == to) is allowed.
func CanTransition(from, to State) bool {
	if from == to {
		return from != ""
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
