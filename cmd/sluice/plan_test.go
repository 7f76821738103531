package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/plan"
)

// TestPlanCommands: a plan that is not well formed, or that names an
// unknown tenant or agent, moves a tenant to its own server or moves one
// tenant twice, is refused with exit 2 and one line, and nothing is
// recorded; a good one runs to the end. Two real agents on PostgreSQL 15, the first
// holding one running tenant.
func TestPlanCommands(t *testing.T) {
	dir := pgtest.TempDir(t)
	b := startCmdAgent(t, "x2", filepath.Join(dir, "x2"), "127.0.0.1:0", nil)
	a := startCmdAgent(t, "x1", filepath.Join(dir, "x1"), "127.0.0.1:0", map[string]string{"x2": b.URL()})
	url := a.URL()
	if code, _, errs := agentRunCLI(t, "tenant", "create", "--name", "acme", "--agent", url); code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, errs)
	}
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, file, body, want string }{
		{"unknown tenant", "a.json", `{"moves":[{"tenant":"nobody","to":"x1"}]}`, `move 1: unknown tenant "nobody"`},
		{"unknown agent", "b.yaml", "moves:\n  - {tenant: acme, to: x9}\n", `move 1: unknown agent "x9" (known: x1, x2)`},
		{"target is source", "c.json", `{"moves":[{"tenant":"acme","to":"x1"}]}`, "tenant acme: target x1 is its source"},
		{"tenant twice", "d.json", `{"moves":[{"tenant":"acme","to":"x2"},{"tenant":"1","to":"x2"}]}`, "tenant acme is in moves 1 and 2"},
		{"unknown field", "e.json", `{"moves":[{"tenant":"acme","to":"x1","speed":3}]}`, `unknown field "speed"`},
		{"not yaml", "f.yaml", "moves: [", "plan: yaml"},
		{"empty", "g.json", "", "empty plan"},
		{"unknown method", "h.json", `{"moves":[{"tenant":"acme","to":"x1"}],"method":"fast"}`, `unknown method "fast"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := agentRunCLI(t, "plan", "apply", file(tc.file, tc.body), "--agent", url)
			if code != 2 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
				t.Fatalf("exit %d, stderr %q; want 2 and one line with %q", code, errs, tc.want)
			}
		})
	}
	if code, out, errs := agentRunCLI(t, "plan", "show", "--json", "--agent", url); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("plan show after refusals: exit %d, %q %q; want no plan", code, out, errs)
	}
	if code, _, errs := agentRunCLI(t, "plan", "show", "nope", "--agent", url); code != 2 || !strings.Contains(errs, "no plan nope") {
		t.Fatalf("plan show nope: exit %d %q", code, errs)
	}
	if code, _, errs := agentRunCLI(t, "plan", "pause", "nope", "--agent", url); code != 2 || !strings.Contains(errs, "no plan nope") {
		t.Fatalf("plan pause nope: exit %d %q", code, errs)
	}

	// A good plan runs to the end: the tenant on x2, the plan done.
	code, out, errs := agentRunCLI(t, "plan", "apply", file("ok.yaml", "moves:\n  - {tenant: acme, to: x2}\nmethod: whole-store\n"), "--agent", url)
	t.Logf("plan apply:\n%s", out)
	if code != 0 || !strings.Contains(out, " done ") || !strings.Contains(out, "move 1  acme") {
		t.Fatalf("plan apply: exit %d\n%s\n%s", code, out, errs)
	}
	id := strings.Fields(strings.TrimPrefix(out, "plan "))[0]
	id = strings.TrimSuffix(id, ":")
	code, out, errs = agentRunCLI(t, "plan", "show", id, "--json", "--agent", url)
	var st struct {
		State string `json:"state"`
		Moves []struct {
			Status string `json:"status"`
			Moved  int64  `json:"moved_bytes"`
		} `json:"moves"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.State != "done" || len(st.Moves) != 1 || st.Moves[0].Status != "done" || st.Moves[0].Moved == 0 {
		t.Fatalf("plan show %s: exit %d %s %s", id, code, out, errs)
	}
	if code, _, errs := agentRunCLI(t, "plan", "abort", id, "--agent", url); code != 2 || !strings.Contains(errs, "is done: nothing to abort") {
		t.Fatalf("plan abort of a done plan: exit %d %q", code, errs)
	}
}

// TestPlanMoveLine: a key-range move's line names its keys and partitions
// besides the servers; a running one its reconfiguration's phase.
func TestPlanMoveLine(t *testing.T) {
	st := client.PlanStatus{Plan: plan.Plan{Moves: []plan.Move{
		{Tenant: "acme", TenantID: 3, From: "a", To: "b", Status: plan.Done, Bytes: 64 << 20, Moved: 64 << 20},
		{Keyspace: "shop", Table: "orders", Range: "[5000,8000)", Source: "p1", Dest: "p3", From: "a", To: "c", Status: plan.Running, Bytes: 8 << 20, Moved: 2 << 20},
	}}, MoveLive: map[int]client.PlanMoveLive{1: {Phase: "moving", Rate: 1 << 20}}}
	for i, want := range []string{
		"move 1  acme         a → b  done",
		"move 2  shop:orders[5000,8000) p1 → p3, a → c  running",
	} {
		if got := planMoveLine(st, i); !strings.Contains(got, want) {
			t.Errorf("move %d: %q, want it to contain %q", i+1, got, want)
		}
	}
	if got := planMoveLine(st, 1); !strings.Contains(got, "moving") {
		t.Errorf("running range move: %q, want its phase", got)
	}
}
