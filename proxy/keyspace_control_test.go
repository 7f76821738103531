package proxy

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Transaction control sent with the extended protocol, as JDBC does: BEGIN
// and COMMIT as statements of their own, and BEGIN at the head of the
// first statement's pipeline; a COMMIT after a statement in one pipeline
// is refused.
func TestKeyspaceExtendedControl(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	conn := r.connect(t, pgx.QueryExecModeCacheStatement)
	pc := conn.PgConn()
	exec := func(sql string, args ...[]byte) error {
		return pc.ExecParams(ctx, sql, args, nil, nil, nil).Read().Err
	}
	if err := exec("BEGIN"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"1", "150"} {
		if err := exec("INSERT INTO kv (k, v) VALUES ($1, 'one')", []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if pc.TxStatus() != 'T' {
		t.Errorf("in the block: status %q, want T", pc.TxStatus())
	}
	if err := exec("COMMIT"); err != nil {
		t.Fatal(err)
	}
	if pc.TxStatus() != 'I' {
		t.Errorf("after COMMIT: status %q, want I", pc.TxStatus())
	}

	// BEGIN at the head of a pipeline, then a rollback on its own.
	b := &pgconn.Batch{}
	b.ExecParams("BEGIN", nil, nil, nil, nil)
	b.ExecParams("INSERT INTO kv (k, v) VALUES ($1, 'two')", [][]byte{[]byte("2")}, nil, nil, nil)
	if _, err := pc.ExecBatch(ctx, b).ReadAll(); err != nil {
		t.Fatal(err)
	}
	if err := exec("ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	// COMMIT after a statement in one pipeline: refused, the block fails.
	if err := exec("BEGIN"); err != nil {
		t.Fatal(err)
	}
	b = &pgconn.Batch{}
	b.ExecParams("INSERT INTO kv (k, v) VALUES ($1, 'three')", [][]byte{[]byte("3")}, nil, nil, nil)
	b.ExecParams("COMMIT", nil, nil, nil, nil)
	_, err := pc.ExecBatch(ctx, b).ReadAll()
	wantCode(t, "COMMIT inside a pipeline", err, "0A000")
	if err := exec("ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	on1, on2 := rowsOn(t, r.c1), rowsOn(t, r.c2)
	if on1[1] != "one" || on2[150] != "one" || len(on1)+len(on2) != 2 {
		t.Errorf("p1 %v, p2 %v; want keys 1 and 150 only", on1, on2)
	}
}
