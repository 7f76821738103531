package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/plan"
)

// TestPlanKeyRanges: a plan posted to a2 moves two key ranges of keyspace
// bank (held by a1; p1 and p3 on a1, p2 on a2) — one between the agents,
// one between a1's own partitions — and a tenant from a1 to a2, under the
// integral controller, while a bank load runs through the proxy. a2, the
// plan's driver and p2's agent, stops abruptly during the first range
// move and starts again; the plan resumes and ends done, the
// reconfigurations ran paced by it, the ledger is exact, the keyspace
// check clean and no fence left. Bad key-range moves are refused with a
// one-line 400 first.
func TestPlanKeyRanges(t *testing.T) {
	r := newReshardRigOn(t, 2000, reshardSpread)
	drv := r.peerCfg
	drv.Proxy, drv.ProxyTokenFile = r.cfg.Proxy, r.cfg.ProxyTokenFile
	r.restartPeer(t, drv)
	ctx := ctxT(t)
	solo, err := r.a.c.CreateTenant(ctx, client.CreateTenant{ID: 10, Name: "solo", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ spec, want string }{
		{`{"moves": [{"keyspace": "bank", "range": "[1,2)", "to": "p1"}]}`, "are partition p1's already"},
		{`{"moves": [{"keyspace": "bank", "range": "[900,1100)", "to": "p3"}]}`, "lie in partitions p1, p2"},
		{`{"moves": [{"keyspace": "bank", "range": "[1,2)", "to": "p3"}, {"tenant": "r2", "to": "a1"}]}`, "a partition of keyspace bank"},
	} {
		s, err := plan.Parse([]byte(bad.spec))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.peer.c.ApplyPlan(ctx, s)
		if client.StatusOf(err) != 400 || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("plan %s: %v; want a one-line 400 with %q", bad.spec, err, bad.want)
		}
	}

	load := newBankLoad(r.cs)
	stop := background(func(ctx context.Context) { load.run(ctx, 4) })
	defer stop()
	load.waitAcked(t, 200)
	spec := plan.Spec{
		Moves: []plan.MoveSpec{
			{Keyspace: "bank", Table: "acct", Range: "[500,1000)", To: "p2"}, // a1 → a2
			{Keyspace: "bank", Range: "[2000,2500)", From: "p3", To: "p1"},   // a1 → a1
			{Tenant: "solo", To: "a2"},
		},
		ContractsMs: map[string]float64{"r1": 200, "r2": 200, "r3": 200, "solo": 200},
		MaxRate:     1 << 20,
	}
	st, err := r.peer.c.ApplyPlan(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := st.ID
	// Restart the driver once the first range move's reconfiguration runs.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st = waitPlan(t, r.peer.c, id)
		if m := st.Moves[0]; m.Status == plan.Running && m.Migration != "" {
			break
		}
		if st.State.Final() || time.Now().After(deadline) {
			t.Fatalf("the first range move never ran: %s", doneLine(st))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.restartPeer(t, drv)
	deadline = time.Now().Add(4 * time.Minute)
	for st = waitPlan(t, r.peer.c, id); !plan.Settled(st.Plan); st = waitPlan(t, r.peer.c, id) {
		if time.Now().After(deadline) {
			t.Fatalf("plan not done in time: %s", doneLine(st))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.State != plan.StateDone {
		t.Fatalf("plan ended %s", doneLine(st))
	}
	for _, m := range st.Moves {
		if m.IsRange() && (m.Migration == "" || m.Holder != "a1") {
			t.Errorf("range move %s: reconfiguration %q on %q, want one on a1", m.What(), m.Migration, m.Holder)
		}
	}
	rs, err := r.a.c.ReshardStatus(ctx, "bank", false)
	if err != nil || rs.ID != st.Moves[1].Migration || rs.Method != client.MethodPaced || rs.Phase != client.PhaseDone {
		t.Fatalf("the keyspace's last reconfiguration %+v (%v): want plan move 2's, method paced, done", rs, err)
	}
	n := load.count()
	load.waitAcked(t, n+200)
	stop()
	load.verify(t, r, keyspace.PlanSpec{"acct": {"p1": "[,500),[2000,2500)", "p2": "[500,2000)", "p3": "[2500,)"}})
	r.checkClean(t)
	r.fencesGone(t)
	if tn, err := r.peer.c.Tenant(ctx, solo.ID); err != nil || tn.State != "running" {
		t.Fatalf("tenant solo on a2: %+v %v", tn, err)
	}
	t.Logf("plan %s: %s in %.1fs", id, doneLine(st), st.Elapsed)
	for _, m := range st.Moves {
		if m.Error != "" {
			t.Logf("move %s: last rollback: %s", m.What(), m.Error)
		}
	}
}
