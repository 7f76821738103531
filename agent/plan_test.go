package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/plan"
)

// TestPlanSurvivesDriverKill runs a plan of six moves across three agents
// (one move per server at a time: with three servers every two moves share
// one, so they run one after another) under a steady write workload on
// every tenant, kills -9 the driving agent — itself a source and target of
// moves — mid-plan, restarts it, and checks that the plan resumes and
// finishes with every tenant on its target and every acknowledged write
// there exactly once.
func TestPlanSurvivesDriverKill(t *testing.T) {
	names := []string{"p1", "p2", "p3"}
	bases := make([]int, len(names))
	ps := procGroup(t, names, func(i int, c *Config) {
		c.Tenant.BasePort = freeBase(t, 8)
		bases[i] = c.Tenant.BasePort
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// Tenants 1..6: two on each agent; each moves to the next agent (and
	// the one after), so every server is a source twice and a target twice.
	home := map[int64]int{1: 0, 2: 0, 3: 1, 4: 1, 5: 2, 6: 2}
	dest := map[int64]int{1: 1, 2: 2, 3: 2, 4: 0, 5: 0, 6: 1}
	var spec plan.Spec
	writers := map[int64]*ledgerWriter{}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{}, 6)
	defer func() {
		wstop()
		for range writers {
			<-wdone
		}
	}()
	for id := int64(1); id <= 6; id++ {
		a := ps[home[id]]
		tn, err := a.c.CreateTenant(ctx, client.CreateTenant{ID: id, Name: fmt.Sprint("t", id), Users: testUsers})
		if err != nil {
			t.Fatal(err)
		}
		loadData(t, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", tn.Dir, tn.Port), 4)
		w := &ledgerWriter{conns: []string{appConnString(bases[home[id]] + int(id)), appConnString(bases[dest[id]] + int(id))}, pause: 5 * time.Millisecond}
		writers[id] = w
		go func() { w.run(wctx); wdone <- struct{}{} }()
		spec.Moves = append(spec.Moves, plan.MoveSpec{Tenant: tn.Name, To: names[dest[id]]})
	}
	spec.Method, spec.MaxRate = plan.MethodSubStore, 12<<20

	// Bad plans are refused whole, naming the problem.
	bad := spec
	bad.Moves = append([]plan.MoveSpec{}, spec.Moves...)
	bad.Moves[5].To = "nowhere"
	if _, err := ps[0].c.ApplyPlan(ctx, bad); client.StatusOf(err) != 400 || !strings.Contains(err.Error(), `unknown agent "nowhere"`) {
		t.Fatalf("plan with an unknown agent: %v, want 400 naming it", err)
	}
	if ps, _ := ps[0].c.Plans(ctx); len(ps) != 0 {
		t.Fatalf("a refused plan was recorded: %+v", ps)
	}

	st, err := ps[0].c.ApplyPlan(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan %s: order %v", st.ID, st.Order)
	// Kill the driver once two moves are done and a move to or from the
	// driver's own server is copying (its migration breaks or resumes).
	for {
		st = waitPlan(t, ps[0].c, st.ID)
		t2 := plan.Sum(st.Plan)
		if st.State.Final() {
			t.Fatalf("plan ended before the kill: %s %+v", st.State, st.Moves)
		}
		if m, l, ok := runningLive(st); t2.Done >= 2 && ok && l.Phase == "snapshot" && (m.From == names[0] || m.To == names[0]) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("killing the driver: %s", doneLine(st))
	ps[0].kill9()
	time.Sleep(time.Second)
	ps[0].start()

	deadline := time.Now().Add(6 * time.Minute)
	for !st.State.Final() {
		if time.Now().After(deadline) {
			t.Fatalf("plan did not end: %s", doneLine(st))
		}
		time.Sleep(time.Second)
		st = waitPlan(t, ps[0].c, st.ID)
	}
	b, _ := json.MarshalIndent(st.Moves, "", " ")
	t.Logf("plan %s %s after %.0fs: %s", st.ID, st.State, st.Elapsed, b)
	if st.State != plan.StateDone {
		t.Fatalf("plan %s, want done", st.State)
	}
	if log, _ := os.ReadFile(ps[0].log); !strings.Contains(string(log), "plan: resumed") {
		t.Fatalf("the restarted driver did not log resuming the plan")
	}
	time.Sleep(300 * time.Millisecond)
	wstop()
	for range writers {
		<-wdone
	}
	writers2 := writers
	writers = nil
	for id := int64(1); id <= 6; id++ {
		tn, err := ps[dest[id]].c.Tenant(ctx, id)
		if err != nil || tn.State != "running" || !tn.Alive {
			t.Fatalf("tenant %d on %s after the plan: %+v (%v)", id, names[dest[id]], tn, err)
		}
		acked, errs, byHome := writers2[id].stats()
		t.Logf("tenant %d: %d writes acknowledged %v, %d errors", id, acked, byHome, errs)
		writers2[id].verify(t, appConnString(bases[dest[id]]+int(id)))
	}
}

// waitPlan reads plan id, retrying while the driver restarts.
func waitPlan(t *testing.T, c *client.Client, id string) client.PlanStatus {
	t.Helper()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Plan(ctx, id)
		cancel()
		if err == nil {
			return st
		}
		if i > 300 {
			t.Fatalf("plan %s: %v", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func runningLive(st client.PlanStatus) (plan.Move, client.PlanMoveLive, bool) {
	for i, m := range st.Moves {
		if m.Status == plan.Running {
			l, ok := st.MoveLive[i]
			return m, l, ok
		}
	}
	return plan.Move{}, client.PlanMoveLive{}, false
}

func doneLine(st client.PlanStatus) string {
	var parts []string
	for _, m := range st.Moves {
		parts = append(parts, fmt.Sprintf("%s:%s(%d,%d tries)", m.What(), m.Status, m.Moved>>20, m.Attempts))
	}
	return string(st.State) + " " + strings.Join(parts, " ")
}

// TestPlanPauseResumeAbort: a paused plan holds its copying move at
// planPausedRate and starts nothing; resumed, the move gets its share back;
// aborted, the running move rolls back (the tenant serves on its source),
// the pending one never starts, and the plan ends aborted. Two in-process
// agents on PostgreSQL 15.
func TestPlanPauseResumeAbort(t *testing.T) {
	c1, c2 := agentPair(t)
	a1, _ := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	for id := int64(1); id <= 2; id++ {
		tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{ID: id, Name: fmt.Sprint("t", id)})
		if err != nil {
			t.Fatal(err)
		}
		loadData(t, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", tn.Dir, tn.Port), 8)
	}
	// 1 MB/s: the first move copies for about half a minute.
	st, err := a1.c.ApplyPlan(ctx, plan.Spec{Moves: []plan.MoveSpec{{Tenant: "t1", To: "a2"}, {Tenant: "t2", To: "a2"}},
		Method: plan.MethodSubStore, MaxRate: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	running := func(st client.PlanStatus) (int, plan.Move) {
		for i, m := range st.Moves {
			if m.Status == plan.Running && m.Migration != "" {
				return i, m
			}
		}
		return -1, plan.Move{}
	}
	limitOf := func(m plan.Move, want float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mig, err := a1.c.Migration(ctx, m.Migration)
			if err == nil && mig.Progress.Limit == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("move %s: limit %v (%v), want %v", m.Tenant, mig.Progress.Limit, err, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var mv plan.Move
	for i := -1; i < 0; i, mv = running(st) {
		time.Sleep(200 * time.Millisecond)
		st = waitPlan(t, a1.c, st.ID)
	}
	limitOf(mv, 1<<20)
	if st, err = a1.c.PlanOp(ctx, st.ID, "pause"); err != nil || st.State != plan.StatePaused {
		t.Fatalf("pause: %v, state %s", err, st.State)
	}
	limitOf(mv, planPausedRate)
	if st, err = a1.c.PlanOp(ctx, st.ID, "resume"); err != nil || st.State != plan.StateRunning {
		t.Fatalf("resume: %v, state %s", err, st.State)
	}
	limitOf(mv, 1<<20)
	if st, err = a1.c.PlanOp(ctx, st.ID, "abort"); err != nil || st.State != plan.StateAborted {
		t.Fatalf("abort: %v, state %s", err, st.State)
	}
	m := waitMigration(t, a1.c, mv.Migration, time.Minute, nil)
	if m.Outcome != "aborted" {
		t.Fatalf("the running move's migration: %s, want aborted", m.Outcome)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = waitPlan(t, a1.c, st.ID)
		if st.Moves[0].Status == plan.Failed || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.Moves[0].Status != plan.Failed || st.Moves[1].Status != plan.Pending || st.Moves[1].Migration != "" {
		t.Fatalf("after abort: moves %+v, want the first failed, the second never started", st.Moves)
	}
	for id := int64(1); id <= 2; id++ {
		if tn, err := a1.c.Tenant(ctx, id); err != nil || tn.State != "running" {
			t.Fatalf("tenant %d after abort: %+v %v, want running on a1", id, tn, err)
		}
	}
	if _, err := a1.c.PlanOp(ctx, st.ID, "resume"); client.StatusOf(err) != 409 {
		t.Fatalf("resume of an aborted plan: %v, want 409", err)
	}
	// The operator's page lists the plan with the API's figures.
	ov, err := a1.c.Overview(ctx)
	if err != nil || len(ov.Plans) != 1 || ov.Plans[0].ID != st.ID || ov.Plans[0].State != plan.StateAborted || len(ov.Plans[0].Moves) != 2 {
		t.Fatalf("overview's plans: %+v %v, want the aborted plan %s with its 2 moves", ov.Plans, err, st.ID)
	}
}

// TestPlanIdleFleet: under the integral, a plan whose store has no client
// (the proxy routes it, no session is open and no transaction ends) counts
// it as full slack and copies at its top speed within a few steps, rather
// than holding at its floor for want of a latency (which would take this
// move minutes at 1 % of 8 MB/s).
func TestPlanIdleFleet(t *testing.T) {
	c1, c2 := agentPair(t)
	px := catalogProxy(t, &c1, c2)
	defer px.Close()
	a1, _ := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{ID: 1, Name: "idle", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	loadData(t, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", tn.Dir, tn.Port), 8)
	const top = 8 << 20
	st, err := a1.c.ApplyPlan(ctx, plan.Spec{Moves: []plan.MoveSpec{{Tenant: "idle", To: "a2"}}, Method: plan.MethodIntegral, MaxRate: top})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for st = waitPlan(t, a1.c, st.ID); !st.State.Final(); st = waitPlan(t, a1.c, st.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("the plan on an idle store has not ended after 3 min: %s", doneLine(st))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.State != plan.StateDone {
		t.Fatalf("plan %s, want done", doneLine(st))
	}
	pts, err := a1.c.PlanSeries(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	peak := 0.0
	for _, p := range pts {
		peak = max(peak, p.Rate)
	}
	if peak < top/2 {
		t.Fatalf("the plan's rate peaked at %.0f B/s on an idle store, want at least half its top %d: %+v", peak, top, pts)
	}
}
