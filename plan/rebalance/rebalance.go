// Package rebalance chooses which tenants to move so that no server carries
// more than a load target: the "which moves" half of a migration plan, as
// Aqueduct takes its plan from a separate planner (Lu et al., FAST 2002, §2:
// "the inputs to the migration engine are a migration plan…"). It does no
// I/O and keeps no state: servers and tenants in, moves out. Executing the
// moves — sub-moves, pacing, control, ordering in time — is the caller's.
//
// # Algorithm
//
// Loads are in units of a server's capacity (a server's Capacity, default
// 1, is the load it can carry at all); a server is over when its load
// exceeds Target × Capacity, and its headroom is Target × Capacity − load.
//
//	for each server over the target, largest excess first (ties by ID):
//	    while excess > 0:
//	        candidates = its tenants that fit the destination with the most
//	                     headroom (load ≤ that headroom) and are not moved yet
//	        none: the server stays over (Result.Over), next server
//	        cover = the candidate that alone covers the excess with the
//	                fewest bytes, if any
//	        dense = the candidates by load per byte, most first, as many
//	                as cover the excess together (or all)
//	        pick cover if it copies no more bytes than dense, else dense's first
//	        move it to the destination with the most headroom;
//	        excess −= its load; that destination's headroom −= its load
//
// Every move relieves its source and lands where it keeps the destination
// within the target, whatever order the moves then run in: a destination's
// headroom counts every move planned to it. Preferring load per byte keeps
// the bytes to copy — the plan's duration — small; a single tenant that
// covers the excess for fewer bytes ends that server's moves early, but a
// big one never displaces several small ones that copy less. (A greedy
// choice: the fewest bytes that cover an excess is a knapsack problem.) A server
// is only ever a source or a destination, never both. Ties are broken by
// ID, so the same input gives the same plan.
package rebalance

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Server is one server of the fleet.
type Server struct {
	ID string
	// Capacity is the load the server can carry, in the tenants' load unit;
	// 0 means 1 (loads are fractions of a server).
	Capacity float64
}

// Tenant is one tenant (store) and where it lives.
type Tenant struct {
	ID     string
	Server string  // the ID of the server it is on
	Bytes  int64   // what moving it copies; >= 0
	Load   float64 // its share of a server's capacity (same unit as Capacity); >= 0
}

// Params configure Plan.
type Params struct {
	// Target is the load a server should carry at most, as a fraction of
	// its capacity, in (0, 1]. Servers above it shed tenants to servers
	// below it.
	Target float64
}

// Move is one tenant's move.
type Move struct {
	Tenant string
	From   string
	To     string
	Bytes  int64
	Load   float64
}

// Excess is a server still over the target after the plan: no tenant of it
// fits any server's headroom.
type Excess struct {
	Server string
	Load   float64 // after the plan's moves, capacity units
	Over   float64 // load − Target × Capacity
}

// Result is a plan: moves in the order they were chosen (sources by
// decreasing excess), and the servers it could not bring under the target.
type Result struct {
	Moves []Move
	Over  []Excess
	Bytes int64 // sum of the moves' bytes
}

// ErrInput wraps every rejection of Plan's input.
var ErrInput = errors.New("rebalance: bad input")

// Validate checks servers, tenants and p: unique IDs, known servers,
// finite non-negative loads and bytes, Target in (0, 1].
func Validate(servers []Server, tenants []Tenant, p Params) error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrInput}, a...)...) }
	if !(p.Target > 0 && p.Target <= 1) {
		return bad("target must be in (0, 1], got %v", p.Target)
	}
	ids := make(map[string]bool, len(servers))
	for _, s := range servers {
		switch {
		case s.ID == "":
			return bad("a server has no ID")
		case ids[s.ID]:
			return bad("server %q twice", s.ID)
		case math.IsNaN(s.Capacity) || math.IsInf(s.Capacity, 0) || s.Capacity < 0:
			return bad("server %q: capacity must be finite and >= 0, got %v", s.ID, s.Capacity)
		}
		ids[s.ID] = true
	}
	seen := make(map[string]bool, len(tenants))
	for _, t := range tenants {
		switch {
		case t.ID == "":
			return bad("a tenant has no ID")
		case seen[t.ID]:
			return bad("tenant %q twice", t.ID)
		case !ids[t.Server]:
			return bad("tenant %q is on unknown server %q", t.ID, t.Server)
		case t.Bytes < 0:
			return bad("tenant %q: bytes must be >= 0, got %d", t.ID, t.Bytes)
		case math.IsNaN(t.Load) || math.IsInf(t.Load, 0) || t.Load < 0:
			return bad("tenant %q: load must be finite and >= 0, got %v", t.ID, t.Load)
		}
		seen[t.ID] = true
	}
	return nil
}

// Plan chooses moves that bring every server to at most p.Target of its
// capacity where tenants can be placed (see the package doc).
func Plan(servers []Server, tenants []Tenant, p Params) (Result, error) {
	if err := Validate(servers, tenants, p); err != nil {
		return Result{}, err
	}
	idx := make(map[string]int, len(servers))
	limit := make([]float64, len(servers))
	load := make([]float64, len(servers))
	on := make([][]int, len(servers)) // tenant indices per server
	for i, s := range servers {
		idx[s.ID] = i
		c := s.Capacity
		if c == 0 {
			c = 1
		}
		limit[i] = p.Target * c
	}
	for j, t := range tenants {
		i := idx[t.Server]
		load[i] += t.Load
		on[i] = append(on[i], j)
	}
	var over []int
	dst := &headrooms{}
	for i := range servers {
		if load[i] > limit[i] {
			over = append(over, i)
		} else {
			dst.items = append(dst.items, room{i: i, id: servers[i].ID, free: limit[i] - load[i]})
		}
	}
	heap.Init(dst)
	slices.SortFunc(over, func(a, b int) int {
		if c := cmpFloatDesc(load[a]-limit[a], load[b]-limit[b]); c != 0 {
			return c
		}
		return strings.Compare(servers[a].ID, servers[b].ID)
	})
	var r Result
	for _, i := range over {
		moved := map[int]bool{}
		for load[i] > limit[i] {
			j := pick(tenants, on[i], moved, load[i]-limit[i], dst.top())
			if j < 0 {
				r.Over = append(r.Over, Excess{Server: servers[i].ID, Load: load[i], Over: load[i] - limit[i]})
				break
			}
			t := tenants[j]
			d := dst.items[0]
			r.Moves = append(r.Moves, Move{Tenant: t.ID, From: t.Server, To: d.id, Bytes: t.Bytes, Load: t.Load})
			r.Bytes += t.Bytes
			moved[j] = true
			load[i] -= t.Load
			load[d.i] += t.Load
			dst.items[0].free -= t.Load
			heap.Fix(dst, 0)
		}
	}
	return r, nil
}

// pick returns the tenant of cand (indices into ts) to move next off a
// server excess over its target, or -1 if none fits free: the tenant that
// covers the excess alone with the fewest bytes if that copies no more than
// the densest tenants (most load per byte) would together, else the
// densest.
func pick(ts []Tenant, cand []int, moved map[int]bool, excess, free float64) int {
	cover := -1
	var fit []int
	for _, j := range cand {
		t := ts[j]
		if moved[j] || t.Load <= 0 || t.Load > free {
			continue
		}
		fit = append(fit, j)
		if t.Load >= excess && (cover < 0 || t.Bytes < ts[cover].Bytes || t.Bytes == ts[cover].Bytes && t.ID < ts[cover].ID) {
			cover = j
		}
	}
	if len(fit) == 0 {
		return -1
	}
	slices.SortFunc(fit, func(a, b int) int {
		if denser(ts[a], ts[b]) {
			return -1
		}
		return 1
	})
	if cover < 0 {
		return fit[0]
	}
	var bytes int64
	for _, j := range fit {
		bytes += ts[j].Bytes
		if excess -= ts[j].Load; excess <= 0 {
			break
		}
	}
	if ts[cover].Bytes <= bytes {
		return cover
	}
	return fit[0]
}

// denser reports whether a relieves more load per byte than b (ties: more
// load, then ID).
func denser(a, b Tenant) bool {
	// a.Load/a.Bytes > b.Load/b.Bytes without dividing by zero bytes.
	l, r := a.Load*float64(max(b.Bytes, 1)), b.Load*float64(max(a.Bytes, 1))
	if l != r {
		return l > r
	}
	if a.Load != b.Load {
		return a.Load > b.Load
	}
	return a.ID < b.ID
}

func cmpFloatDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// room is a destination's headroom.
type room struct {
	i    int
	id   string
	free float64
}

// headrooms is a max-heap of destinations by headroom (ties: ID).
type headrooms struct{ items []room }

func (h *headrooms) Len() int { return len(h.items) }
func (h *headrooms) Less(a, b int) bool {
	x, y := h.items[a], h.items[b]
	if x.free != y.free {
		return x.free > y.free
	}
	return x.id < y.id
}
func (h *headrooms) Swap(a, b int) { h.items[a], h.items[b] = h.items[b], h.items[a] }
func (h *headrooms) Push(x any)    { h.items = append(h.items, x.(room)) }
func (h *headrooms) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// top is the largest headroom, or -Inf when there is no destination.
func (h *headrooms) top() float64 {
	if len(h.items) == 0 {
		return math.Inf(-1)
	}
	return h.items[0].free
}
