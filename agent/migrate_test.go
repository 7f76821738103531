package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

// agentPair returns configs for two agents that know each other as peers
// "a1" and "a2", on free API ports and disjoint tenant port ranges.
func agentPair(t *testing.T) (Config, Config) {
	c1, c2 := newTestConfig(t, "a1"), newTestConfig(t, "a2")
	p1, _ := pgcluster.FreePort()
	p2, _ := pgcluster.FreePort()
	c1.Listen, c2.Listen = fmt.Sprintf("127.0.0.1:%d", p1), fmt.Sprintf("127.0.0.1:%d", p2)
	c1.Peers = map[string]string{"a2": "http://" + c2.Listen}
	c2.Peers = map[string]string{"a1": "http://" + c1.Listen}
	zero := Duration(0)
	c1.RetireGrace, c2.RetireGrace = &zero, &zero
	stopTenants(t, c1.Root)
	stopTenants(t, c2.Root)
	return c1, c2
}

// freeAddrExcept returns a free 127.0.0.1 address that is none of taken.
func freeAddrExcept(t *testing.T, taken ...string) string {
	t.Helper()
	for {
		p, err := pgcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if a := fmt.Sprintf("127.0.0.1:%d", p); !slices.Contains(taken, a) {
			return a
		}
	}
}

// waitMigration polls migration id on c until it is done (or until stop
// returns true for its view) and returns the last view.
func waitMigration(t *testing.T, c *client.Client, id string, timeout time.Duration, stop func(client.Migration) bool) client.Migration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last client.Migration
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := c.Migration(ctx, id)
		cancel()
		if err == nil {
			last = m
			if m.Done || (stop != nil && stop(m)) {
				return m
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("migration %s did not finish in %s; last: phase %s error %q", id, timeout, last.Progress.Phase, last.Error)
	return last
}

// waitAnalyzed waits up to 30 s for a manual ANALYZE of table on cs
// (pg_stat_user_tables.last_analyze) and checks its live row estimate.
func waitAnalyzed(t *testing.T, cs, table string, rows int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var analyzed bool
		var live int64
		err := conn.QueryRow(ctx, "SELECT last_analyze IS NOT NULL, n_live_tup FROM pg_stat_user_tables WHERE relname = $1", table).Scan(&analyzed, &live)
		if err == nil && analyzed {
			if live != rows {
				t.Fatalf("%s after ANALYZE: n_live_tup %d, want %d", table, live, rows)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s was not analyzed on the new owner within 30 s (last error %v)", table, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestLiveMigration moves a tenant under a steady write workload between two
// in-process agents, changes the rate while it runs, and checks row by row
// that every acknowledged write is on the target exactly once.
func TestLiveMigration(t *testing.T) {
	c1, c2 := agentPair(t)
	soon := Duration(50 * time.Millisecond)
	c2.AnalyzeAfter = &soon
	var a2log lockedBuffer // the migration back says how its snapshot started
	c2.Logger = slog.New(slog.NewTextHandler(&a2log, nil))
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	srcCS := a1.ConnString(tn.Port, "")
	dstCS := a2.ConnString(a2.TenantPort(tn.ID), "")
	loadData(t, srcCS, 20)

	w := &ledgerWriter{conns: []string{srcCS, dstCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	defer func() { wstop(); <-wdone }()
	time.Sleep(500 * time.Millisecond)

	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2", Rate: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if m.Role != "source" || m.Peer != "a2" || m.Mode != "live" {
		t.Fatalf("started migration = %+v", m)
	}
	// A second migration of the same tenant is refused while this one runs.
	if _, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2"}); client.StatusOf(err) != 409 {
		t.Fatalf("second migration: %v, want 409", err)
	}
	if ts, _ := a1.c.Tenant(ctx, tn.ID); ts.State != "migrating-out" || ts.Migration != m.ID {
		t.Fatalf("source tenant during migration = %+v", ts)
	}
	// Raise the rate live once the snapshot is under way.
	waitMigration(t, a1.c, m.ID, time.Minute, func(v client.Migration) bool { return v.Progress.Bytes > 0 })
	if v, err := a1.c.SetRate(ctx, m.ID, 64<<20); err != nil || v.Progress.Limit != 64<<20 {
		t.Fatalf("set rate: %+v %v", v.Progress, err)
	}
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	if m.Outcome != "committed" || m.Summary == nil {
		t.Fatalf("migration ended %+v (error %q)", m, m.Error)
	}
	waitAckedAt(t, w, 1, 20) // writes land on the target
	wstop()
	<-wdone
	t.Logf("migration %s: %d bytes in %.1fs, freeze %.0f ms", m.ID, m.Summary.Bytes, m.Summary.Seconds, m.Summary.FreezeMS)
	if m.Summary.Bytes < 20<<20 || m.Summary.FreezeMS <= 0 || m.Summary.Checkpoint != "fast" || m.Summary.CheckpointSeconds <= 0 {
		t.Fatalf("summary %+v: want ≥ 20 MiB copied, a measured freeze, and the fast checkpoint's time", m.Summary)
	}
	// The ledger writer's WAL reached the standby through the target
	// agent's relay (the default), which counted it.
	if m.Summary.WALRelay != "target" || m.Summary.WALBytes <= 0 {
		t.Fatalf("summary %+v: want the WAL relayed by the target, and counted", m.Summary)
	}
	acked, errs, byHome := w.stats()
	t.Logf("writer: %d acknowledged (%v per home), %d errors", acked, byHome, errs)
	w.verify(t, dstCS)

	// Catalogs: moved on the source, running on the target; source dir gone.
	src, _ := a1.c.Tenant(ctx, tn.ID)
	dst, err := a2.c.Tenant(ctx, tn.ID)
	if src.State != "moved" || err != nil || dst.State != "running" || !dst.Alive || dst.Name != "acme" {
		t.Fatalf("after migration: source %+v, target %+v (%v)", src, dst, err)
	}
	if _, err := os.Stat(tn.Dir); !os.IsNotExist(err) {
		t.Fatalf("source data dir still there: %v", err)
	}
	tm, err := a2.c.Migration(ctx, m.ID)
	if err != nil || tm.Role != "target" || !tm.Done || tm.Outcome != "committed" || tm.Progress.Phase != "done" {
		t.Fatalf("target's migration record = %+v (%v), want committed in phase done", tm, err)
	}
	// The WAL written during the copy was received then (the target's
	// relay, the default) and replayed from the standby's own disk.
	if tm.WALEarlyBytes <= 0 {
		t.Fatalf("target's migration record: no early WAL adopted: %+v", tm)
	}
	// The promoted tenant started with empty statistics; the agent's
	// ANALYZE (analyze_after) gives autovacuum its row counts back.
	waitAnalyzed(t, dstCS, "bulk", 20*1000)

	// And back again, to the agent it came from (its old record is "moved"),
	// its snapshot's checkpoint paced.
	m2, err := a2.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a1", Checkpoint: "1s", WALRelay: "source"})
	if err != nil {
		t.Fatal(err)
	}
	m2 = waitMigration(t, a2.c, m2.ID, 3*time.Minute, nil)
	if m2.Outcome != "committed" || m2.Summary == nil {
		t.Fatalf("migration back ended %+v", m2)
	}
	if m2.Summary.WALRelay != "source" || m2.Summary.WALBytes <= 0 {
		t.Errorf("migration back's summary %+v: want the WAL relayed by the source, and counted", m2.Summary)
	}
	if tm2, err := a1.c.Migration(ctx, m2.ID); err != nil || tm2.WALEarlyBytes != 0 {
		t.Errorf("migration back, target's record %+v (%v): the source's relay streams no early WAL", tm2, err)
	}
	if m2.Summary.Checkpoint != "paced 1s" || m2.Summary.CheckpointSeconds <= 0 {
		t.Errorf("migration back's summary %+v: want its paced checkpoint and how long it took", m2.Summary)
	}
	if l := a2log.String(); !strings.Contains(l, `msg="snapshot started"`) || !strings.Contains(l, `checkpoint="paced 1s"`) {
		t.Errorf("the source's log does not say its snapshot's checkpoint was paced:\n%s", l)
	}
	w.verify(t, srcCS)
}

// TestStopAndCopyMigration moves a tenant by the stop-and-copy baseline,
// between agents that speak HTTPS (the stream goes over TLS).
func TestStopAndCopyMigration(t *testing.T) {
	c1, c2 := agentPair(t)
	withTLS(t, &c1, &c2)
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	if !strings.HasPrefix(a1.URL(), "https://") {
		t.Fatalf("agent URL %s is not https", a1.URL())
	}
	plain, _ := client.New("http://" + c1.Listen)
	if _, err := plain.Info(ctx); err == nil {
		t.Fatal("plain HTTP to a TLS agent succeeded")
	}
	untrusted, _ := client.New(a1.URL())
	if _, err := untrusted.Info(ctx); err == nil {
		t.Fatal("HTTPS without the agents' CA succeeded")
	}
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{})
	if err != nil {
		t.Fatal(err)
	}
	srcCS := a1.ConnString(tn.Port, "")
	dstCS := a2.ConnString(a2.TenantPort(tn.ID), "")
	loadData(t, srcCS, 2)
	w := &ledgerWriter{conns: []string{srcCS, dstCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	defer func() { wstop(); <-wdone }()
	time.Sleep(300 * time.Millisecond)
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2", Mode: "stop-and-copy"})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	time.Sleep(300 * time.Millisecond)
	wstop()
	<-wdone
	if m.Outcome != "committed" || m.Summary == nil || m.Summary.DowntimeMS <= 0 || m.Summary.Checkpoint != "" {
		t.Fatalf("stop-and-copy ended %+v (%+v)", m, m.Summary)
	}
	t.Logf("stop-and-copy: downtime %.0f ms, %d bytes", m.Summary.DowntimeMS, m.Summary.Bytes)
	w.verify(t, dstCS)
}

// TestMigrationBadInput: every refused request answers a specific 4xx and
// changes nothing on either agent.
func TestMigrationBadInput(t *testing.T) {
	c1, c2 := agentPair(t)
	c3 := newTestConfig(t, "a3") // target without space
	c3.CapacityBytes = 1 << 20
	c4 := newTestConfig(t, "a4") // target with another PostgreSQL major version
	c4.PGBinDir = fakePGBin(t, "14.9")
	stopTenants(t, c3.Root)
	// a3 and a4 start first: on ports of their own, not the kernel's pick,
	// which could be a1's or a2's (chosen free, not yet bound).
	c3.Listen = freeAddrExcept(t, c1.Listen, c2.Listen)
	c4.Listen = freeAddrExcept(t, c1.Listen, c2.Listen, c3.Listen)
	a3 := startAgent(t, c3)
	a4 := startAgent(t, c4)
	c1.Peers["a3"] = a3.URL()
	c1.Peers["a4"] = a4.URL()
	c1.Peers["self"] = "http://" + c1.Listen
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	minimal, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "nowal", Settings: map[string]string{"wal_level": "minimal", "max_wal_senders": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "off"})
	if err != nil {
		t.Fatal(err)
	}
	// a2 has a tenant of acme's id already (ids are per agent without a
	// shared catalog).
	squatter, err := a2.c.CreateTenant(ctx, client.CreateTenant{ID: tn.ID, Name: "squatter"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a1.c.StopTenant(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  client.StartMigration
		code int
		want string
	}{
		{"unknown tenant", client.StartMigration{Tenant: 99, To: "a2"}, 404, "unknown tenant 99"},
		{"unknown agent", client.StartMigration{Tenant: tn.ID, To: "nowhere"}, 403, `target "nowhere" is not a configured peer`},
		{"target is source by peer entry", client.StartMigration{Tenant: tn.ID, To: "self"}, 400, "is the source"},
		{"target is source by own name", client.StartMigration{Tenant: tn.ID, To: "a1"}, 400, "is the source"},
		{"target is source by URL", client.StartMigration{Tenant: tn.ID, To: a1.URL()}, 400, "is the source"},
		{"bad mode", client.StartMigration{Tenant: tn.ID, To: "a2", Mode: "teleport"}, 400, "mode"},
		{"negative rate", client.StartMigration{Tenant: tn.ID, To: "a2", Rate: -1}, 400, "rate"},
		{"checkpoint pace too long", client.StartMigration{Tenant: tn.ID, To: "a2", Checkpoint: "28s"}, 400, "checkpoint pace"},
		{"bad checkpoint", client.StartMigration{Tenant: tn.ID, To: "a2", Checkpoint: "gentle"}, 400, "checkpoint"},
		{"bad WAL relay", client.StartMigration{Tenant: tn.ID, To: "a2", WALRelay: "middle"}, 400, `wal_relay "middle"`},
		{"bad catch-up timeout", client.StartMigration{Tenant: tn.ID, To: "a2", CatchUpTimeout: "-5m"}, 400, "catch_up_timeout \"-5m\""},
		{"bad deadline", client.StartMigration{Tenant: tn.ID, To: "a2", Deadline: "soon"}, 400, `deadline "soon"`},
		{"negative deadline", client.StartMigration{Tenant: tn.ID, To: "a2", Deadline: "-1h"}, 400, `deadline "-1h"`},
		{"no space on target", client.StartMigration{Tenant: tn.ID, To: "a3"}, 422, "not enough space"},
		{"other major version", client.StartMigration{Tenant: tn.ID, To: "a4"}, 422, "PostgreSQL 14"},
		{"wal_level minimal", client.StartMigration{Tenant: minimal.ID, To: "a2"}, 422, "wal_level=minimal"},
		{"stopped tenant", client.StartMigration{Tenant: stopped.ID, To: "a2"}, 409, "only a running tenant"},
		{"id taken on the target", client.StartMigration{Tenant: tn.ID, To: "a2"}, 409, "a2 already has tenant " + fmt.Sprint(tn.ID) + " (state running)"},
	} {
		_, err := a1.c.StartMigration(ctx, tc.req)
		if client.StatusOf(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v (status %d), want status %d containing %q", tc.name, err, client.StatusOf(err), tc.code, tc.want)
		}
	}
	// Nothing changed: no migrations anywhere, tenants as they were.
	for _, c := range []*client.Client{a1.c, a2.c, a3.c, a4.c} {
		if ms, err := c.Migrations(ctx); err != nil || len(ms) != 0 {
			t.Errorf("%s has migrations after refused requests: %+v %v", c.URL(), ms, err)
		}
	}
	if ts, _ := a2.c.Tenants(ctx, true); len(ts) != 1 || ts[0].Name != squatter.Name || ts[0].State != "running" || !ts[0].Alive {
		t.Errorf("target's tenants after refused requests: %+v, want its own squatter, running", ts)
	}
	if cur, _ := a1.c.Tenant(ctx, tn.ID); cur.State != "running" || !cur.Alive {
		t.Errorf("source tenant after refused requests: %+v", cur)
	}
	// A stop-and-copy is fine without wal_level replica.
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: minimal.ID, To: "a2", Mode: "stop-and-copy"})
	if err != nil {
		t.Fatal(err)
	}
	if m = waitMigration(t, a1.c, m.ID, 2*time.Minute, nil); m.Outcome != "committed" {
		t.Fatalf("stop-and-copy of a wal_level=minimal tenant: %+v", m)
	}
	// Unknown migrations.
	if _, err := a1.c.Migration(ctx, "nope"); client.StatusOf(err) != 404 {
		t.Errorf("unknown migration: %v", err)
	}
	if _, err := a1.c.SetRate(ctx, "nope", 1e6); client.StatusOf(err) != 404 {
		t.Errorf("rate of unknown migration: %v", err)
	}
	if _, err := a1.c.AbortMigration(ctx, m.ID); client.StatusOf(err) != 409 {
		t.Errorf("abort of a finished migration: %v", err)
	}
}

// TestAbortMigration: an operator abort during the snapshot rolls back; the
// source keeps every write and the target keeps nothing; the summary says
// what had moved.
func TestAbortMigration(t *testing.T) {
	c1, c2 := agentPair(t)
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{})
	if err != nil {
		t.Fatal(err)
	}
	srcCS := a1.ConnString(tn.Port, "")
	loadData(t, srcCS, 10)
	w := &ledgerWriter{conns: []string{srcCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	defer func() { wstop(); <-wdone }()
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: a2.URL(), Rate: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	waitMigration(t, a1.c, m.ID, time.Minute, func(v client.Migration) bool { return v.Progress.Bytes > 0 })
	if _, err := a1.c.AbortMigration(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 2*time.Minute, nil)
	wstop()
	<-wdone
	if m.Outcome != "aborted" {
		t.Fatalf("aborted migration ended %+v", m)
	}
	// Its summary keeps what the snapshot had sent (the rollback reset
	// the record's count).
	if m.Summary == nil || m.Summary.Bytes <= 0 || m.Summary.Seconds <= 0 {
		t.Fatalf("aborted migration's summary %+v: want the bytes it had sent and its time", m.Summary)
	}
	if cur, _ := a1.c.Tenant(ctx, tn.ID); cur.State != "running" || !cur.Alive {
		t.Fatalf("source after abort: %+v", cur)
	}
	if ts, _ := a2.c.Tenant(ctx, tn.ID); ts.State == "migrating-in" || ts.State == "running" {
		t.Fatalf("target after abort: %+v", ts)
	}
	if _, err := os.Stat(filepath.Join(c2.Root, "tenants", fmt.Sprint(tn.ID))); !os.IsNotExist(err) {
		t.Fatalf("target dir after abort: %v", err)
	}
	w.verify(t, srcCS)
	// The slot is gone from the source.
	conn, err := pgx.Connect(ctx, srcCS)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var slots int
	conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots)
	if slots != 0 {
		t.Fatalf("%d replication slots left on the source after abort", slots)
	}

	// A deadline that passes during the copy rolls the migration back the
	// same way.
	m, err = a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: a2.URL(), Rate: 1 << 20, Deadline: "3s"})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 2*time.Minute, nil)
	if m.Outcome != "aborted" || !strings.Contains(m.Error, "deadline") {
		t.Fatalf("migration past its deadline ended %s (%q), want aborted naming the deadline", m.Outcome, m.Error)
	}
	if cur, _ := a1.c.Tenant(ctx, tn.ID); cur.State != "running" || !cur.Alive {
		t.Fatalf("source after the deadline: %+v", cur)
	}
}

// fakePGBin returns a directory whose postgres claims another version.
func fakePGBin(t *testing.T, version string) string {
	d := pgtest.TempDir(t) // the PostgreSQL OS user runs it too (agent config check)
	script := fmt.Sprintf("#!/bin/sh\necho 'postgres (PostgreSQL) %s'\n", version)
	if err := os.WriteFile(filepath.Join(d, "postgres"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// lockedBuffer is a bytes.Buffer an agent's logger may write while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
