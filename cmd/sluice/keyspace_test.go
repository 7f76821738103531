package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
)

// TestKeyspaceCommands drives `sluice keyspace` against a real agent with
// two tenants: bad input exits 2 with one line and creates nothing; check
// exits 1 once a row sits on the wrong partition; an unreachable agent is 1.
func TestKeyspaceCommands(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := pgtest.TempDir(t)
	a := startCmdAgent(t, "k1", filepath.Join(dir, "k1"), "127.0.0.1:0", nil)
	url := a.URL()
	for _, name := range []string{"wa", "wb"} {
		if code, _, errs := agentRunCLI(t, "tenant", "create", "--name", name, "--agent", url); code != 0 {
			t.Fatalf("tenant create: exit %d: %s", code, errs)
		}
	}
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	spec := file("ks.json", `{"name": "tpcc",
		"partitions": [{"name": "p1", "tenant": "wa"}, {"name": "p2", "tenant": "wb"}],
		"tables": [{"name": "warehouse", "kind": "sharded", "column": "w_id", "type": "int"}, {"name": "item", "kind": "reference"}],
		"plan": {"warehouse": {"p1": "[1,4)", "p2": "[4,)"}}}`)
	schema := file("schema.sql", "CREATE TABLE warehouse (w_id int PRIMARY KEY); CREATE TABLE item (i_id int PRIMARY KEY);")
	gap := file("gap.json", `{"warehouse": {"p1": "[1,3)", "p2": "[4,)"}}`)
	next := file("next.json", `{"warehouse": {"p1": "[1,5)", "p2": "[5,)"}}`)
	textBounds := file("text.json", `{"warehouse": {"p1": "[,'m')", "p2": "['m',)"}}`)
	badTenant := file("bad.json", strings.Replace(string(must(os.ReadFile(spec))), `"wb"`, `"nosuch"`, 1))

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stdout for exit 0, else the one line on stderr
	}{
		{"no spec", []string{"keyspace", "create", "--agent", url}, 2, "--spec is required"},
		{"spec missing", []string{"keyspace", "create", "--spec", spec + ".nope", "--agent", url}, 2, "no such file"},
		{"no schema, no tables", []string{"keyspace", "create", "--spec", spec, "--agent", url}, 2, "has no schema and table warehouse, item does not exist"},
		{"plan with a gap", []string{"keyspace", "create", "--spec", spec, "--schema", schema, "--plan", gap, "--agent", url}, 2, "gap: keys [3,4)"},
		{"unknown tenant", []string{"keyspace", "create", "--spec", badTenant, "--schema", schema, "--agent", url}, 2, "no tenant nosuch on agent k1"},
		{"nothing created", []string{"keyspace", "list", "--agent", url}, 0, "NAME"},
		{"create", []string{"keyspace", "create", "--spec", spec, "--schema", schema, "--agent", url}, 0, "keyspace tpcc created: 2 partitions"},
		{"create again", []string{"keyspace", "create", "--spec", spec, "--schema", schema, "--agent", url}, 2, "keyspace tpcc already exists"},
		{"plan", []string{"keyspace", "plan", "tpcc", "--agent", url}, 0, "warehouse  [4,)   p2"},
		{"plan --check gap", []string{"keyspace", "plan", "tpcc", "--check", gap, "--agent", url}, 2, "gap: keys [3,4)"},
		{"plan --check good", []string{"keyspace", "plan", "tpcc", "--check", next, "--agent", url}, 0, "(epoch 1, would be 2); not applied"},
		{"plan --check moves", []string{"keyspace", "plan", "tpcc", "--check", next, "--agent", url}, 0, "warehouse  [4,5)  p2    p1  warehouse"},
		{"plan unchanged", []string{"keyspace", "plan", "tpcc", "--agent", url}, 0, "warehouse  [1,4)  p1"},
		{"show", []string{"keyspace", "show", "tpcc", "--agent", url}, 0, "total"},
		{"check", []string{"keyspace", "check", "tpcc", "--agent", url}, 0, "every row on its partition"},
		{"list", []string{"keyspace", "list", "--agent", url}, 0, "tpcc  1      p1,p2"},
		{"reconfigure without a plan", []string{"keyspace", "reconfigure", "tpcc", "--agent", url}, 2, "--plan FILE is required"},
		{"reconfigure bad setpoint", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--setpoint", "fast", "--agent", url}, 2, `--setpoint "fast"`},
		{"reconfigure bad chunk", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--chunk", "huge", "--agent", url}, 2, `--chunk "huge"`},
		{"reconfigure gap", []string{"keyspace", "reconfigure", "tpcc", "--plan", gap, "--method", "squall", "--agent", url}, 2, "gap: keys [3,4)"},
		{"reconfigure key type", []string{"keyspace", "reconfigure", "tpcc", "--plan", textBounds, "--method", "squall", "--agent", url}, 2, "wrong key type: bound 'm' is text"},
		{"reconfigure no setpoint", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--agent", url}, 2, "give a setpoint"},
		{"reconfigure unknown method", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--method", "fast", "--agent", url}, 2, `unknown method "fast"`},
		{"reconfigure paced without a rate", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--method", "paced", "--agent", url}, 2, "method paced needs --rate"},
		{"reconfigure rate without paced", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--method", "squall", "--rate", "5MB/s", "--agent", url}, 2, "--rate is method paced's pace"},
		{"reconfigure paced too slow", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--method", "paced", "--rate", "1KB/s", "--agent", url}, 2, `--rate "1KB/s"`},
		{"nothing reconfigured", []string{"keyspace", "reconfigure", "tpcc", "--status", "--agent", url}, 2, "has had no reconfiguration"},
		{"reconfigure", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--method", "squall", "--agent", url}, 0, ": done (method squall, epoch 1 → 2)"},
		{"reconfigure status", []string{"keyspace", "reconfigure", "tpcc", "--status", "--agent", url}, 0, "chunks 1/1 arrived, 1 cleaned"},
		{"reconfigure same plan", []string{"keyspace", "reconfigure", "tpcc", "--plan", next, "--method", "squall", "--agent", url}, 2, "moves no key"},
		{"check after reconfigure", []string{"keyspace", "check", "tpcc", "--agent", url}, 0, "every row on its partition"},
		{"unknown keyspace", []string{"keyspace", "show", "nosuch", "--agent", url}, 2, `unknown keyspace "nosuch"`},
		{"agent unreachable", []string{"keyspace", "list", "--agent", closedAddr(t)}, 1, "connection refused"},
	} {
		code, out, errs := agentRunCLI(t, tc.args...)
		got := out
		if tc.code != 0 {
			got = errs
		}
		if code != tc.code || !strings.Contains(got, tc.want) || (tc.code != 0 && strings.Count(strings.TrimSpace(errs), "\n") != 0) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.name, code, out, errs, tc.code, tc.want)
		}
	}

	// Warehouse 9 belongs to p2; written on p1 it is misplaced.
	tn, err := a.Tenant(1)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), a.ConnString(tn.Port, ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), "INSERT INTO warehouse VALUES (1), (9)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	code, out, errs := agentRunCLI(t, "keyspace", "check", "tpcc", "--json", "--agent", url)
	var ck struct {
		OK        bool  `json:"ok"`
		Misplaced int64 `json:"misplaced"`
	}
	if err := json.Unmarshal([]byte(out), &ck); err != nil || code != 1 || ck.OK || ck.Misplaced != 1 || !strings.Contains(errs, "1 rows misplaced") {
		t.Errorf("check of a misplaced row: exit %d, %+v (%v), stderr %q; want exit 1, ok false, 1 misplaced", code, ck, err, errs)
	}
	if code, out, _ := agentRunCLI(t, "keyspace", "delete", "tpcc", "--agent", url); code != 0 || !strings.Contains(out, "the tables and rows on its 2 partitions stay") {
		t.Errorf("delete: exit %d %q", code, out)
	}
	if code, _, errs := agentRunCLI(t, "keyspace", "check", "tpcc", "--agent", url); code != 2 || !strings.Contains(errs, "unknown keyspace") {
		t.Errorf("check after delete: exit %d %q", code, errs)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
