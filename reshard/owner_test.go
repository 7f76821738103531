package reshard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

// model is a reconfiguration on simulated partitions: what the agent and
// the proxy do (package agent, package proxy), reduced to their effects on
// rows and fences, driven by the Tracker as they drive it.
type model struct {
	t                  *testing.T
	seed               uint64
	from               *keyspace.Keyspace
	to                 *keyspace.Keyspace
	chunks             []Chunk
	rows               map[string]map[int64]int // partition → key → value
	in                 map[string]map[int]bool  // destination → chunks fenced in
	out                map[string]map[int]bool  // source → chunks fenced out
	ledger             map[int64]int            // acknowledged writes: key → last value
	driver             *Tracker                 // the agent's, nil after a crash until it recovers
	proxy              *Tracker                 // the proxy's replica
	snap               map[int]map[int64]int    // pulls begun: the source rows of their snapshot
	switched, finished bool
	n                  int64 // keys [0, n)
}

// accepts reports whether partition p accepts a write to key k: none of
// its fence rows covers k.
func (m *model) accepts(p string, k int64) bool {
	for id := range m.in[p] {
		if m.chunks[id].Contains(keyspace.IntKey(k)) {
			return false
		}
	}
	for id := range m.out[p] {
		if m.chunks[id].Contains(keyspace.IntKey(k)) {
			return false
		}
	}
	return true
}

// checkOwners is the invariant: while the reconfiguration runs, of a
// moving key's old and new owner at most one accepts a write to it. (A
// partition that owns a key in neither plan accepts a stray write as it
// does without any reconfiguration: `keyspace check` finds such rows.)
func (m *model) checkOwners(step string) {
	if m.finished {
		return
	}
	for k := int64(0); k < m.n; k++ {
		for _, c := range m.chunks {
			if !c.Contains(keyspace.IntKey(k)) {
				continue
			}
			var w []string
			for _, p := range []string{c.From, c.To} {
				if m.accepts(p, k) {
					w = append(w, p)
				}
			}
			if len(w) > 1 {
				m.t.Fatalf("seed %d, after %s: key %d writable on %v", m.seed, step, k, w)
			}
		}
	}
}

// write is a transaction through the proxy writing key k.
func (m *model) write(k int64, v int) {
	ks := m.from
	if m.switched {
		ks = m.to
		if id, moving := m.proxy.MovingKey("k", keyspace.IntKey(k)); moving {
			if !m.reactive(id) {
				return // the driver is down: the transaction fails, nothing acknowledged
			}
			m.proxy.Done(id)
		}
	}
	owner, err := ks.Owner("k", keyspace.IntKey(k))
	if err != nil {
		m.t.Fatal(err)
	}
	if !m.accepts(owner, k) {
		m.t.Fatalf("seed %d: a routed write of key %d refused by %s's fence", m.seed, k, owner)
	}
	m.rows[owner][k] = v
	m.ledger[k] = v
}

// reactive is the driver's answer to a proxy's pull request.
func (m *model) reactive(id int) bool {
	if m.driver == nil {
		return false
	}
	if m.driver.State(id) != Complete {
		if m.driver.Begin(id) {
			m.begin(id)
		}
		m.commit(id) // the reactive pull runs to its end while the transaction waits
	}
	return true
}

// begin takes a pull's snapshot of the chunk's rows at its source.
func (m *model) begin(id int) {
	c := m.chunks[id]
	s := map[int64]int{}
	for k, v := range m.rows[c.From] {
		if c.Contains(keyspace.IntKey(k)) {
			s[k] = v
		}
	}
	m.snap[id] = s
}

// commit is the destination's transaction: rows inserted unless present,
// incoming fence dropped — unless the fence is already gone (a repeated pull).
func (m *model) commit(id int) {
	c := m.chunks[id]
	s := m.snap[id]
	delete(m.snap, id)
	if m.in[c.To][id] {
		for k, v := range s {
			if _, ok := m.rows[c.To][k]; !ok {
				m.rows[c.To][k] = v
			}
		}
		delete(m.in[c.To], id)
	}
	m.driver.Done(id)
}

// crash loses the driver's memory and its pulls in flight; it recovers
// from the destinations' fences as the agent does.
func (m *model) crash() {
	m.driver = nil
	clear(m.snap)
}

func (m *model) recover() {
	tr, err := NewTracker(m.chunks, func(id int) bool { return !m.in[m.chunks[id].To][id] }, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	m.driver = tr
}

func (m *model) clean(id int) {
	c := m.chunks[id]
	for k := range m.rows[c.From] {
		if c.Contains(keyspace.IntKey(k)) {
			delete(m.rows[c.From], k)
		}
	}
	m.driver.Clean(id)
}

func TestSingleOwnerUnderInterleavings(t *testing.T) {
	for seed := range uint64(400) {
		runModel(t, seed)
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	const n = 40
	from := testKeyspace(t, rng, 2+rng.IntN(3), n)
	to, err := from.WithPlan(randomPlan(rng, len(from.Partitions), n))
	if err != nil {
		t.Fatal(err)
	}
	moves, err := keyspace.Diff(from, to)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{ChunkBytes: int64(1+rng.IntN(6)) << 20, Split: rng.IntN(2) == 0, Merge: rng.IntN(2) == 0, SubPlans: rng.IntN(6)}
	m := &model{t: t, seed: seed, from: from, to: to, chunks: Plan(from, moves, uniformStats(n), o), n: n,
		rows: map[string]map[int64]int{}, in: map[string]map[int]bool{}, out: map[string]map[int]bool{},
		ledger: map[int64]int{}, snap: map[int]map[int64]int{}}
	for _, p := range from.Partitions {
		m.rows[p.Name], m.in[p.Name], m.out[p.Name] = map[int64]int{}, map[int]bool{}, map[int]bool{}
	}
	v := 0
	for k := int64(0); k < n; k++ { // the data before the change
		v++
		m.write(k, v)
	}
	for _, c := range m.chunks { // preparing: incoming fences
		m.in[c.To][c.ID] = true
	}
	m.checkOwners("prepare")
	for range rng.IntN(20) { // writes between prepare and switch go to the old owners
		v++
		m.write(rng.Int64N(n), v)
	}
	for _, c := range m.chunks { // switching: outgoing fences, then the plan
		m.out[c.From][c.ID] = true
	}
	m.switched = true
	m.recover()
	m.proxy, _ = NewTracker(m.chunks, nil, nil)
	m.checkOwners("switch")
	for step := 0; step < 2000 && !m.finished; step++ {
		op := rng.IntN(10)
		switch {
		case op < 4:
			v++
			m.write(rng.Int64N(n), v)
		case m.driver == nil:
			m.recover()
		case op < 6: // an asynchronous pull begins
			if id, ok := m.driver.Next(); ok && m.driver.Begin(id) {
				m.begin(id)
			}
		case op < 8: // a pull in flight commits
			for id := range m.snap {
				m.commit(id)
				break
			}
		case op == 8:
			if id, ok := m.driver.NextClean(); ok {
				m.clean(id)
			}
		case rng.IntN(4) == 0:
			m.crash()
		}
		m.checkOwners(fmt.Sprint("step ", step))
		if m.driver != nil && m.driver.Finished() {
			m.finished = true
		}
	}
	if !m.finished { // drain: what the driver does with no more interference
		if m.driver == nil {
			m.recover()
		}
		for !m.driver.Finished() {
			if id, ok := m.driver.Next(); ok {
				m.driver.Begin(id)
				m.begin(id)
				m.commit(id)
			} else if id, ok := m.driver.NextClean(); ok {
				m.clean(id)
			} else {
				for id := range m.snap {
					m.commit(id)
				}
				for id := range m.chunks { // pulls lost in a crash: Partial in a tracker that did not restart
					if m.driver.State(id) == Partial && m.snap[id] == nil {
						m.driver.Failed(id)
					}
				}
			}
		}
	}
	for k, want := range m.ledger { // nothing lost, nothing left behind
		owner, _ := to.Owner("k", keyspace.IntKey(k))
		for _, p := range from.Partitions {
			got, ok := m.rows[p.Name][k]
			switch {
			case p.Name == owner && (!ok || got != want):
				t.Fatalf("seed %d: key %d on its owner %s = %d, %v; acknowledged %d", seed, k, owner, got, ok, want)
			case p.Name != owner && ok:
				t.Fatalf("seed %d: key %d left on %s after the reconfiguration (owner %s)", seed, k, p.Name, owner)
			}
		}
	}
}
