package pgreshard

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// TestStats: before ANALYZE the rows are unknown and there are no bounds;
// after it, reltuples counts the rows, the bounds are sorted keys spanning
// the data, and Bytes covers the root and its co-partitioned table.
func TestStats(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	conn := connect(t, ctx, dsn("p1"))
	loadAccts(t, conn, 0, 2000, 2)

	st, err := Stats(ctx, conn, ks, "acct")
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != -1 || st.Bounds != nil || st.Bytes <= 0 {
		t.Fatalf("Stats before ANALYZE: %+v, want Rows -1, no bounds, some bytes", st)
	}
	mustExec(t, conn, "ANALYZE")
	st, err = Stats(ctx, conn, ks, "acct")
	if err != nil {
		t.Fatal(err)
	}
	acctStats := st
	size := count(t, conn, "SELECT pg_total_relation_size('acct') + pg_total_relation_size('acct_log')")
	if st.Rows != 2000 || st.Bytes != size {
		t.Fatalf("Stats: rows %v bytes %d, want 2000 and %d", st.Rows, st.Bytes, size)
	}
	if len(st.Bounds) < 10 || st.Bounds[0].I < 0 || st.Bounds[len(st.Bounds)-1].I > 1999 ||
		!slices.IsSortedFunc(st.Bounds, keyspace.Key.Compare) || st.Bounds[0].Type != keyspace.Int {
		t.Fatalf("bounds %v: want int keys in [0,1999], sorted", st.Bounds)
	}

	for i := range 500 {
		mustExec(t, conn, "INSERT INTO users VALUES ($1, 1)", strings.Repeat("é'", i%3)+string(rune('A'+i%50))+strings.Repeat("z", i))
	}
	mustExec(t, conn, "ANALYZE users")
	st, err = Stats(ctx, conn, ks, "users")
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 500 || len(st.Bounds) < 10 || st.Bounds[0].Type != keyspace.Text ||
		!slices.IsSortedFunc(st.Bounds, keyspace.Key.Compare) {
		t.Fatalf("users: %v rows, bounds %v: want 500 rows, sorted text bounds", st.Rows, st.Bounds)
	}
	for i := 1; i < len(st.Bounds); i++ {
		if st.Bounds[i-1].Compare(st.Bounds[i]) == 0 {
			t.Fatalf("bound %s twice", st.Bounds[i])
		}
	}
	chunks := reshard.Plan(ks, []keyspace.Move{{Root: "acct", Tables: []string{"acct", "acct_log"}, From: "p1", To: "p2",
		Range: intRange(ip(0), ip(1000))}}, func(string, string) reshard.Stats { return acctStats }, reshard.Options{ChunkBytes: size / 8, Split: true})
	// Stats feed the planner: half the table cut into chunks of an eighth.
	if len(chunks) < 3 || len(chunks) > 5 {
		t.Fatalf("half the table at chunks of an eighth: %d chunks, want about 4", len(chunks))
	}
	if _, err := Stats(ctx, conn, ks, "acct_log"); err == nil {
		t.Fatal("Stats of a co-partitioned table: no error")
	}
}
