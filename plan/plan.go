package plan

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Status is a move's state.
type Status string

const (
	Pending Status = "pending" // not started
	Running Status = "running" // its migration runs on its source agent
	Done    Status = "done"    // committed: the tenant serves from To
	Failed  Status = "failed"  // its migration rolled back: the tenant serves from From
)

// State is a plan's state.
type State string

const (
	StateRunning State = "running" // moves start as servers free up
	StatePaused  State = "paused"  // copying moves are held at the driver's least rate; none start
	StateDone    State = "done"    // every move done
	StateFailed  State = "failed"  // every move ended, some failed
	StateAborted State = "aborted" // stopped by the operator: running moves rolled back
)

// Final reports whether s is an end state.
func (s State) Final() bool { return s == StateDone || s == StateFailed || s == StateAborted }

// Plan is a validated plan and its progress: the value the driver persists.
type Plan struct {
	ID           string  `json:"id"`
	Method       string  `json:"method"`
	SubMoveBytes int64   `json:"sub_move_bytes"`
	K            float64 `json:"k,omitempty"`
	MaxRate      float64 `json:"max_rate,omitempty"`
	Moves        []Move  `json:"moves"`
	// Order is the moves' priority (indices into Moves, Order's result).
	Order   []int     `json:"order"`
	Stores  []Store   `json:"stores"`
	State   State     `json:"state"`
	Created time.Time `json:"created"`
	// Finished is when the plan reached a final state; zero before.
	Finished time.Time `json:"finished,omitzero"`
}

// Move is one tenant or key-range move and its progress.
type Move struct {
	Tenant   string `json:"tenant,omitempty"`
	TenantID int64  `json:"tenant_id,omitempty"`
	// A key-range move (Keyspace set, Tenant empty): the keys Range of root
	// table Table of keyspace Keyspace, whose reconfigurations agent Holder
	// drives, from partition Source (its tenant SourceTenant) to partition
	// Dest (DestTenant). Migration is then the reconfiguration's ID.
	Keyspace     string `json:"keyspace,omitempty"`
	Table        string `json:"table,omitempty"`
	Range        string `json:"range,omitempty"`
	Holder       string `json:"holder,omitempty"`
	Source       string `json:"source,omitempty"`
	SourceTenant string `json:"source_tenant,omitempty"`
	Dest         string `json:"dest,omitempty"`
	DestTenant   string `json:"dest_tenant,omitempty"`
	// From and To are agents: the tenant's source and target, or the
	// source and destination partitions' (the same agent when both
	// partitions are its tenants).
	From string `json:"from"`
	To   string `json:"to"`
	// Bytes is the tenant's size when the plan was validated, bytes; 0
	// unknown. Moved is what its snapshot stream has sent, bytes.
	Bytes  int64  `json:"bytes"`
	Moved  int64  `json:"moved_bytes"`
	Status Status `json:"status"`
	// Migration is the source agent's migration ID once started (a
	// key-range move's: Holder's reconfiguration ID).
	Migration string `json:"migration,omitempty"`
	Error     string `json:"error,omitempty"`
	// Attempts counts the move's migrations that rolled back.
	Attempts int       `json:"attempts,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
}

// SubMoves is the number of sub-moves of size sub in m (at least 1).
func (m Move) SubMoves(sub int64) int64 { return max(1, (m.Bytes+sub-1)/sub) }

// Driver is the agent that runs m: its tenant's source agent, or the agent
// holding its keyspace.
func (m Move) Driver() string {
	if m.IsRange() {
		return m.Holder
	}
	return m.From
}

// IsRange reports whether m moves a key range (not a tenant).
func (m Move) IsRange() bool { return m.Keyspace != "" }

// What names what m moves: the tenant, or keyspace:table[lo,hi).
func (m Move) What() string {
	if m.IsRange() {
		return m.Keyspace + ":" + m.Table + m.Range
	}
	return m.Tenant
}

// Store is a tenant whose latency the plan's control loop watches: every
// tenant of every server the plan touches.
type Store struct {
	Name       string  `json:"name"`
	Agent      string  `json:"agent"` // where it was when the plan was validated
	ContractMs float64 `json:"contract_ms"`
	Moving     bool    `json:"moving"` // one of the plan's moves moves it
}

// Order returns the moves' priority: first moves out of a server that other
// moves move tenants into (room before filling), then the largest first,
// then the plan's order.
func Order(moves []Move) []int {
	into := map[string]int{}
	for _, m := range moves {
		into[m.To]++
	}
	idx := make([]int, len(moves))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ma, mb := moves[a], moves[b]
		ra, rb := into[ma.From] > 0, into[mb.From] > 0
		if ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return cmp.Compare(mb.Bytes, ma.Bytes)
	})
	return idx
}

// MaxAttempts is how many times a move's migration may roll back before the
// move fails: a rollback leaves the tenant serving on its source, so trying
// again is safe, and most rollbacks (a peer restarting, a catch-up timeout
// under a burst) are passing.
const MaxAttempts = 3

// Event is something the driver tells Step.
type Event struct {
	Kind EventKind
	Move int    // index into Moves, for move events
	ID   string // Started: the migration's ID
	// Bytes: Progressed and Committed: what the move's stream has sent.
	Bytes int64
	// Total: Progressed: the move's snapshot size, bytes, when known (it
	// replaces the estimate).
	Total int64
	Err   string // RolledBack: why
}

// EventKind names an Event.
type EventKind string

const (
	Tick       EventKind = "tick"        // nothing happened: start what may start
	Resumed    EventKind = "resumed"     // the driver restarted
	Started    EventKind = "started"     // Move's migration began (ID)
	Progressed EventKind = "progress"    // Move's stream has sent Bytes
	Committed  EventKind = "committed"   // Move committed
	RolledBack EventKind = "rolled-back" // Move rolled back (Err)
	Pause      EventKind = "pause"
	Resume     EventKind = "resume"
	Abort      EventKind = "abort"
)

// Action is something Step asks the driver to do.
type Action struct {
	Kind ActionKind
	Move int
}

// ActionKind names an Action.
type ActionKind string

const (
	// Start: start Move's migration on its source agent, then feed Started
	// (or RolledBack if it was refused).
	Start ActionKind = "start"
	// Watch: follow Move's migration (its ID is in the move) until it ends;
	// feed Progressed, then Committed or RolledBack.
	Watch ActionKind = "watch"
	// Cancel: abort Move's migration (rolls back on its source), then feed
	// RolledBack.
	Cancel ActionKind = "cancel"
)

// Step applies ev to p at now and returns the new plan and what the driver
// must do, in order. The driver persists the returned plan before doing
// the actions (a Start done before the plan that asked for it is on disk
// could start a second migration after a crash; the other way round, the
// restarted driver finds the move running without an ID and looks for its
// migration). Events for a move not in the expected status are ignored.
func Step(p Plan, ev Event, now time.Time) (Plan, []Action) {
	p.Moves = slices.Clone(p.Moves)
	var acts []Action
	mv := func() *Move {
		if ev.Move < 0 || ev.Move >= len(p.Moves) {
			return nil
		}
		return &p.Moves[ev.Move]
	}
	switch ev.Kind {
	case Resumed:
		for i, m := range p.Moves {
			if m.Status == Running {
				acts = append(acts, Action{Watch, i})
			}
		}
	case Started:
		if m := mv(); m != nil && m.Status == Running && m.Migration == "" {
			m.Migration = ev.ID
			acts = append(acts, Action{Watch, ev.Move})
		}
	case Progressed:
		if m := mv(); m != nil && m.Status == Running {
			m.Moved = max(m.Moved, ev.Bytes)
			if ev.Total > 0 {
				m.Bytes = ev.Total
			}
		}
	case Committed:
		if m := mv(); m != nil && m.Status == Running {
			m.Status, m.Finished, m.Moved = Done, now, max(m.Moved, ev.Bytes)
			m.Bytes = max(m.Bytes, m.Moved) // an estimate short of what moved (or none: a key range that ended before its first progress)
		}
	case RolledBack:
		if m := mv(); m != nil && m.Status == Running {
			m.Attempts++
			m.Error, m.Migration = ev.Err, ""
			m.Status, m.Finished = Failed, now
			if m.Attempts < MaxAttempts && p.State != StateAborted {
				m.Status, m.Finished = Pending, time.Time{}
			}
		}
	case Pause:
		if p.State == StateRunning {
			p.State = StatePaused
		}
	case Resume:
		if p.State == StatePaused {
			p.State = StateRunning
		}
	case Abort:
		if !p.State.Final() {
			p.State = StateAborted
			for i, m := range p.Moves {
				if m.Status == Running {
					acts = append(acts, Action{Cancel, i})
				}
			}
		}
	}
	if p.State == StateRunning {
		for _, i := range Schedule(p) {
			p.Moves[i].Status, p.Moves[i].Started = Running, now
			acts = append(acts, Action{Start, i})
		}
	}
	if !p.State.Final() && p.State != StatePaused && Ended(p) {
		p.State, p.Finished = StateDone, now
		if slices.ContainsFunc(p.Moves, func(m Move) bool { return m.Status == Failed }) {
			p.State = StateFailed
		}
	}
	if p.State == StateAborted && p.Finished.IsZero() {
		p.Finished = now
	}
	return p, acts
}

// Ended reports whether no move is pending or running.
func Ended(p Plan) bool {
	return !slices.ContainsFunc(p.Moves, func(m Move) bool { return m.Status == Pending || m.Status == Running })
}

// Settled reports whether the driver is done with p: it is in a final
// state and no move's migration still runs (an aborted plan's running moves
// are followed until they have rolled back).
func Settled(p Plan) bool {
	return p.State.Final() && !slices.ContainsFunc(p.Moves, func(m Move) bool { return m.Status == Running })
}

// Schedule returns the pending moves that may start now, in priority
// order: each shares no server with a running move or with one chosen
// before it.
//
// A keyspace runs one reconfiguration at a time, and its key-range moves
// run in the plan's order (each was validated against the plan the ones
// before it leave): a key-range move may start when no move of its
// keyspace runs and every one before it has ended.
func Schedule(p Plan) []int {
	busy := map[string]bool{}
	next := map[string]int{} // keyspace → its first key-range move not ended
	for i, m := range p.Moves {
		if m.Status == Running {
			busy[m.From], busy[m.To] = true, true
		}
		if _, ok := next[m.Keyspace]; m.IsRange() && !ok && (m.Status == Pending || m.Status == Running) {
			next[m.Keyspace] = i
		}
	}
	var out []int
	for _, i := range p.Order {
		m := p.Moves[i]
		if m.Status != Pending || busy[m.From] || busy[m.To] || (m.IsRange() && next[m.Keyspace] != i) {
			continue
		}
		busy[m.From], busy[m.To] = true, true
		out = append(out, i)
	}
	return out
}

// Shares splits the plan's aggregate rate (bytes/s) among its running
// moves whose snapshot is copying (copying(i)): equal shares, rate / n. The
// control loop acts on the plan as a whole (the worst store decides), as
// Aqueduct's sub-move rate does; a move past its copy is not counted.
func Shares(p Plan, rate float64, copying func(i int) bool) map[int]float64 {
	var idx []int
	for i, m := range p.Moves {
		if m.Status == Running && copying(i) {
			idx = append(idx, i)
		}
	}
	out := map[int]float64{}
	for _, i := range idx {
		out[i] = rate / float64(len(idx))
	}
	return out
}

// Totals are a plan's figures summed over its moves.
type Totals struct {
	Moves, Pending, Running, Done, Failed int
	Bytes, Moved                          int64 // estimated total and sent so far, bytes
}

// Sum returns p's totals.
func Sum(p Plan) Totals {
	var t Totals
	for _, m := range p.Moves {
		t.Moves++
		t.Bytes += m.Bytes
		t.Moved += m.Moved
		switch m.Status {
		case Pending:
			t.Pending++
		case Running:
			t.Running++
		case Done:
			t.Done++
		case Failed:
			t.Failed++
		}
	}
	return t
}

func (m Move) String() string {
	if m.IsRange() {
		return fmt.Sprintf("%s %s→%s (%s→%s) %s", m.What(), m.Source, m.Dest, m.From, m.To, m.Status)
	}
	return fmt.Sprintf("%s %s→%s %s", m.Tenant, m.From, m.To, m.Status)
}
