package workload

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
)

// routedPartitions starts two PostgreSQL clusters as partitions p1 and p2
// (tenants t1 and t2) and returns their DSNs and the proxy routes to them.
func routedPartitions(t *testing.T) ([]keyspace.Partition, map[string]string, []proxy.RouteConfig) {
	t.Helper()
	parts := []keyspace.Partition{{Name: "p1", Tenant: "t1"}, {Name: "p2", Tenant: "t2"}}
	dsns := map[string]string{}
	var routes []proxy.RouteConfig
	for _, p := range parts {
		c := pgtest.New(t, pgcluster.Options{Settings: map[string]string{"max_prepared_transactions": "20"}})
		dsns[p.Name] = c.ConnString("postgres")
		routes = append(routes, proxy.RouteConfig{Tenant: p.Tenant, Addr: c.Addr(), Database: "postgres"})
	}
	return parts, dsns, routes
}

// startRouter starts a proxy routing keyspace ks and returns a DSN to it.
func startRouter(t *testing.T, ks *keyspace.Keyspace, routes []proxy.RouteConfig) string {
	t.Helper()
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, InsecureNoAuth: true,
		Routes: routes, Keyspaces: []*keyspace.Keyspace{ks}, TxLog: filepath.Join(t.TempDir(), "txlog")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", p.Addr(), ks.Name)
}

// TestTPCCRouter runs TPC-C-lite through the keyspace router, remote
// warehouses included (two-phase commit across partitions): the ledger is
// exact, every row on its owner, money and stock consistent across
// partitions, and nothing left prepared.
func TestTPCCRouter(t *testing.T) {
	parts, dsns, routes := routedPartitions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scale := TPCCScale{Warehouses: 4, Customers: 100, Items: 200}
	ks, err := TPCCKeyspace("tpcc", parts, scale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTPCC(ctx, ks, dsns, scale, 1); err != nil {
		t.Fatal(err)
	}
	cfg := TPCCConfig{
		Arrivals: Arrivals{Rate: 60, MPL: 4, Duration: 3 * time.Second, Seed: 5},
		Reach:    Reach{Partitions: dsns, Router: startRouter(t, ks, routes)}, Keyspace: ks, Scale: scale,
		RemoteNewOrder: 0.3, RemotePayment: 0.3,
	}
	res, err := RunTPCC(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !res.Verdict.OK() {
		t.Fatalf("verdict %s: %v", res.Verdict, res.Verdict.Problems)
	}
	if res.Spanning == 0 || res.SpanningAcked == 0 || res.DistributedTPS <= 0 || res.Counts["new_order"] == 0 || res.Counts["payment"] == 0 || res.Skipped != 0 {
		t.Fatalf("summary %+v counts %v: want new orders, payments, transactions across partitions, none skipped", res.Summary, res.Counts)
	}
	if n := res.Errors; n > res.Transactions/20 {
		t.Errorf("%d errors of %d transactions: %v", n, res.Transactions, res.ErrorsByCode)
	}
	noPrepared(t, ctx, dsns)
}

// TestYCSBRouter runs YCSB through the router with two operations a
// transaction (some span partitions) and a moving hot set.
func TestYCSBRouter(t *testing.T) {
	parts, dsns, routes := routedPartitions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const records = 2000
	ks, err := YCSBKeyspace("ycsb", parts, records)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadYCSB(ctx, ks, dsns, records, 1); err != nil {
		t.Fatal(err)
	}
	cfg := YCSBConfig{
		Arrivals: Arrivals{Rate: 150, MPL: 4, Duration: 2 * time.Second, Seed: 7},
		Reach:    Reach{Partitions: dsns, Router: startRouter(t, ks, routes)}, Keyspace: ks, Records: records,
		OpsPerTx: 2, InsertFraction: 0.2, Distribution: HotSpot, HotMove: 500 * time.Millisecond,
	}
	res, err := RunYCSB(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !res.Verdict.OK() {
		t.Fatalf("verdict %s: %v", res.Verdict, res.Verdict.Problems)
	}
	if res.Transactions == 0 || res.Errors != 0 || res.Skipped != 0 || res.Spanning == 0 {
		t.Fatalf("summary %+v: want transactions, some across partitions, none skipped, no errors", res.Summary)
	}
	noPrepared(t, ctx, dsns)
}

func noPrepared(t *testing.T, ctx context.Context, dsns map[string]string) {
	t.Helper()
	for name, dsn := range dsns {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		c.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&n)
		c.Close(ctx)
		if n != 0 {
			t.Errorf("%s: %d prepared transactions left", name, n)
		}
	}
}
