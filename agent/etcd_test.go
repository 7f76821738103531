package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/etcdtest"
	"github.com/sluicedb/sluice/migration"
)

// TestEtcdDriverLosesLease: two agents share an etcd catalog. The source's
// driver loses its lease mid-copy (every lease in the cluster is revoked,
// as etcd does when an agent is cut off past its TTL): it stops driving,
// the tenant serving on the source; the source agent takes the lock again
// (it can reach etcd), resumes the migration from its record and commits
// it — and, restarted after that, finds nothing to resume — with every acknowledged write on the target exactly once.
// The placement, shared by both agents, ends on the target. A call to the
// target made with the replaced driver's view (its attempt) is refused there.
func TestEtcdDriverLosesLease(t *testing.T) {
	cl := etcdtest.Start(t, 1)
	spec := "etcd://" + cl.Endpoints[0] + "/fleet"
	c1, c2 := agentPair(t)
	c1.Catalog, c2.Catalog = spec, spec
	var a1log lockedBuffer
	c1.Logger = slog.New(slog.NewTextHandler(&a1log, nil))
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if tn2, err := a2.c.CreateTenant(ctx, client.CreateTenant{Name: "other"}); err != nil || tn2.ID == tn.ID {
		t.Fatalf("a2's tenant %+v, %v: want an ID of its own (IDs are shared)", tn2, err)
	}
	srcCS := a1.ConnString(tn.Port, "")
	dstCS := a2.ConnString(a2.TenantPort(tn.ID), "")
	loadData(t, srcCS, 20)
	w := &ledgerWriter{conns: []string{srcCS, dstCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	defer func() { wstop(); <-wdone }()

	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2", Rate: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	waitMigration(t, a1.c, m.ID, time.Minute, func(v client.Migration) bool { return v.Progress.Bytes > 0 })

	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	leases, err := cli.Leases(ctx)
	if err != nil || len(leases.Leases) == 0 {
		t.Fatalf("leases: %+v, %v; want the driver's", leases, err)
	}
	for _, l := range leases.Leases {
		if _, err := cli.Revoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The driver stops (its next write is refused, or its session reports
	// the loss), and the agent, which can reach etcd again, takes the lock
	// anew and resumes from the catalog's record (retakeMigration) — no
	// restart needed.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(a1log.String(), "lost the tenant's driver lock") {
		if time.Now().After(deadline) {
			t.Fatalf("the source's log does not say its driver lost the lock a minute after its lease was revoked:\n%s", a1log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ts, _ := a1.c.Tenant(ctx, tn.ID); !ts.Alive {
		t.Fatalf("source tenant after the loss = %+v; want it serving", ts)
	}
	done := waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	time.Sleep(500 * time.Millisecond) // writes land on the target
	wstop()
	<-wdone
	if done.Outcome != "committed" {
		t.Fatalf("resumed migration ended %+v (error %q)", done, done.Error)
	}
	if !strings.Contains(a1log.String(), "resuming migration") {
		t.Fatalf("the source's log does not say it took the migration up again:\n%s", a1log.String())
	}
	acked, errs, byHome := w.stats()
	t.Logf("writer: %d acknowledged (%v per home), %d errors", acked, byHome, errs)
	w.verify(t, dstCS)
	ps, err := a1.Catalog().Placements()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		if p.Tenant == tn.ID {
			found = true
			if p.Agent != "a2" || p.State != "running" {
				t.Fatalf("placement of tenant %d = %+v; want running on a2", tn.ID, p)
			}
		}
	}
	if !found {
		t.Fatalf("no placement of tenant %d in %+v", tn.ID, ps)
	}
	var rec migration.Record
	if err := json.Unmarshal(done.Record, &rec); err != nil || rec.Attempt < 2 {
		t.Fatalf("the resumed migration's record: attempt %d (%v), want at least 2", rec.Attempt, err)
	}
	rec.Attempt--
	err = a2.c.Do(ctx, http.MethodPost, targetPrefix+"/"+m.ID+"/position", recordRequest{Record: rec}, nil)
	if client.StatusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("a target call of attempt %d after attempt %d: %v, want 409 (a replaced driver)", rec.Attempt, rec.Attempt+1, err)
	}
	if !strings.HasPrefix(a1.Catalog().Path(), "etcd://") {
		t.Fatalf("catalog %s: want the etcd one", a1.Catalog().Path())
	}
}
