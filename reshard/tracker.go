package reshard

import (
	"fmt"

	"github.com/sluicedb/sluice/keyspace"
)

// State is a chunk's progress at its destination.
type State uint8

const (
	NotStarted State = iota // the rows are at the source only
	Partial                 // a pull is in flight
	Complete                // the destination committed the rows and dropped its fence
)

func (s State) String() string {
	switch s {
	case NotStarted:
		return "not_started"
	case Partial:
		return "partial"
	case Complete:
		return "complete"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Tracker follows the chunks of one reconfiguration after its switch. It
// is not safe for concurrent use; its owner serialises calls.
//
// The driver (the agent) owns the authoritative Tracker; a router (the
// proxy) keeps a replica of it that only learns completions, so it may
// believe a Complete chunk is still moving (it then asks the driver, who
// answers at once) but never the opposite.
type Tracker struct {
	chunks   []Chunk
	state    []State
	cleaned  []bool
	byRoot   map[string][]int
	subPlan  int // the sub-plan asynchronous pulls are in
	subPlans int
}

// NewTracker follows chunks (IDs 0…n-1 in order, as Plan numbers them);
// complete lists those the destinations already hold (recovered from
// their fences after a restart) and cleaned those whose source rows are
// gone.
func NewTracker(chunks []Chunk, complete, cleaned func(id int) bool) (*Tracker, error) {
	t := &Tracker{chunks: chunks, state: make([]State, len(chunks)), cleaned: make([]bool, len(chunks)), byRoot: map[string][]int{}}
	for i, c := range chunks {
		if c.ID != i {
			return nil, fmt.Errorf("reshard: chunk %d has id %d", i, c.ID)
		}
		if complete != nil && complete(i) {
			t.state[i] = Complete
			t.cleaned[i] = cleaned != nil && cleaned(i)
		}
		t.byRoot[c.Root] = append(t.byRoot[c.Root], i)
		t.subPlans = max(t.subPlans, c.SubPlan+1)
	}
	t.advance()
	return t, nil
}

// Chunks returns the chunks followed (not to be modified).
func (t *Tracker) Chunks() []Chunk { return t.chunks }

// State returns chunk id's state.
func (t *Tracker) State(id int) State { return t.state[id] }

// Cleaned reports whether chunk id's source rows are deleted.
func (t *Tracker) Cleaned(id int) bool { return t.cleaned[id] }

// Moving returns the chunks holding a key of root in [lo, hi) that are not
// Complete: a transaction touching those keys waits for their pulls.
func (t *Tracker) Moving(root string, lo, hi keyspace.Bound) []int {
	var out []int
	for _, i := range t.byRoot[root] {
		if t.state[i] != Complete && t.chunks[i].Overlaps(lo, hi) {
			out = append(out, i)
		}
	}
	return out
}

// MovingKey returns the chunk holding key k of root if it is not Complete.
func (t *Tracker) MovingKey(root string, k keyspace.Key) (int, bool) {
	for _, i := range t.byRoot[root] {
		if t.state[i] != Complete && t.chunks[i].Contains(k) {
			return i, true
		}
	}
	return 0, false
}

// Begin starts a pull of chunk id: NotStarted → Partial. It reports false
// when the chunk is already being pulled or Complete (pulls of one chunk
// are deduplicated: the caller waits for the one in flight).
func (t *Tracker) Begin(id int) bool {
	if t.state[id] != NotStarted {
		return false
	}
	t.state[id] = Partial
	return true
}

// Done records that the destination committed chunk id (Partial →
// Complete). A replica (which never Begins) may record it from any state.
func (t *Tracker) Done(id int) {
	t.state[id] = Complete
	t.advance()
}

// Failed records that the pull of chunk id did not commit: Partial →
// NotStarted, to be pulled again.
func (t *Tracker) Failed(id int) {
	if t.state[id] == Partial {
		t.state[id] = NotStarted
	}
}

// Clean records that chunk id's source rows are deleted. REQUIRES: Complete.
func (t *Tracker) Clean(id int) {
	if t.state[id] != Complete {
		panic(fmt.Sprintf("reshard: clean of chunk %d in state %s", id, t.state[id]))
	}
	t.cleaned[id] = true
}

// advance moves the asynchronous pulls to the first sub-plan with a chunk
// not Complete.
func (t *Tracker) advance() {
	for t.subPlan < t.subPlans {
		for i, c := range t.chunks {
			if c.SubPlan == t.subPlan && t.state[i] != Complete {
				return
			}
		}
		t.subPlan++
	}
}

// SubPlan returns the sub-plan asynchronous pulls are in and how many
// there are (SubPlan == SubPlans: every chunk is Complete).
func (t *Tracker) SubPlan() (cur, n int) { return t.subPlan, t.subPlans }

// Next returns the next chunk to pull asynchronously: the first NotStarted
// chunk of the current sub-plan. ok is false when there is none now
// (pulls of the sub-plan are in flight, or every chunk is Complete).
func (t *Tracker) Next() (id int, ok bool) {
	for i, c := range t.chunks {
		if c.SubPlan == t.subPlan && t.state[i] == NotStarted {
			return i, true
		}
	}
	return 0, false
}

// NextClean returns a Complete chunk whose source rows remain. The
// sub-chunks of a split key are cleaned once all of them are Complete,
// the first last (it holds the root's row, which the others' rows may
// reference).
func (t *Tracker) NextClean() (id int, ok bool) {
	for i, c := range t.chunks {
		if t.state[i] != Complete || t.cleaned[i] {
			continue
		}
		if c.Sub == nil || t.groupCleanable(i) {
			return i, true
		}
	}
	return 0, false
}

// groupCleanable reports whether sub-chunk i may be cleaned: every chunk
// of its group is Complete, and, for the group's first, the rest are
// cleaned.
func (t *Tracker) groupCleanable(i int) bool {
	g := t.chunks[i].Group
	for j, c := range t.chunks {
		if c.Sub == nil || c.Group != g {
			continue
		}
		if t.state[j] != Complete || (i == g && j != g && !t.cleaned[j]) {
			return false
		}
	}
	return true
}

// Finished reports whether every chunk is Complete and cleaned.
func (t *Tracker) Finished() bool {
	for i := range t.chunks {
		if t.state[i] != Complete || !t.cleaned[i] {
			return false
		}
	}
	return true
}

// Progress sums the chunks by state.
type Progress struct {
	Chunks    int   `json:"chunks"`
	Complete  int   `json:"complete"`
	Partial   int   `json:"partial"`
	Cleaned   int   `json:"cleaned"`
	Bytes     int64 `json:"bytes"`      // estimated, all chunks
	BytesDone int64 `json:"bytes_done"` // estimated, Complete chunks
	SubPlan   int   `json:"sub_plan"`
	SubPlans  int   `json:"sub_plans"`
}

// Progress returns the chunks' totals.
func (t *Tracker) Progress() Progress {
	p := Progress{Chunks: len(t.chunks), SubPlan: t.subPlan, SubPlans: t.subPlans}
	for i, c := range t.chunks {
		p.Bytes += c.Bytes
		switch t.state[i] {
		case Complete:
			p.Complete++
			p.BytesDone += c.Bytes
		case Partial:
			p.Partial++
		}
		if t.cleaned[i] {
			p.Cleaned++
		}
	}
	return p
}

// Writable returns the partition that accepts a write to a key of chunk c
// in state st, after the switch: the destination once Complete, none
// before (the source's outgoing fence and the destination's incoming one
// both refuse it). Before the switch it is c.From.
func Writable(c Chunk, st State, switched bool) []string {
	switch {
	case !switched:
		return []string{c.From}
	case st == Complete:
		return []string{c.To}
	}
	return nil
}
