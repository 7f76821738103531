package keyspace

import (
	"slices"
	"strings"
)

// Assign returns ks's plan with the keys [r.Lo, r.Hi) of root table root
// given to partition to: the ranges it overlaps are cut at its bounds, and
// neighbouring ranges of one partition are joined. It is a move of a key
// range written as the whole plan a reconfiguration takes (POST
// /v1/keyspaces/{name}/reshard). from lists the partitions that own some
// of those keys now, in key order, to excluded; empty means the range is
// to's already. The error is one line.
func Assign(ks *Keyspace, root string, r Range, to string) (spec PlanSpec, from []string, err error) {
	t, ok := ks.tables[root]
	if !ok || t.Kind != Sharded {
		return nil, nil, invalidf("table %s is not a sharded table of keyspace %s (its roots: %s)", root, ks.Name, strings.Join(ks.Roots(), ", "))
	}
	if _, ok := ks.parts[to]; !ok {
		return nil, nil, invalidf("unknown partition %s (keyspace %s has %s)", to, ks.Name, strings.Join(ks.partNames(), ", "))
	}
	if !r.Lo.Inf && !r.Hi.Inf && r.Lo.Key.Compare(r.Hi.Key) >= 0 {
		return nil, nil, invalidf("range %s is empty", r)
	}
	cur := ks.plan[root]
	if n := len(cur); n == 0 || lessLo(r.Lo, cur[0].Lo) || lessHi(cur[n-1].Hi, r.Hi) {
		return nil, nil, invalidf("range %s reaches beyond table %s's keys %s", r, root, cur.span())
	}
	var out RangeMap
	for _, cur := range cur {
		if !cur.Overlaps(r.Lo, r.Hi) {
			out = append(out, cur)
			continue
		}
		if cur.Partition != to && !slices.Contains(from, cur.Partition) {
			from = append(from, cur.Partition)
		}
		if lessLo(cur.Lo, r.Lo) { // the part below r stays
			out = append(out, Range{Lo: cur.Lo, Hi: r.Lo, Partition: cur.Partition})
		}
		if lessHi(r.Hi, cur.Hi) { // the part above r stays
			out = append(out, Range{Lo: r.Hi, Hi: cur.Hi, Partition: cur.Partition})
		}
	}
	out = append(out, Range{Lo: r.Lo, Hi: r.Hi, Partition: to})
	if err := out.sortCheck(); err != nil {
		return nil, nil, invalidf("range %s: %v", r, err)
	}
	spec = PlanSpec{}
	for name, m := range ks.plan {
		if name != root {
			spec[name] = m.spec()
		}
	}
	spec[root] = out.joined().spec()
	return spec, from, nil
}

// lessHi reports whether upper bound a is below upper bound b.
func lessHi(a, b Bound) bool {
	if a.Inf || b.Inf {
		return b.Inf && !a.Inf
	}
	return a.Key.Compare(b.Key) < 0
}

// joined merges adjacent ranges of one partition. REQUIRES: m sorted and
// contiguous.
func (m RangeMap) joined() RangeMap {
	var out RangeMap
	for _, r := range m {
		if n := len(out); n > 0 && out[n-1].Partition == r.Partition {
			out[n-1].Hi = r.Hi
			continue
		}
		out = append(out, r)
	}
	return out
}

// spec writes m in PlanSpec form.
func (m RangeMap) spec() map[string]string {
	by := map[string][]string{}
	for _, r := range m {
		by[r.Partition] = append(by[r.Partition], r.String())
	}
	out := map[string]string{}
	for p, rs := range by {
		out[p] = strings.Join(rs, ",")
	}
	return out
}

// ParseRange reads one range "[lo,hi)" of table's key type.
func (ks *Keyspace) ParseRange(table, s string) (Range, error) {
	t, ok := ks.tables[table]
	if !ok {
		return Range{}, invalidf("keyspace %s has no table %s", ks.Name, table)
	}
	rs, err := parseRanges(s, t.Type)
	if err != nil {
		return Range{}, invalidf("range %q: %v", s, err)
	}
	if len(rs) != 1 {
		return Range{}, invalidf("range %q: want one range [lo,hi)", s)
	}
	return rs[0], nil
}
