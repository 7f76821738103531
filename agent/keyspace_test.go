package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
)

// tpccSchema is a TPC-C-like keyspace's schema: warehouse sharded by w_id,
// district following it, item copied everywhere.
const tpccSchema = `
CREATE TABLE warehouse (w_id int PRIMARY KEY, w_name text);
CREATE TABLE district (d_w_id int, d_id int, d_name text, PRIMARY KEY (d_w_id, d_id));
CREATE TABLE item (i_id int PRIMARY KEY, i_name text);`

// tpccSpec is the keyspace's JSON with plan and partitions changed by edit.
func tpccSpec(t *testing.T, edit func(ks map[string]any)) []byte {
	t.Helper()
	ks := map[string]any{
		"name": "tpcc",
		"partitions": []map[string]any{
			{"name": "p1", "tenant": "wh-a"},
			{"name": "p2", "tenant": "wh-b", "agent": "a2"},
		},
		"tables": []map[string]any{
			{"name": "warehouse", "kind": "sharded", "column": "w_id", "type": "int"},
			{"name": "district", "kind": "copartitioned", "column": "d_w_id", "root": "warehouse"},
			{"name": "item", "kind": "reference"},
		},
		"schema": tpccSchema,
		"plan":   map[string]any{"warehouse": map[string]string{"p1": "[1,4)", "p2": "[4,7)"}},
	}
	if edit != nil {
		edit(ks)
	}
	b, err := json.Marshal(ks)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postKeyspace POSTs a raw keyspace body (client.CreateKeyspace takes a
// validated one; these tests send bad ones too).
func postKeyspace(ctx context.Context, c *client.Client, body []byte) error {
	return c.Do(ctx, "POST", "/v1/keyspaces", json.RawMessage(body), nil)
}

// sqlOn runs statements on the tenant on port as its owner (testUsers[0]).
func sqlOn(t *testing.T, port int, stmts ...string) {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, appConnString(port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// untouched fails unless the tenant on port has none of the keyspace's
// tables and no prepared transaction (other than the tables in allowed).
func untouched(t *testing.T, what string, port int, allowed ...string) {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, appConnString(port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tables []string
	var prepared int
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(relname::text), '{}') FROM pg_class
		WHERE relname IN ('warehouse', 'district', 'item') AND relkind = 'r' AND NOT relname = ANY($1)`, allowed).Scan(&tables)
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) > 0 || prepared > 0 {
		t.Errorf("%s: tenant on port %d has tables %v and %d prepared transactions; want none", what, port, tables, prepared)
	}
}

// TestKeyspaceLifecycle: a keyspace over two agents (p1 on a1, p2 on a2).
// Every bad request is a one-line 4xx that changes nothing — no record, no
// table on any partition, nothing in pg_prepared_xacts — including a schema
// that fails on the second partition after the first has prepared. A good
// one applies the schema everywhere; sizes and check then see the rows, a
// misplaced row and a differing reference table.
func TestKeyspaceLifecycle(t *testing.T) {
	c1, c2 := agentPair(t)
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	mk := func(ta *testAgent, req client.CreateTenant) client.Tenant {
		req.Users = testUsers
		tn, err := ta.c.CreateTenant(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	pa, pb := mk(a1, client.CreateTenant{ID: 1, Name: "wh-a"}), mk(a2, client.CreateTenant{ID: 2, Name: "wh-b"})
	mk(a1, client.CreateTenant{ID: 3, Name: "wh-stopped"})
	if _, err := a1.c.StopTenant(ctx, 3); err != nil {
		t.Fatal(err)
	}
	mk(a2, client.CreateTenant{ID: 4, Name: "wh-no2pc", Settings: map[string]string{"max_prepared_transactions": "0"}})
	sqlOn(t, pb.Port, "CREATE TABLE item (i_id int)") // makes the schema fail on p2 only

	plan := func(p1, p2 string) func(map[string]any) {
		return func(ks map[string]any) {
			ks["plan"] = map[string]any{"warehouse": map[string]string{"p1": p1, "p2": p2}}
		}
	}
	part2 := func(key, value string) func(map[string]any) {
		return func(ks map[string]any) { ks["partitions"].([]map[string]any)[1][key] = value }
	}
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		code int
		want string
	}{
		{"gap", plan("[1,3)", "[4,7)"), 400, "gap: keys [3,4) between [1,3) (p1) and [4,7) (p2) have no partition"},
		{"overlap", plan("[1,5)", "[4,7)"), 400, "overlap: [1,5) (p1) and [4,7) (p2)"},
		{"unknown partition", func(ks map[string]any) {
			ks["plan"] = map[string]any{"warehouse": map[string]string{"p1": "[1,4)", "p3": "[4,7)"}}
		}, 400, "unknown partition p3"},
		{"wrong key type", plan("['a','m')", "['m',)"), 400, "bound 'a' is text; the key is an integer"},
		{"unknown field", func(ks map[string]any) { ks["shards"] = 2 }, 400, `unknown field "shards"`},
		{"unknown peer", part2("agent", "a9"), 400, `partition p2: agent "a9" is not a configured peer of agent a1 (peers: a2)`},
		{"unknown tenant", part2("tenant", "nosuch"), 400, "no tenant nosuch on agent a2"},
		{"stopped tenant", func(ks map[string]any) { part2("tenant", "wh-stopped")(ks); part2("agent", "")(ks) }, 409, "tenant wh-stopped is stopped, not running"},
		{"no database", part2("database", "nosuchdb"), 400, "database nosuchdb does not exist in tenant wh-b"},
		{"prepared transactions off", part2("tenant", "wh-no2pc"), 409, "tenant wh-no2pc has max_prepared_transactions = 0"},
		{"schema syntax", func(ks map[string]any) { ks["schema"] = "CREAT TABLE warehouse (w_id int)" }, 400, `schema: syntax error at or near "CREAT"`},
		{"schema commits", func(ks map[string]any) { ks["schema"] = tpccSchema + " COMMIT;" }, 400, "transaction control (COMMIT) is not allowed"},
		{"schema fails on p2", nil, 400, `partition p2 (tenant wh-b on agent a2): schema: ERROR: relation "item" already exists (SQLSTATE 42P07)`},
	} {
		err := postKeyspace(ctx, a1.c, tpccSpec(t, tc.edit))
		if client.StatusOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %d %v; want %d, one line containing %q", tc.name, client.StatusOf(err), err, tc.code, tc.want)
		}
	}
	if kss, err := a1.c.Keyspaces(ctx); err != nil || len(kss) != 0 {
		t.Fatalf("keyspaces after the refusals: %v, %v; want none", kss, err)
	}
	untouched(t, "p1 after the refusals", pa.Port)
	untouched(t, "p2 after the refusals", pb.Port, "item")
	sqlOn(t, pb.Port, "DROP TABLE item")

	ks, err := a1.c.CreateKeyspace(ctx, mustDecode(t, tpccSpec(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if ks.Epoch != 1 || len(ks.Partitions) != 2 {
		t.Fatalf("created %+v", ks)
	}
	if err := postKeyspace(ctx, a1.c, tpccSpec(t, nil)); client.StatusOf(err) != 409 {
		t.Fatalf("second create: %v, want 409", err)
	}
	if _, err := a1.c.Keyspace(ctx, "nosuch"); client.StatusOf(err) != 404 {
		t.Fatalf("unknown keyspace: %v, want 404", err)
	}
	// The schema ran as the database's owner: the tenant's user writes.
	sqlOn(t, pa.Port, "INSERT INTO warehouse VALUES (1, 'a'), (2, 'b'), (3, 'c')", "INSERT INTO district VALUES (1, 1, 'x'), (3, 1, 'y')",
		"INSERT INTO item SELECT g, 'item ' || g FROM generate_series(1, 10) g")
	sqlOn(t, pb.Port, "INSERT INTO warehouse VALUES (4, 'd'), (6, 'f')", "INSERT INTO district VALUES (4, 1, 'x'), (6, 2, 'z')",
		"INSERT INTO item SELECT g, 'item ' || g FROM generate_series(1, 10) g")

	sz, err := a1.c.KeyspaceSizes(ctx, "tpcc")
	if err != nil {
		t.Fatal(err)
	}
	if len(sz.Partitions) != 2 || sz.Partitions[0].Agent != "a1" || sz.Partitions[1].Agent != "a2" || sz.Rows != 3+2+10+2+2+10 || sz.Bytes <= 0 {
		t.Fatalf("sizes %+v", sz)
	}
	if w := sz.Partitions[1].Tables[0]; w.Table != "warehouse" || w.Rows != 2 || w.Bytes <= 0 || sz.Partitions[1].Error != "" {
		t.Fatalf("p2's warehouse: %+v (%s)", w, sz.Partitions[1].Error)
	}

	ck, err := a1.c.CheckKeyspace(ctx, "tpcc")
	if err != nil || !ck.OK || ck.Misplaced != 0 || len(ck.Reference) != 1 || !ck.Reference[0].Equal {
		t.Fatalf("check of a well-placed keyspace: %+v, %v", ck, err)
	}
	if tc := ck.Partitions[1].Tables[1]; tc.Table != "district" || tc.Ranges != "[4,7)" || tc.Rows != 2 {
		t.Fatalf("p2's district: %+v", tc)
	}
	// Rows written behind the plan's back: warehouse 5 on p1 (p2 owns it),
	// district 9 on p2 (nobody does), and a reference row changed on p2.
	sqlOn(t, pa.Port, "INSERT INTO warehouse VALUES (5, 'stray')")
	sqlOn(t, pb.Port, "INSERT INTO district VALUES (9, 1, 'nowhere')", "UPDATE item SET i_name = 'changed' WHERE i_id = 7")
	ck, err = a1.c.CheckKeyspace(ctx, "tpcc")
	if err != nil {
		t.Fatal(err)
	}
	if ck.OK || ck.Misplaced != 2 || ck.Partitions[0].Tables[0].Misplaced != 1 || ck.Partitions[1].Tables[1].Misplaced != 1 {
		t.Fatalf("check after stray rows: %+v", ck)
	}
	if r := ck.Reference[0]; r.Equal || len(r.Differs) != 1 || r.Differs[0] != "p2: 10 rows" {
		t.Fatalf("reference check after a changed row: %+v", r)
	}

	// A proposed plan is checked, never applied.
	pc, err := a1.c.CheckPlan(ctx, "tpcc", keyspace.PlanSpec{"warehouse": {"p1": "[1,5)", "p2": "[5,7)"}})
	if err != nil || pc.Epoch != 1 || pc.NextEpoch != 2 || len(pc.Ranges["warehouse"]) != 2 || pc.Ranges["warehouse"][1] != (client.PlanRange{Range: "[5,7)", Partition: "p2"}) {
		t.Fatalf("plan check: %+v, %v", pc, err)
	}
	if len(pc.Moves) != 1 || pc.Moves[0].Range != "[4,5)" || pc.Moves[0].From != "p2" || pc.Moves[0].To != "p1" || len(pc.Moves[0].Tables) != 2 {
		t.Fatalf("plan check's moves: %+v; want [4,5) p2 → p1 with warehouse and district", pc.Moves)
	}
	_, err = a1.c.CheckPlan(ctx, "tpcc", keyspace.PlanSpec{"warehouse": {"p1": "[1,5)", "p2": "[6,7)"}})
	if client.StatusOf(err) != 400 || !strings.Contains(err.Error(), "gap: keys [5,6)") {
		t.Fatalf("plan check of a gap: %v", err)
	}
	if ks, err := a1.c.Keyspace(ctx, "tpcc"); err != nil || ks.Epoch != 1 || ks.Plan["warehouse"]["p1"] != "[1,4)" {
		t.Fatalf("keyspace after plan checks: %+v, %v", ks, err)
	}

	if _, err := a1.c.DeleteKeyspace(ctx, "tpcc"); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.c.Keyspace(ctx, "tpcc"); client.StatusOf(err) != 404 {
		t.Fatalf("deleted keyspace: %v, want 404", err)
	}
	sqlOn(t, pb.Port, "SELECT 1 FROM warehouse") // the data stays
}

func mustDecode(t *testing.T, b []byte) *keyspace.Keyspace {
	t.Helper()
	ks, err := keyspace.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}
