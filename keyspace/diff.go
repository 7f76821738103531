package keyspace

import (
	"fmt"
	"slices"
	"strings"
)

// Move is one reconfiguration range (the Squall paper §3.1): the keys
// [Range.Lo, Range.Hi) of root table Root, and the rows of every table
// co-partitioned with it, move from partition From to partition To.
type Move struct {
	Root string
	// Tables are the tables whose rows move: Root, then the tables
	// co-partitioned with it, by name.
	Tables   []string
	Range    Range // Range.Partition is To
	From, To string
}

func (m Move) String() string {
	return fmt.Sprintf("%s %s %s→%s (%s)", m.Root, m.Range, m.From, m.To, strings.Join(m.Tables, ", "))
}

// Diff returns the moves that take plan from's ownership to plan to's:
// for each root table, in key order, every maximal range of keys whose
// owner differs, adjacent pieces with the same source and destination
// merged. Keys the old plan does not cover hold no rows and need no move;
// keys the old plan covers but the new one does not would lose their rows:
// an error (wrapping ErrInvalid) names them. REQUIRES: to has from's tables
// (to = from.WithPlan(…)).
func Diff(from, to *Keyspace) ([]Move, error) {
	var out []Move
	for _, root := range from.Roots() {
		old, next := from.plan[root], to.plan[root]
		tables := []string{root}
		for _, t := range from.Tables {
			if t.Kind == CoPartitioned && t.Root == root {
				tables = append(tables, t.Name)
			}
		}
		slices.Sort(tables[1:])
		points := boundaries(old, next)
		for i := 0; i+1 < len(points); i++ {
			seg := Range{Lo: points[i].bound(), Hi: points[i+1].bound()}
			src, inOld := ownerOf(old, seg)
			dst, inNew := ownerOf(next, seg)
			switch {
			case !inOld || src == dst:
				continue
			case !inNew:
				return nil, invalidf("plan: %s: keys %s of partition %s would have no partition in the new plan", root, seg, src)
			}
			if n := len(out); n > 0 && out[n-1].Root == root && out[n-1].From == src && out[n-1].To == dst &&
				!out[n-1].Range.Hi.Inf && !seg.Lo.Inf && out[n-1].Range.Hi.Key.Compare(seg.Lo.Key) == 0 {
				out[n-1].Range.Hi = seg.Hi
				continue
			}
			seg.Partition = dst
			out = append(out, Move{Root: root, Tables: tables, Range: seg, From: src, To: dst})
		}
	}
	return out, nil
}

// point is a range boundary on the key line: −∞, a key, or +∞.
type point struct {
	inf int // -1 below every key, 0 a key, +1 above every key
	key Key
}

func (p point) bound() Bound { return Bound{Inf: p.inf != 0, Key: p.key} }

func comparePoints(a, b point) int {
	if a.inf != b.inf || a.inf != 0 {
		return a.inf - b.inf
	}
	return a.key.Compare(b.key)
}

// boundaries returns every bound of both maps, sorted, each once.
func boundaries(ms ...RangeMap) []point {
	var ps []point
	for _, m := range ms {
		for _, r := range m {
			ps = append(ps, toPoint(r.Lo, -1), toPoint(r.Hi, +1))
		}
	}
	slices.SortFunc(ps, comparePoints)
	return slices.CompactFunc(ps, func(a, b point) bool { return comparePoints(a, b) == 0 })
}

func toPoint(b Bound, side int) point {
	if b.Inf {
		return point{inf: side}
	}
	return point{key: b.Key}
}

// ownerOf returns the partition owning segment seg of m, which lies whole
// in one range of m or outside all of them.
func ownerOf(m RangeMap, seg Range) (string, bool) {
	for _, r := range m {
		loOK := r.Lo.Inf || (!seg.Lo.Inf && r.Lo.Key.Compare(seg.Lo.Key) <= 0)
		hiOK := r.Hi.Inf || (!seg.Hi.Inf && seg.Hi.Key.Compare(r.Hi.Key) <= 0)
		if loOK && hiOK {
			return r.Partition, true
		}
	}
	return "", false
}
