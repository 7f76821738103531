package reshard

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sluicedb/sluice/keyspace"
)

// Chunk is the unit of a pull: keys of root table Root in Ranges, with
// the rows of every table in Tables (Root first, then the tables
// co-partitioned with it), moving from partition From to partition To.
type Chunk struct {
	ID     int
	Root   string
	Type   keyspace.KeyType
	Tables []string
	Ranges []keyspace.Range // sorted, disjoint
	From   string
	To     string
	// Bytes is the estimated size of the chunk's rows (Stats); 0 unknown.
	Bytes int64
	// SubPlan orders asynchronous pulls: every chunk of sub-plan i is
	// pulled before any of sub-plan i+1.
	SubPlan int
	// Sub, when set, narrows the chunk to the rows of its one root key
	// whose tables' secondary column (keyspace.Table.Secondary) lies in
	// Sub (an int range); the first sub-chunk (Sub.Lo unbounded) also
	// carries the rows of the tables without one, the root's among them.
	// Group is the ID of that first sub-chunk: a key is at its owner when
	// every chunk of its group is Complete.
	Sub   *keyspace.Range
	Group int
}

// First reports whether c carries the rows of tables without a secondary
// column: a whole chunk, or a key's first sub-chunk.
func (c Chunk) First() bool { return c.Sub == nil || c.Sub.Lo.Inf }

// Contains reports whether key k of the chunk's root is in the chunk.
func (c Chunk) Contains(k keyspace.Key) bool {
	for _, r := range c.Ranges {
		if r.Contains(k) {
			return true
		}
	}
	return false
}

// Overlaps reports whether the chunk holds a key of [lo, hi).
func (c Chunk) Overlaps(lo, hi keyspace.Bound) bool {
	for _, r := range c.Ranges {
		if r.Overlaps(lo, hi) {
			return true
		}
	}
	return false
}

// RangesText is the chunk's ranges as a plan writes them.
func (c Chunk) RangesText() string {
	s := make([]string, len(c.Ranges))
	for i, r := range c.Ranges {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

func (c Chunk) String() string {
	sub := ""
	if c.Sub != nil {
		sub = " secondary " + c.Sub.String()
	}
	return fmt.Sprintf("chunk %d: %s %s%s %s→%s", c.ID, c.Root, c.RangesText(), sub, c.From, c.To)
}

type chunkJSON struct {
	ID      int              `json:"id"`
	Root    string           `json:"root"`
	Type    keyspace.KeyType `json:"type"`
	Tables  []string         `json:"tables"`
	Ranges  string           `json:"ranges"`
	From    string           `json:"from"`
	To      string           `json:"to"`
	Bytes   int64            `json:"bytes"`
	SubPlan int              `json:"sub_plan"`
	Sub     string           `json:"secondary,omitempty"`
	Group   int              `json:"group,omitempty"`
}

// MarshalJSON writes the ranges in the plan's text form.
func (c Chunk) MarshalJSON() ([]byte, error) {
	j := chunkJSON{c.ID, c.Root, c.Type, c.Tables, c.RangesText(), c.From, c.To, c.Bytes, c.SubPlan, "", c.Group}
	if c.Sub != nil {
		j.Sub = c.Sub.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Chunk) UnmarshalJSON(b []byte) error {
	var j chunkJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	rs, err := keyspace.ParseRanges(j.Type, j.Ranges)
	if err != nil {
		return fmt.Errorf("chunk %d: %w", j.ID, err)
	}
	*c = Chunk{ID: j.ID, Root: j.Root, Type: j.Type, Tables: j.Tables, Ranges: rs, From: j.From, To: j.To, Bytes: j.Bytes, SubPlan: j.SubPlan, Group: j.Group}
	if j.Sub != "" {
		sub, err := keyspace.ParseRanges(keyspace.Int, j.Sub)
		if err != nil || len(sub) != 1 {
			return fmt.Errorf("chunk %d: secondary %q: want one int range", j.ID, j.Sub)
		}
		c.Sub = &sub[0]
	}
	return nil
}

// Stats describe a root's rows on one source partition as PostgreSQL's
// planner sees them (pg_class.reltuples, pg_stats.histogram_bounds): the
// histogram's buckets hold about the same number of rows each.
type Stats struct {
	Rows  float64 // rows of the root table; < 0 unknown (never analysed)
	Bytes int64   // on-disk size of the root and its co-partitioned tables
	// Bounds are the root key's histogram bounds, sorted; empty when
	// PostgreSQL has none (few distinct keys, or no ANALYZE yet).
	Bounds []keyspace.Key
	// Secondary are the values of the secondary column of the largest
	// co-partitioned table that has one (pg_stats' histogram bounds and
	// most common values), sorted, distinct; empty when none.
	Secondary []int64
}

// Options shape the chunks (the Squall paper §4).
type Options struct {
	// ChunkBytes is the target size of a chunk (Squall: 8 MB).
	ChunkBytes int64
	// Split cuts a move larger than ChunkBytes at histogram bounds, and
	// one root key's rows larger than ChunkBytes at values of the
	// secondary column (Stats.Secondary) into sub-chunks.
	Split bool
	// Merge packs moves of one root, source and destination of at most
	// ChunkBytes/2 into one chunk of at most ChunkBytes.
	Merge bool
	// PieceBytes, when above 0 and below ChunkBytes, is the size of the
	// chunks actually cut and tracked: a transaction's reactive pull then
	// moves a piece around its key, not a whole chunk (Squall pulls the
	// keys a transaction needs), while asynchronous pulls still move about
	// ChunkBytes between two pauses of a fixed pace. Integer keys are cut
	// inside histogram buckets (rows assumed even within a bucket).
	PieceBytes int64
	// SubPlans is the least number of sub-plans (Squall: 5 to 20); the
	// plan needs as many as the most destinations any source sends to.
	// 0 or 1: sub-plans only where a source has several destinations.
	SubPlans int
}

// DefaultChunkBytes is Squall's chunk size.
const DefaultChunkBytes = 8 << 20

// Plan cuts moves (keyspace.Diff of keyspace ks's plans) into chunks, numbered from 0 in order of
// sub-plan, then move. stats gives the source's Stats of a root (a nil
// func, or zero Stats, leaves every move one chunk of unknown size).
func Plan(ks *keyspace.Keyspace, moves []keyspace.Move, stats func(root, part string) Stats, o Options) []Chunk {
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.PieceBytes > 0 && o.PieceBytes < o.ChunkBytes {
		o.ChunkBytes = o.PieceBytes // what is cut and tracked
	}
	var pieces []Chunk
	for _, m := range moves {
		var st Stats
		if stats != nil {
			st = stats(m.Root, m.From)
		}
		r := m.Range
		r.Partition = ""
		t, _ := ks.Table(m.Root)
		base := Chunk{Root: m.Root, Type: t.Type, Tables: m.Tables, From: m.From, To: m.To}
		for _, p := range split(r, st, o) {
			c := base
			c.Ranges, c.Bytes = []keyspace.Range{p.r}, p.bytes
			pieces = append(pieces, splitSecondary(c, st, o)...)
		}
	}
	if o.Merge {
		pieces = merge(pieces, o.ChunkBytes)
	}
	assignSubPlans(pieces, o.SubPlans)
	slices.SortStableFunc(pieces, func(a, b Chunk) int { return a.SubPlan - b.SubPlan })
	first := map[string]int{} // a split key's first sub-chunk's ID
	for i := range pieces {
		pieces[i].ID = i
		if c := pieces[i]; c.Sub != nil {
			k := c.Root + "\x00" + c.RangesText()
			if c.Sub.Lo.Inf {
				first[k] = i
			}
			pieces[i].Group = first[k]
		}
	}
	return pieces
}

// splitSecondary cuts chunk c, when it holds one root key whose rows
// exceed o.ChunkBytes, into sub-chunks over the secondary column's values
// (Stats.Secondary), in order: the first carries the rows without one.
func splitSecondary(c Chunk, st Stats, o Options) []Chunk {
	if !o.Split || c.Bytes <= o.ChunkBytes || len(st.Secondary) < 2 || !oneKey(c.Ranges[0]) {
		return []Chunk{c}
	}
	n := int(min(int64(len(st.Secondary)), (c.Bytes+o.ChunkBytes-1)/o.ChunkBytes))
	lo := keyspace.Bound{Inf: true}
	var out []Chunk
	for j := 1; j <= n; j++ {
		hi := keyspace.Bound{Inf: true}
		if j < n {
			hi = keyspace.Bound{Key: keyspace.IntKey(st.Secondary[len(st.Secondary)*j/n])}
		}
		s := c
		s.Sub, s.Bytes = &keyspace.Range{Lo: lo, Hi: hi}, c.Bytes/int64(n)
		out = append(out, s)
		lo = hi
	}
	return out
}

// oneKey reports whether r holds exactly one key.
func oneKey(r keyspace.Range) bool {
	if r.Lo.Inf || r.Hi.Inf {
		return false
	}
	return keyspace.Successor(r.Lo.Key) == r.Hi
}

type piece struct {
	r     keyspace.Range
	bytes int64
}

// split estimates r's size from st and, with o.Split, cuts it at histogram
// bounds into pieces of about o.ChunkBytes each.
func split(r keyspace.Range, st Stats, o Options) []piece {
	n := len(st.Bounds) - 1 // buckets
	if n < 1 || st.Bytes <= 0 {
		return []piece{{r: r, bytes: st.Bytes}} // unknown: at most the whole table
	}
	perBucket := float64(st.Bytes) / float64(n)
	bounds := st.Bounds
	if o.Split && perBucket > float64(o.ChunkBytes) && bounds[0].Type == keyspace.Int {
		m := int(math.Ceil(perBucket / float64(o.ChunkBytes)))
		bounds = refine(bounds, m)
		perBucket = float64(st.Bytes) / float64(len(bounds)-1)
	}
	var inside []keyspace.Key // bounds strictly inside r
	for _, b := range bounds {
		if r.Contains(b) && (r.Lo.Inf || b.Compare(r.Lo.Key) > 0) {
			inside = append(inside, b)
		}
	}
	total := int64(perBucket * float64(len(inside)))
	if !r.Lo.Inf || !r.Hi.Inf { // the buckets cut by r's ends count half
		total += int64(perBucket / 2)
	}
	total = min(max(total, 1), st.Bytes)
	if !o.Split || total <= o.ChunkBytes || len(inside) == 0 {
		return []piece{{r: r, bytes: total}}
	}
	per := max(1, int(float64(o.ChunkBytes)/perBucket)) // buckets per chunk
	var out []piece
	lo := r.Lo
	for i := per - 1; i < len(inside); i += per {
		hi := keyspace.Bound{Key: inside[i]}
		out = append(out, piece{r: keyspace.Range{Lo: lo, Hi: hi}, bytes: int64(perBucket * float64(per))})
		lo = hi
	}
	rest := total - int64(perBucket*float64(per*len(out)))
	out = append(out, piece{r: keyspace.Range{Lo: lo, Hi: r.Hi}, bytes: max(rest, 1)})
	return out
}

// refine cuts every bucket between integer bounds into m buckets of equal
// width (fewer where the bucket holds fewer keys), so a range can be cut
// finer than PostgreSQL's histogram; keys are assumed spread evenly within
// a bucket. Every bucket is cut into the same number of parts, so the new
// buckets stay of about equal size.
func refine(bounds []keyspace.Key, m int) []keyspace.Key {
	out := []keyspace.Key{bounds[0]}
	for i := 1; i < len(bounds); i++ {
		lo, hi := bounds[i-1].I, bounds[i].I
		w := float64(hi) - float64(lo)
		for j := 1; j < m; j++ {
			v := lo + int64(w*float64(j)/float64(m))
			if v > out[len(out)-1].I && v < hi {
				out = append(out, keyspace.IntKey(v))
			}
		}
		out = append(out, bounds[i])
	}
	return out
}

// merge packs consecutive pieces of the same root, source and destination,
// each at most half a chunk, into chunks of at most chunkBytes.
func merge(ps []Chunk, chunkBytes int64) []Chunk {
	var out []Chunk
	open := map[string]int{} // root/from/to → index in out of the chunk being filled
	for _, p := range ps {
		key := p.Root + "\x00" + p.From + "\x00" + p.To
		small := p.Bytes > 0 && p.Bytes <= chunkBytes/2 && p.Sub == nil
		if i, ok := open[key]; ok && small && out[i].Bytes+p.Bytes <= chunkBytes {
			out[i].Ranges = append(out[i].Ranges, p.Ranges...)
			out[i].Bytes += p.Bytes
			continue
		}
		out = append(out, p)
		if small {
			open[key] = len(out) - 1
		} else {
			delete(open, key)
		}
	}
	return out
}

// assignSubPlans numbers the chunks' sub-plans: a source's j-th destination
// (in order of first appearance) is sent to in round j, so no source sends
// to two destinations in one round; with more sub-plans wanted than rounds,
// each round's chunks of every pair are spread over as many consecutive
// sub-plans. Empty sub-plans are closed up.
func assignSubPlans(cs []Chunk, want int) {
	dests := map[string][]string{}
	rounds := 1
	for _, c := range cs {
		if !slices.Contains(dests[c.From], c.To) {
			dests[c.From] = append(dests[c.From], c.To)
			rounds = max(rounds, len(dests[c.From]))
		}
	}
	per := 1
	if want > rounds {
		per = (want + rounds - 1) / rounds
	}
	byPair := map[string][]int{}
	var pairs []string
	for i, c := range cs {
		k := c.From + "\x00" + c.To
		if byPair[k] == nil {
			pairs = append(pairs, k)
		}
		byPair[k] = append(byPair[k], i)
	}
	for _, k := range pairs {
		idx := byPair[k]
		c0 := cs[idx[0]]
		round := slices.Index(dests[c0.From], c0.To)
		for j, i := range idx {
			cs[i].SubPlan = round*per + j*per/len(idx)
		}
	}
	used := map[int]bool{}
	for _, c := range cs {
		used[c.SubPlan] = true
	}
	order := make([]int, 0, len(used))
	for s := range used {
		order = append(order, s)
	}
	slices.Sort(order)
	for i := range cs {
		cs[i].SubPlan = slices.Index(order, cs[i].SubPlan)
	}
}
