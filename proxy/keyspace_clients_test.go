package proxy

import (
	"bytes"
	"context"
	"flag"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/pgcluster"
)

// Clients other than pgx through the keyspace router, each unchanged: psql,
// psycopg2 (Debian's python3-psycopg2) and node-postgres (npm pg, pinned in
// testdata/node). Each runs a script of testdata/<client>/ whose output is
// compared with the transcript beside it (kv.golden; -update rewrites it:
// review the diff), and then the rows on each server are checked directly.
// scripts/install-deps.sh installs the clients.

var update = flag.Bool("update", false, "rewrite the client tests' transcripts (testdata/*/kv.golden)")

// clientTimeout bounds a client script's run: a hang fails the test instead
// of stalling the suite. It is a guard, not an assertion on speed.
const clientTimeout = 2 * time.Minute

// clientEnv is the libpq environment for keyspace kv through r's proxy;
// psql, psycopg2 (libpq) and node-postgres all read it.
func (r *ksRig) clientEnv() []string {
	host, port, _ := net.SplitHostPort(r.p.Addr())
	return append(os.Environ(), "PGHOST="+host, "PGPORT="+port, "PGUSER=postgres",
		"PGPASSWORD="+testPassword, "PGDATABASE=kv", "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10",
		"PGAPPNAME=sluice-test", "PGOPTIONS=", "PGTZ=UTC", "LC_ALL=C.UTF-8")
}

// runClient runs a client in testdata/dir and returns its output
// (stdout, then stderr under a marker when there is any).
func runClient(t *testing.T, r *ksRig, dir, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Join("testdata", dir)
	cmd.Env = r.clientEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String()
	if stderr.Len() > 0 {
		out += "--- stderr\n" + stderr.String()
	}
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
	return out
}

// lookClient finds a client's executable, failing the test with how to
// install it when it is missing.
func lookClient(t *testing.T, path string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		t.Fatalf("%s: %v (scripts/install-deps.sh installs the clients the tests drive)", path, err)
	}
	return p
}

// golden compares got with testdata/<dir>/kv.golden (rewritten with -update).
func golden(t *testing.T, dir, got string) {
	t.Helper()
	path := filepath.Join("testdata", dir, "kv.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("%s: transcript differs (run with -update and review the diff)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// wantPlacement checks that the servers hold exactly the rows of want,
// each on the partition the plan names for its key and on no other, and
// no prepared transaction (rowsOn).
func (r *ksRig) wantPlacement(t *testing.T, want map[int]string) {
	t.Helper()
	on := map[string]map[int]string{"p1": rowsOn(t, r.c1), "p2": rowsOn(t, r.c2)}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		owner, err := r.ks.Owner("kv", keyspace.IntKey(int64(k)))
		if err != nil {
			t.Fatal(err)
		}
		for part, rows := range on {
			v, ok := rows[k]
			switch {
			case part == owner && !ok:
				t.Errorf("key %d: missing on its owner %s", k, part)
			case part == owner && v != want[k]:
				t.Errorf("key %d on %s: %q, want %q", k, part, v, want[k])
			case part != owner && ok:
				t.Errorf("key %d (owner %s) also on %s: %q", k, owner, part, v)
			}
		}
	}
	for part, rows := range on {
		for k, v := range rows {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: unexpected row %d = %q", part, k, v)
			}
		}
	}
}

// TestKeyspacePsql runs testdata/psql/kv.sql: statements on both
// partitions, blocks committed (2PC) and rolled back, a scatter read in key
// order, an array literal (k = ANY('{…}')), SET sluice.key, the catalog queries of \dt and \d, a refused
// statement (0A000, shown with its SQLSTATE) after which the session goes
// on, and a block failed by an error.
func TestKeyspacePsql(t *testing.T) {
	r := newKsRig(t, false, nil)
	psql := lookClient(t, filepath.Join(pgcluster.DefaultBinDir, "psql"))
	out := runClient(t, r, "psql", psql, "-X", "--no-password", "-f", "kv.sql")
	golden(t, "psql", out)
	r.wantPlacement(t, map[int]string{1: "one+", 2: "two", 101: "hundred and one+", 102: "hundred and two", 150: "by the hint"})
}

// debianPython is the python3 Debian's python3-psycopg2 is installed for
// (a python3 first on PATH, such as pyenv's, may lack it).
const debianPython = "/usr/bin/python3"

// TestKeyspacePsycopg2 runs testdata/psycopg2/kv.py: autocommit off
// (implicit BEGIN), %s parameters interpolated by the client (simple
// protocol), commit across partitions (2PC), rollback, executemany, a
// scatter read with a tuple adapted to IN and one with a list adapted to
// k = ANY(ARRAY[…]), a server-side cursor declared
// on the partition the transaction did not begin on, a key given as a
// string, error codes (0A000 without a key, 22P02 for a key of the wrong
// type) each failing its transaction, and autocommit.
func TestKeyspacePsycopg2(t *testing.T) {
	r := newKsRig(t, false, nil)
	py := lookClient(t, debianPython)
	out := runClient(t, r, "psycopg2", py, "kv.py")
	golden(t, "psycopg2", out)
	r.wantPlacement(t, map[int]string{10: "ten", 11: "it's eleven", 13: "autocommit", 110: "hundred and ten", 111: "hundred and eleven!"})
}

// TestKeyspaceNodePostgres runs testdata/node/kv.js: named prepared
// statements reused for keys of both partitions (pg parses each once per
// connection; the router parses it on each partition it reaches), a
// transaction committed across partitions and one rolled back, rowMode
// array and a scatter read in key order, an array parameter (k = ANY($1)),
// unnamed statements, a named statement whose first Bind the router
// refuses (its Parse is answered, so pg only binds it later), and error
// codes (0A000, 22P02, 23505, an error failing a block).
func TestKeyspaceNodePostgres(t *testing.T) {
	r := newKsRig(t, false, nil)
	node := lookClient(t, "node")
	if _, err := os.Stat("testdata/node/node_modules/pg"); err != nil {
		t.Fatalf("node-postgres: %v (scripts/install-deps.sh runs npm ci in testdata/node)", err)
	}
	out := runClient(t, r, "node", node, "kv.js")
	golden(t, "node", out)
	r.wantPlacement(t, map[int]string{20: "twenty+", 21: "twenty-one", 22: "twenty-two",
		120: "hundred and twenty+", 121: "hundred and twenty-one", 122: "hundred and twenty-two"})
}
