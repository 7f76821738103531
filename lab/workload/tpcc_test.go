package workload

import (
	"context"
	"testing"
	"time"
)

// TestTPCCDirect loads TPC-C-lite (four warehouses) over two partitions,
// runs it in direct mode, and checks the ledger exact, every row on its
// owner and TPC-C's consistency conditions; then it loses an acknowledged
// order's line, moves a history row to the wrong partition and bumps a
// warehouse's ytd, and checks the verdict names each.
func TestTPCCDirect(t *testing.T) {
	parts, dsns := twoPartitions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scale := TPCCScale{Warehouses: 4, Customers: 100, Items: 200}
	ks, err := TPCCKeyspace("tpcc", parts, scale)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := LoadTPCC(ctx, ks, dsns, scale, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"warehouse": 4, "district": 40, "customer": 4000, "stock": 800, "item": 400}
	for table, n := range want {
		if ld.Rows[table] != n {
			t.Fatalf("loaded %v, want %v", ld.Rows, want)
		}
	}
	cfg := TPCCConfig{
		Arrivals: Arrivals{Rate: 60, MPL: 4, Duration: 2 * time.Second, Seed: 5},
		Reach:    Reach{Partitions: dsns}, Keyspace: ks, Scale: scale,
		RemoteNewOrder: 0.3, RemotePayment: 0.3,
	}
	d := &tpccDriver{}
	res, err := runTPCC(ctx, cfg, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !res.Verdict.OK() || res.Verdict.Unacknowledged != 0 {
		t.Fatalf("verdict %s: %v", res.Verdict, res.Verdict.Problems)
	}
	if res.Counts["new_order"] == 0 || res.Counts["payment"] == 0 || res.Errors != 0 || res.Skipped == 0 || res.Skipped != res.Spanning {
		t.Fatalf("summary %+v counts %v: want new orders, payments, skipped spanning ones, no errors", res.Summary, res.Counts)
	}

	// Break it three ways.
	var order okey
	for order = range d.ledger.orders {
		break
	}
	exec(t, ctx, dsns[d.owner[order[0]]], "DELETE FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 AND ol_number = 1", order[0], order[1], order[2])
	var hid int64
	var hw int
	for hid, hw = range d.ledger.history {
		break
	}
	owner := d.owner[hw]
	other := map[string]string{"p1": "p2", "p2": "p1"}[owner]
	exec(t, ctx, dsns[owner], "DELETE FROM history WHERE h_id = $1", hid)
	exec(t, ctx, dsns[other], "INSERT INTO history (h_w_id, h_id, h_d_id, h_c_w_id, h_c_d_id, h_c_id, h_amount, h_data) VALUES ($1, $2, 1, 1, 1, 1, 0, 'x')", hw, hid)
	exec(t, ctx, dsns[d.owner[1]], "UPDATE warehouse SET w_ytd = w_ytd + 1 WHERE w_id = 1")
	v, err := d.verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %v", v, v.Problems)
	if v.OK() || v.Lost != 1 || v.Misplaced != 1 || v.Inconsistent == 0 {
		t.Fatalf("after breaking: %s %v; want an order's line lost, a history row misplaced, inconsistent money and stock", v, v.Problems)
	}
}
