package workload

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/pgcluster"
)

// twoPartitions starts two PostgreSQL 15 clusters, one partition each.
func twoPartitions(t *testing.T) ([]keyspace.Partition, map[string]string) {
	t.Helper()
	parts := []keyspace.Partition{{Name: "p1", Tenant: "t1"}, {Name: "p2", Tenant: "t2"}}
	dsns := map[string]string{}
	for _, p := range parts {
		c := pgtest.New(t, pgcluster.Options{Settings: map[string]string{"max_prepared_transactions": "10"}})
		dsns[p.Name] = c.ConnString("postgres")
	}
	return parts, dsns
}

func exec(t *testing.T, ctx context.Context, dsn, sql string, args ...any) int64 {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	tag, err := c.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// TestYCSBDirect loads YCSB over two partitions, runs it in direct mode
// (two operations a transaction, inserts, a hot set that moves), and checks
// the ledger exact with every row on its owner; then it loses one
// acknowledged ledger row, copies another to the wrong partition and
// rolls an updated field back, and checks the verdict names all three.
func TestYCSBDirect(t *testing.T) {
	parts, dsns := twoPartitions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const records = 2000
	ks, err := YCSBKeyspace("ycsb", parts, records)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := LoadYCSB(ctx, ks, dsns, records, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ld.Rows[Table] != records {
		t.Fatalf("loaded %v, want %d usertable rows", ld.Rows, records)
	}
	cfg := YCSBConfig{
		Arrivals: Arrivals{Rate: 150, MPL: 4, Duration: 2 * time.Second, Seed: 7},
		Reach:    Reach{Partitions: dsns}, Keyspace: ks, Records: records,
		OpsPerTx: 2, InsertFraction: 0.2, Distribution: HotSpot, HotMove: 500 * time.Millisecond,
	}
	d := &ycsbDriver{}
	res, err := runYCSB(ctx, cfg, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !res.Verdict.OK() || res.Verdict.Unacknowledged != 0 {
		t.Fatalf("verdict %s: %v", res.Verdict, res.Verdict.Problems)
	}
	if res.Transactions == 0 || res.Errors != 0 || res.Skipped == 0 || res.Skipped != res.Spanning || res.Counts["inserts"] == 0 || res.Counts["updates"] == 0 {
		t.Fatalf("summary %+v counts %v: want transactions, inserts, updates, skipped spanning ones, no errors", res.Summary, res.Counts)
	}
	for _, p := range res.Verdict.Placement {
		if p.Misplaced != 0 || p.Rows == 0 {
			t.Fatalf("placement %+v", p)
		}
	}

	// Break it three ways.
	var lostID, movedID int64
	var movedKey int64 = -1
	for id, key := range d.ledger.rows {
		if lostID == 0 {
			lostID = id
		} else if movedID == 0 {
			movedID, movedKey = id, key
		}
	}
	lostOwner, _ := ks.Owner(YCSBLedgerTable, keyspace.IntKey(d.ledger.rows[lostID]))
	exec(t, ctx, dsns[lostOwner], "DELETE FROM ycsb_ledger WHERE id = $1", lostID)
	movedOwner, _ := ks.Owner(YCSBLedgerTable, keyspace.IntKey(movedKey))
	other := map[string]string{"p1": "p2", "p2": "p1"}[movedOwner]
	exec(t, ctx, dsns[movedOwner], "DELETE FROM ycsb_ledger WHERE id = $1", movedID)
	exec(t, ctx, dsns[other], "INSERT INTO ycsb_ledger VALUES ($1, $2)", movedKey, movedID)
	var c cell
	for c = range d.ledger.cells {
		if d.ledger.cells[c].maxBegin >= 0 {
			break
		}
	}
	cOwner, _ := ks.Owner(Table, keyspace.IntKey(c.key))
	if n := exec(t, ctx, dsns[cOwner], "UPDATE usertable SET field"+string(rune('0'+c.field))+" = repeat('0', 100) WHERE ycsb_key = $1", c.key); n != 1 {
		t.Fatalf("rolled back %d rows", n)
	}
	v, err := d.verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || v.Lost != 2 || v.Misplaced != 1 || v.Duplicated != 0 {
		t.Fatalf("after breaking: %s %v; want 2 lost (a ledger row, a field), 1 misplaced", v, v.Problems)
	}
	var off int64
	for _, p := range v.Placement {
		off += p.Misplaced
	}
	if off != 1 {
		t.Fatalf("placement: %d rows off their owner, want 1: %+v", off, v.Placement)
	}
}
