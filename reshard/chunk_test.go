package reshard

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

// testKeyspace is a keyspace with an int root "k" (child "c") over parts
// partitions p0…, keys [0, n), ranges cut at random.
func testKeyspace(t testing.TB, rng *rand.Rand, parts, n int) *keyspace.Keyspace {
	t.Helper()
	ks := &keyspace.Keyspace{Name: "ks", Tables: []keyspace.Table{
		{Name: "k", Kind: keyspace.Sharded, Column: "id", Type: keyspace.Int},
		{Name: "c", Kind: keyspace.CoPartitioned, Column: "kid", Type: keyspace.Int, Root: "k"},
	}}
	for i := range parts {
		ks.Partitions = append(ks.Partitions, keyspace.Partition{Name: fmt.Sprint("p", i), Tenant: fmt.Sprint("t", i)})
	}
	ks.Plan = randomPlan(rng, parts, n)
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	return ks
}

// randomPlan cuts [0, n) into ranges given to random partitions.
func randomPlan(rng *rand.Rand, parts, n int) keyspace.PlanSpec {
	spec := map[string]string{}
	lo := 0
	for lo < n {
		hi := min(n, lo+1+rng.IntN(n/3+1))
		p := fmt.Sprint("p", rng.IntN(parts))
		if spec[p] != "" {
			spec[p] += ","
		}
		spec[p] += fmt.Sprintf("[%d,%d)", lo, hi)
		lo = hi
	}
	// Adjacent ranges of one partition are fine for the plan's parser only
	// if they do not touch: merge them by re-reading through the keyspace.
	return keyspace.PlanSpec{"k": spec}
}

// uniformStats spreads a partition's rows evenly over [0, n) in 1 MiB buckets.
func uniformStats(n int) func(root, part string) Stats {
	return func(root, part string) Stats {
		st := Stats{Rows: float64(n), Bytes: int64(n) << 20}
		for k := 0; k <= n; k++ {
			st.Bounds = append(st.Bounds, keyspace.IntKey(int64(k)))
		}
		return st
	}
}

func TestPlanTilesMovesAndOrdersSubPlans(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ks := testKeyspace(t, rng, 2+rng.IntN(4), 60)
		next, err := ks.WithPlan(randomPlan(rng, len(ks.Partitions), 60))
		if err != nil {
			t.Fatal(err)
		}
		moves, err := keyspace.Diff(ks, next)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{ChunkBytes: 4 << 20, Split: true, Merge: true, SubPlans: 1 + rng.IntN(8)}
		chunks := Plan(ks, moves, uniformStats(60), o)
		// Every key of every move is in exactly one chunk, with the move's ends.
		for k := int64(0); k < 60; k++ {
			key := keyspace.IntKey(k)
			var in []Chunk
			for _, c := range chunks {
				if c.Contains(key) {
					in = append(in, c)
				}
			}
			var mv []keyspace.Move
			for _, m := range moves {
				if m.Range.Contains(key) {
					mv = append(mv, m)
				}
			}
			if len(in) != len(mv) || (len(mv) == 1 && (in[0].From != mv[0].From || in[0].To != mv[0].To)) {
				t.Fatalf("seed %d: key %d: in chunks %v, moves %v", seed, k, in, mv)
			}
		}
		sends := map[string]string{} // sub-plan/source → destination
		for i, c := range chunks {
			if c.ID != i {
				t.Fatalf("seed %d: chunk %d has id %d", seed, i, c.ID)
			}
			if i > 0 && c.SubPlan < chunks[i-1].SubPlan {
				t.Fatalf("seed %d: chunks not in sub-plan order", seed)
			}
			key := fmt.Sprint(c.SubPlan, "/", c.From)
			if d, ok := sends[key]; ok && d != c.To {
				t.Fatalf("seed %d: sub-plan %d: %s sends to %s and %s", seed, c.SubPlan, c.From, d, c.To)
			}
			sends[key] = c.To
			if len(c.Ranges) > 1 && c.Bytes > o.ChunkBytes {
				t.Fatalf("seed %d: merged chunk %v of %d bytes above the chunk size", seed, c, c.Bytes)
			}
		}
	}
}

func TestPlanSplitsAtHistogramBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	ks := testKeyspace(t, rng, 2, 100)
	from, _ := ks.WithPlan(keyspace.PlanSpec{"k": {"p0": "[0,100)", "p1": "[100,)"}})
	to, _ := from.WithPlan(keyspace.PlanSpec{"k": {"p0": "[0,20)", "p1": "[20,)"}})
	moves, _ := keyspace.Diff(from, to)
	got := Plan(from, moves, uniformStats(100), Options{ChunkBytes: 8 << 20, Split: true})
	if len(got) != 10 || got[0].RangesText() != "[20,28)" || got[1].RangesText() != "[28,36)" || got[9].RangesText() != "[92,100)" {
		t.Fatalf("split of [20,100) into 8 MiB chunks over 1 MiB buckets: %v", got)
	}
	unsplit := Plan(from, moves, uniformStats(100), Options{ChunkBytes: 8 << 20})
	if len(unsplit) != 1 || unsplit[0].Bytes < 70<<20 {
		t.Fatalf("without splitting: %v (bytes %d)", unsplit, unsplit[0].Bytes)
	}
	tiny := Plan(from, moves, nil, Options{Split: true, Merge: true, SubPlans: 5})
	if len(tiny) != 1 || tiny[0].Bytes != 0 {
		t.Fatalf("without statistics: %v", tiny)
	}
}

func TestPlanSplitsOneKeyOnItsSecondaryColumn(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	ks := testKeyspace(t, rng, 2, 20)
	from, _ := ks.WithPlan(keyspace.PlanSpec{"k": {"p0": "[0,10)", "p1": "[10,)"}})
	to, _ := from.WithPlan(keyspace.PlanSpec{"k": {"p0": "[0,9)", "p1": "[9,)"}})
	moves, _ := keyspace.Diff(from, to)
	st := uniformStats(10)("k", "p0")
	st.Bytes = 60 << 20 // 6 MiB per key: key 9's range [9,10) is estimated at half a bucket, 3 MiB
	for v := int64(1); v <= 10; v++ {
		st.Secondary = append(st.Secondary, v)
	}
	stats := func(string, string) Stats { return st }
	got := Plan(from, moves, stats, Options{ChunkBytes: 1 << 20, Split: true, Merge: true})
	var subs []string
	for _, c := range got {
		if c.Sub == nil || c.Group != got[0].ID || c.RangesText() != "[9,10)" {
			t.Fatalf("chunk %v: want a sub-chunk of key 9 in group %d", c, got[0].ID)
		}
		subs = append(subs, c.Sub.String())
	}
	if fmt.Sprint(subs) != "[[,4) [4,7) [7,)]" || !got[0].First() || got[1].First() {
		t.Fatalf("sub-chunks %v", subs)
	}
	if again := Plan(from, moves, stats, Options{ChunkBytes: 1 << 20}); len(again) != 1 || again[0].Sub != nil {
		t.Fatalf("without splitting: %v", again)
	}

	tr, err := NewTracker(got, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{1, 2} {
		tr.Begin(id)
		tr.Done(id)
	}
	if id, ok := tr.NextClean(); ok {
		t.Fatalf("cleaning chunk %d while the key's first sub-chunk has not arrived", id)
	}
	if ids := tr.Moving("k", keyspace.Bound{Key: keyspace.IntKey(9)}, keyspace.Successor(keyspace.IntKey(9))); fmt.Sprint(ids) != "[0]" {
		t.Fatalf("moving chunks of key 9: %v", ids)
	}
	tr.Begin(0)
	tr.Done(0)
	var order []int
	for {
		id, ok := tr.NextClean()
		if !ok {
			break
		}
		tr.Clean(id)
		order = append(order, id)
	}
	if fmt.Sprint(order) != "[1 2 0]" || !tr.Finished() {
		t.Fatalf("clean order %v: want the first sub-chunk last", order)
	}
	b, err := json.Marshal(got[1])
	var back Chunk
	if err == nil {
		err = json.Unmarshal(b, &back)
	}
	if err != nil || back.Sub == nil || back.Sub.String() != "[4,7)" || back.Group != got[1].Group {
		t.Fatalf("JSON round trip of %v: %s → %v, %v", got[1], b, back, err)
	}
}

func TestPlanCutsPiecesInsideBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	ks := testKeyspace(t, rng, 2, 20)
	from, _ := ks.WithPlan(keyspace.PlanSpec{"k": {"p0": "[0,100000)", "p1": "[100000,)"}})
	to, _ := from.WithPlan(keyspace.PlanSpec{"k": {"p0": "[0,20000),[30000,100000)", "p1": "[20000,30000),[100000,)"}})
	moves, _ := keyspace.Diff(from, to)
	st := Stats{Rows: 100000, Bytes: 100 << 20} // 100 buckets of 1000 keys, 1 MiB each
	for k := int64(0); k <= 100000; k += 1000 {
		st.Bounds = append(st.Bounds, keyspace.IntKey(k))
	}
	got := Plan(from, moves, func(string, string) Stats { return st }, Options{ChunkBytes: 8 << 20, PieceBytes: 512 << 10, Split: true})
	if len(got) < 19 || len(got) > 21 {
		t.Fatalf("[20000,30000) of ~10 MiB in 512 KiB pieces: %d pieces: %v", len(got), got)
	}
	for _, c := range got {
		if c.Bytes > 600<<10 {
			t.Fatalf("piece %v of %d bytes, above the piece size", c, c.Bytes)
		}
	}
	if got[0].RangesText() != "[20000,20500)" {
		t.Fatalf("first piece %v: want it cut at the bucket's middle", got[0])
	}
}
