package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

// A partition's tenant handed over (hold, switch, release) while router
// sessions write to it: transactions wait at the hold and continue on the
// new server; sessions keep their prepared statements; the keyspace's
// latency shows per partition.
func TestKeyspacePartitionHandover(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	// p1's new home: a third server with the same schema (a migration would
	// have copied the rows; here p1 starts empty on both).
	c3 := pgtest.New(t, pgcluster.Options{Password: testPassword, AuthMethod: "scram-sha-256",
		Settings: map[string]string{"max_prepared_transactions": "10"}})
	conn3, err := pgx.Connect(ctx, c3.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn3.Exec(ctx, ksSchema); err != nil {
		t.Fatal(err)
	}
	conn3.Close(ctx)

	var wg sync.WaitGroup
	var moved atomic.Bool
	var afterMove atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn := r.connect(t, pgx.QueryExecModeCacheStatement)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := w*20 + i%20 // p1's keys
				was := moved.Load()
				if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, 'x') ON CONFLICT (k) DO UPDATE SET v = kv.v || 'y'", k); err != nil {
					errs <- err
					return
				}
				if was {
					afterMove.Add(1)
				}
			}
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	api := r.p.APIClient()
	if _, err := api.Hold(ctx, "t1", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := api.Switch(ctx, "t1", c3.Addr()); err != nil {
		t.Fatal(err)
	}
	moved.Store(true)
	if err := api.Release(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for afterMove.Load() < 40 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("writer: %v", err)
	}
	if afterMove.Load() < 40 {
		t.Fatalf("%d transactions after the switch", afterMove.Load())
	}
	if n := len(rowsOn(t, c3)); n == 0 {
		t.Error("nothing written on p1's new server after the switch")
	}
	ws, err := api.Latency(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, w := range ws {
		if w.Tenant == "kv" && w.Server == "p1" && w.Count > 0 {
			seen = true
		}
	}
	if !seen {
		t.Errorf("no latency of keyspace kv on partition p1: %+v", ws)
	}
}

// A hold of a partition's tenant names the router sessions' idle server
// sessions on it (idle_backends), as it does the tenant's own, so that the
// read-only fence spares them: here the fence is played by terminating
// every other client backend, and the handover rolls back (release without
// a switch). The router session goes on on its server session as if
// nothing happened; unnamed, it would have found it terminated.
func TestKeyspaceHoldNamesIdleRouterBackends(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	conn := r.connect(t, pgx.QueryExecModeCacheStatement)
	for _, k := range []int{1, 100} {
		if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, 'x')", k); err != nil {
			t.Fatal(err)
		}
	}
	api := r.p.APIClient()
	res, err := api.Hold(ctx, "t1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.InFlight != 0 || len(res.IdleBackends) != 1 {
		t.Errorf("hold: %+v, want the router session's idle backend on p1", res)
	}
	if bs, err := api.Backends(ctx, "t1"); err != nil || len(bs.PIDs) != 1 {
		t.Errorf("backends of t1: %+v, %v; want the router session's", bs, err)
	}
	spare := append([]int{}, res.IdleBackends...) // not nil: pid <> ALL(NULL) matches nothing
	su, err := pgx.Connect(ctx, r.c1.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	if _, err := su.Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> ALL($1::int[])`, spare); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{2, 101} {
		if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, 'after')", k); err != nil {
			t.Fatalf("after the rolled-back handover: insert %d: %v", k, err)
		}
	}
}
