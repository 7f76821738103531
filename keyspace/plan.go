package keyspace

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// PlanSpec is a partition plan in Squall's JSON form: root table →
// partition → its ranges, as text:
//
//	{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}
//
// A partition may own several ranges ("[1,3),[9,12)"). A bound is an integer
// or a text key; text in single quotes when it holds a comma, bracket or
// quote ('a,b'; a quote doubled as in SQL); an empty bound is unbounded
// ("[,4)", "[100,)").
type PlanSpec map[string]map[string]string

// Plan is a validated plan: each root table's ranges in key order.
type Plan map[string]RangeMap

// Key is one key value.
type Key struct {
	Type KeyType
	I    int64  // Int keys
	S    string // Text keys
}

// IntKey and TextKey make keys.
func IntKey(v int64) Key   { return Key{Type: Int, I: v} }
func TextKey(s string) Key { return Key{Type: Text, S: s} }

func (k Key) String() string {
	if k.Type == Text {
		return "'" + strings.ReplaceAll(k.S, "'", "''") + "'"
	}
	return strconv.FormatInt(k.I, 10)
}

// Compare returns -1, 0 or 1. REQUIRES: both keys have the same type.
func (k Key) Compare(o Key) int {
	if k.Type == Text {
		return strings.Compare(k.S, o.S)
	}
	switch {
	case k.I < o.I:
		return -1
	case k.I > o.I:
		return 1
	}
	return 0
}

// ErrKeyType is wrapped by errors about a key of the wrong type.
var ErrKeyType = errors.New("keyspace: wrong key type")

// ParseKey reads a key of type t from its text form (unquoted).
func ParseKey(t KeyType, s string) (Key, error) {
	if t == Text {
		return TextKey(s), nil
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %q is not an integer key", ErrKeyType, s)
	}
	return IntKey(v), nil
}

// Bound is a range bound; Inf means unbounded (below for a lower bound,
// above for an upper one).
type Bound struct {
	Inf bool
	Key Key
}

// Range is [Lo, Hi) owned by Partition.
type Range struct {
	Lo, Hi    Bound
	Partition string
}

func (r Range) String() string {
	return "[" + boundText(r.Lo) + "," + boundText(r.Hi) + ")"
}

func boundText(b Bound) string {
	if b.Inf {
		return ""
	}
	return b.Key.String()
}

// contains reports whether k is in r.
func (r Range) contains(k Key) bool {
	return (r.Lo.Inf || r.Lo.Key.Compare(k) <= 0) && (r.Hi.Inf || k.Compare(r.Hi.Key) < 0)
}

// RangeMap is one root table's ranges, sorted, contiguous, without overlap.
type RangeMap []Range

// ErrNoOwner is wrapped when a key lies outside every range of the plan.
var ErrNoOwner = errors.New("keyspace: key outside the plan")

// Owner returns the partition whose range holds k.
func (m RangeMap) Owner(k Key) (string, error) {
	i := sort.Search(len(m), func(i int) bool { return m[i].Hi.Inf || k.Compare(m[i].Hi.Key) < 0 })
	if i == len(m) || !m[i].contains(k) {
		return "", fmt.Errorf("%w: key %s is not in %s", ErrNoOwner, k, m.span())
	}
	return m[i].Partition, nil
}

// Overlapping returns the partitions owning some key of [lo, hi), in key
// order, each once.
func (m RangeMap) Overlapping(lo, hi Bound) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range m {
		if !hi.Inf && !r.Lo.Inf && r.Lo.Key.Compare(hi.Key) >= 0 {
			break
		}
		if !lo.Inf && !r.Hi.Inf && r.Hi.Key.Compare(lo.Key) <= 0 {
			continue
		}
		if !seen[r.Partition] {
			seen[r.Partition] = true
			out = append(out, r.Partition)
		}
	}
	return out
}

// span is the whole plan's extent, for messages.
func (m RangeMap) span() string {
	if len(m) == 0 {
		return "an empty plan"
	}
	return "[" + boundText(m[0].Lo) + "," + boundText(m[len(m)-1].Hi) + ")"
}

// ParsePlan validates spec against ks's tables and partitions: every root
// table has ranges and only root tables do, every partition is known, every
// bound has the root's key type, lo < hi, and the ranges of a root leave
// no gap and do not overlap. The error is one line.
func ParsePlan(spec PlanSpec, ks *Keyspace) (Plan, error) {
	plan := Plan{}
	for _, table := range slices.Sorted(maps.Keys(spec)) { // sorted: the same input, the same error
		parts := spec[table]
		t, ok := ks.tables[table]
		if !ok {
			return nil, invalidf("plan: table %s is not in keyspace %s", table, ks.Name)
		}
		if t.Kind != Sharded {
			return nil, invalidf("plan: table %s is %s; the plan places root (sharded) tables only", table, t.Kind)
		}
		var m RangeMap
		for _, part := range slices.Sorted(maps.Keys(parts)) {
			text := parts[part]
			if _, ok := ks.parts[part]; !ok {
				return nil, invalidf("plan: %s: unknown partition %s (keyspace %s has %s)", table, part, ks.Name, strings.Join(ks.partNames(), ", "))
			}
			rs, err := parseRanges(text, t.Type)
			if err != nil {
				return nil, invalidf("plan: %s: partition %s: %v", table, part, err)
			}
			for _, r := range rs {
				r.Partition = part
				m = append(m, r)
			}
		}
		if err := m.sortCheck(); err != nil {
			return nil, invalidf("plan: %s: %v", table, err)
		}
		plan[table] = m
	}
	for _, root := range ks.Roots() {
		if len(plan[root]) == 0 {
			return nil, invalidf("plan: sharded table %s has no ranges", root)
		}
	}
	return plan, nil
}

func (ks *Keyspace) partNames() []string {
	out := make([]string, len(ks.Partitions))
	for i, p := range ks.Partitions {
		out[i] = p.Name
	}
	return out
}

// sortCheck orders m by lower bound and refuses gaps and overlaps.
func (m RangeMap) sortCheck() error {
	sort.Slice(m, func(i, j int) bool { return lessLo(m[i].Lo, m[j].Lo) })
	for i := 1; i < len(m); i++ {
		a, b := m[i-1], m[i]
		if a.Hi.Inf || b.Lo.Inf {
			return fmt.Errorf("overlap: %s (%s) and %s (%s)", a, a.Partition, b, b.Partition)
		}
		switch c := a.Hi.Key.Compare(b.Lo.Key); {
		case c < 0:
			return fmt.Errorf("gap: keys [%s,%s) between %s (%s) and %s (%s) have no partition",
				a.Hi.Key, b.Lo.Key, a, a.Partition, b, b.Partition)
		case c > 0:
			return fmt.Errorf("overlap: %s (%s) and %s (%s)", a, a.Partition, b, b.Partition)
		}
	}
	return nil
}

func lessLo(a, b Bound) bool {
	if a.Inf || b.Inf {
		return a.Inf && !b.Inf
	}
	return a.Key.Compare(b.Key) < 0
}

// parseRanges reads "[lo,hi)" or several separated by commas.
func parseRanges(s string, t KeyType) ([]Range, error) {
	var out []Range
	rest := strings.TrimSpace(s)
	if rest == "" {
		return nil, fmt.Errorf("no ranges")
	}
	for rest != "" {
		if rest[0] != '[' {
			return nil, fmt.Errorf("range %q: want [lo,hi)", s)
		}
		lo, r, err := readBound(rest[1:], ',')
		if err != nil {
			return nil, fmt.Errorf("range %q: %v", s, err)
		}
		hi, r, err := readBound(r, ')')
		if err != nil {
			return nil, fmt.Errorf("range %q: %v", s, err)
		}
		rg := Range{}
		if rg.Lo, err = toBound(lo, t); err != nil {
			return nil, err
		}
		if rg.Hi, err = toBound(hi, t); err != nil {
			return nil, err
		}
		if !rg.Lo.Inf && !rg.Hi.Inf && rg.Lo.Key.Compare(rg.Hi.Key) >= 0 {
			return nil, fmt.Errorf("range %s is empty: lower bound not below upper", rg)
		}
		out = append(out, rg)
		rest = strings.TrimSpace(r)
		if rest != "" {
			if rest[0] != ',' {
				return nil, fmt.Errorf("range %q: want ',' between ranges", s)
			}
			rest = strings.TrimSpace(rest[1:])
		}
	}
	return out, nil
}

// token is a bound as written: quoted text, bare text, or empty.
type token struct {
	text   string
	quoted bool
}

// readBound reads a bound up to the terminator end.
func readBound(s string, end byte) (token, string, error) {
	s = strings.TrimLeft(s, " ")
	if strings.HasPrefix(s, "'") {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '\'' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			r := strings.TrimLeft(s[i+1:], " ")
			if r == "" || r[0] != end {
				return token{}, "", fmt.Errorf("want %q after a quoted bound", end)
			}
			return token{text: b.String(), quoted: true}, r[1:], nil
		}
		return token{}, "", fmt.Errorf("unterminated quote")
	}
	i := strings.IndexByte(s, end)
	if i < 0 {
		return token{}, "", fmt.Errorf("missing %q", end)
	}
	return token{text: strings.TrimSpace(s[:i])}, s[i+1:], nil
}

func toBound(tk token, t KeyType) (Bound, error) {
	if tk.text == "" && !tk.quoted {
		return Bound{Inf: true}, nil
	}
	if t == Int && tk.quoted {
		return Bound{}, fmt.Errorf("%w: bound '%s' is text; the key is an integer", ErrKeyType, tk.text)
	}
	k, err := ParseKey(t, tk.text)
	if err != nil {
		return Bound{}, fmt.Errorf("bound %q: %w", tk.text, err)
	}
	return Bound{Key: k}, nil
}

// Ranges returns the ranges partition owns in m, in key order.
func (m RangeMap) Ranges(partition string) []Range {
	var out []Range
	for _, r := range m {
		if r.Partition == partition {
			out = append(out, r)
		}
	}
	return out
}

// ParseRanges reads ranges as the plan writes them ("[1,4),[9,12)", text
// bounds quoted) with keys of type t.
func ParseRanges(t KeyType, s string) ([]Range, error) {
	rs, err := parseRanges(s, t)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return rs, nil
}

// Contains reports whether k is in r.
func (r Range) Contains(k Key) bool { return r.contains(k) }

// Overlaps reports whether r and [lo, hi) share a key.
func (r Range) Overlaps(lo, hi Bound) bool {
	if !hi.Inf && !r.Lo.Inf && r.Lo.Key.Compare(hi.Key) >= 0 {
		return false
	}
	return lo.Inf || r.Hi.Inf || lo.Key.Compare(r.Hi.Key) < 0
}

// Successor is the bound just above key k: [k, Successor(k)) holds k alone.
func Successor(k Key) Bound {
	if k.Type == Text {
		return Bound{Key: TextKey(k.S + "\x00")}
	}
	if k.I == 1<<63-1 {
		return Bound{Inf: true}
	}
	return Bound{Key: IntKey(k.I + 1)}
}
