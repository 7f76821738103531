package pg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/lab/ledger"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/throttle"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// fixture is a source tenant with some data and a target host directory.
type fixture struct {
	src    *pgcluster.Cluster
	source *LocalSource
	target *LocalTarget
	root   string
}

func newFixture(t *testing.T, fillerMB int) *fixture {
	t.Helper()
	return fixtureFor(t, pgtest.New(t, pgcluster.Options{Settings: map[string]string{"shared_buffers": "16MB"}}), fillerMB)
}

func pgtestInit(t *testing.T) *pgcluster.Cluster {
	return pgtest.Init(t, pgcluster.Options{Settings: map[string]string{"shared_buffers": "16MB"}})
}

func fixtureFor(t *testing.T, src *pgcluster.Cluster, fillerMB int) *fixture {
	t.Helper()
	root := pgtest.TempDir(t)
	f := &fixture{src: src, source: NewLocalSource(src), target: NewLocalTarget(root, pgcluster.Options{}), root: root}
	t.Cleanup(func() {
		f.source.Close()
		stopAllUnder(root)
	})
	ctx := context.Background()
	exec1(t, src.ConnString("postgres"), "CREATE TABLE filler AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, $1::int) g", fillerMB*4000)
	if err := ledger.Setup(ctx, src.ConnString("postgres")); err != nil {
		t.Fatal(err)
	}
	return f
}

// stopAllUnder stops every postmaster whose data directory is directly under root.
func stopAllUnder(root string) {
	ms, _ := filepath.Glob(filepath.Join(root, "*", "postmaster.pid"))
	for _, m := range ms {
		if c, err := pgcluster.Open(filepath.Dir(m), pgcluster.Options{Port: 1}); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c.Stop(ctx, pgcluster.Immediate)
			cancel()
		}
	}
}

func exec1(t *testing.T, cs, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// roundTrip returns r as the catalog would give it back (JSON).
func roundTrip(t *testing.T, r migration.Record) migration.Record {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out migration.Record
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return out
}

func connURL(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" }

// startWorkload runs a ledger workload through a gate router at 500 writes/s
// and returns it with a stop function that waits for it to end.
func startWorkload(t *testing.T, g *migration.GateRouter) (*ledger.Workload, func()) {
	return startWorkloadSQL(t, g, "")
}

func startWorkloadSQL(t *testing.T, g *migration.GateRouter, sessionSQL string) (*ledger.Workload, func()) {
	w := &ledger.Workload{Router: g, ConnString: connURL, Rate: 500, Workers: 4, SessionSQL: sessionSQL}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	return w, func() { cancel(); <-done }
}

// waitAcked waits until the workload has at least n more acknowledged writes
// than it had when called (the workload runs; this is progress, not timing).
func waitAcked(t *testing.T, w *ledger.Workload, n int) {
	t.Helper()
	start := w.Stats().Acknowledged
	deadline := time.Now().Add(60 * time.Second)
	for w.Stats().Acknowledged < start+n {
		if time.Now().After(deadline) {
			t.Fatalf("workload stalled: %+v", w.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func verify(t *testing.T, w *ledger.Workload, addr string) ledger.Report {
	t.Helper()
	rep, err := w.Verify(context.Background(), connURL(addr))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Acknowledged == 0 || rep.Missing != 0 || rep.Duplicated != 0 {
		t.Fatalf("ledger check on %s: %+v (workload %+v)", addr, rep, w.Stats())
	}
	return rep
}

func runMigration(t *testing.T, f *fixture, mode migration.Mode, router migration.Router, mutate func(*migration.Record)) (migration.Record, error) {
	t.Helper()
	rec := migration.New("m1", "t1", "a", "b", mode, time.Now())
	if mutate != nil {
		mutate(&rec)
	}
	var persisted []migration.Phase
	env := migration.Env{
		Source: f.source, Target: f.target, Router: router,
		Persist: func(r migration.Record) error {
			if len(persisted) == 0 || persisted[len(persisted)-1] != r.Phase {
				persisted = append(persisted, r.Phase)
			}
			return nil
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := migration.Run(ctx, rec, env)
	t.Logf("phases %v; freeze %s; error %q", persisted, out.Freeze, out.Error)
	if !out.ReleasedAt.IsZero() {
		t.Logf("handover: %s", handoverBreakdown(out))
	}
	return out, err
}

// TestLiveMigrationNothingLost: under a steady write workload, a live
// migration moves the tenant and every acknowledged write is on the target
// exactly once, including those written after the switch.
func TestLiveMigrationNothingLost(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fence      migration.FenceMode
		sessionSQL string
	}{
		{"read-only", migration.FenceReadOnly, ""},
		{"stop", migration.FenceStop, ""},
		// Clients acknowledged before their commit is flushed.
		{"read-only-async-commit", migration.FenceReadOnly, "SET synchronous_commit = off"},
	} {
		fence := tc.fence
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 8)
			var backup []string // the source's OnBackupStart calls
			f.source.OnBackupStart = func(started bool, checkpoint string) {
				backup = append(backup, fmt.Sprintf("%t %s", started, checkpoint))
			}
			g := migration.NewGateRouter(f.src.Addr())
			w, stop := startWorkloadSQL(t, g, tc.sessionSQL)
			waitAcked(t, w, 200)
			rec, err := runMigration(t, f, migration.Live, g, func(r *migration.Record) { r.Fence = fence })
			if err != nil {
				stop()
				t.Fatalf("migration: %v", err)
			}
			if rec.Phase != migration.PhaseDone || rec.Freeze <= 0 || !rec.Warmed || rec.WarmBlocks == 0 {
				t.Fatalf("record: %+v", rec)
			}
			if rec.SnapshotCheckpoint != "fast" || rec.SnapshotStartSeconds <= 0 || !slices.Equal(backup, []string{"false fast", "true fast"}) {
				t.Errorf("the backup's start: record says %q in %v s, OnBackupStart calls %q; want fast, a time, and one call before and one after", rec.SnapshotCheckpoint, rec.SnapshotStartSeconds, backup)
			}
			if g.Addr() == f.src.Addr() || g.Addr() != f.target.Addr(rec) {
				t.Fatalf("route %s, want target %s", g.Addr(), f.target.Addr(rec))
			}
			waitAcked(t, w, 200) // writes keep landing, now on the target
			stop()
			if rep, err := w.Verify(context.Background(), connURL(g.Addr())); err == nil && rep.Missing > 0 {
				for _, at := range rep.MissingAt {
					t.Logf("missing write acknowledged %s after hold, %s after release", at.Sub(rec.HeldAt), at.Sub(rec.ReleasedAt))
				}
			}
			rep := verify(t, w, g.Addr())
			t.Logf("ledger %+v; workload %+v", rep, w.Stats())
			if _, err := os.Stat(f.src.Dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("source directory still there after cleanup: %v", err)
			}
			// The target is a primary with all the filler data.
			c, err := pgx.Connect(context.Background(), connURL(g.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			var n int
			var rec2 bool
			if err := c.QueryRow(context.Background(), "SELECT count(*), pg_is_in_recovery() FROM filler").Scan(&n, &rec2); err != nil {
				t.Fatal(err)
			}
			if n != 8*4000 || rec2 {
				t.Fatalf("target filler rows %d (want %d), in recovery %t", n, 8*4000, rec2)
			}
		})
	}
}

// TestStopAndCopyNothingLost: the baseline also loses nothing; its downtime
// is the freeze.
func TestStopAndCopyNothingLost(t *testing.T) {
	f := newFixture(t, 8)
	g := migration.NewGateRouter(f.src.Addr())
	w, stop := startWorkload(t, g)
	waitAcked(t, w, 200)
	rec, err := runMigration(t, f, migration.StopAndCopy, g, nil)
	if err != nil {
		stop()
		t.Fatalf("migration: %v", err)
	}
	if rec.Phase != migration.PhaseDone || rec.CopyBytes == 0 || rec.Freeze <= 0 {
		t.Fatalf("record: %+v", rec)
	}
	waitAcked(t, w, 200)
	stop()
	rep := verify(t, w, g.Addr())
	t.Logf("downtime %s; ledger %+v", rec.Freeze, rep)
}

// killingTarget kills the target's postmaster right after it starts as a
// standby: a failure injected in CATCH-UP.
type killingTarget struct{ *LocalTarget }

var _ migration.Target = killingTarget{}

func (k killingTarget) StartStandby(ctx context.Context, m migration.Record, ci, slot string) error {
	if err := k.LocalTarget.StartStandby(ctx, m, ci, slot); err != nil {
		return err
	}
	c, err := k.cluster(m)
	if err != nil {
		return err
	}
	pid, err := c.PID()
	if err != nil {
		return err
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(time.Millisecond)
	}
	return nil
}

// TestRollbackWhenTargetDies: the target's postmaster dies during CATCH-UP;
// the migration rolls back, the source (which never stopped) has every
// acknowledged write and keeps serving, the slot and target directory are gone.
func TestRollbackWhenTargetDies(t *testing.T) {
	f := newFixture(t, 2)
	g := migration.NewGateRouter(f.src.Addr())
	w, stop := startWorkload(t, g)
	waitAcked(t, w, 100)
	rec := migration.New("m1", "t1", "a", "b", migration.Live, time.Now())
	out, err := migration.Run(context.Background(), rec, migration.Env{Source: f.source, Target: killingTarget{f.target}, Router: g})
	if !errors.Is(err, migration.ErrAborted) || out.Phase != migration.PhaseAborted || out.FailedIn != migration.PhaseCatchUp {
		t.Fatalf("Run = %v, record %+v", err, out)
	}
	t.Logf("rolled back: %s", out.Error)
	waitAcked(t, w, 100)
	stop()
	if g.Addr() != f.src.Addr() {
		t.Fatalf("route moved to %s", g.Addr())
	}
	verify(t, w, f.src.Addr())
	if _, err := os.Stat(out.TargetDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target dir %s still there: %v", out.TargetDir, err)
	}
	c, err := pgx.Connect(context.Background(), f.src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var slots int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Fatalf("%d replication slots left on the source", slots)
	}
}

// TestFences: each fence makes writes fail and Unfence restores them; the
// stop fence's LSN agrees with pg_controldata; the read-only fence leaves a
// spared backend connected (a router holds it idle), terminates the rest and
// logs the time of each of its steps.
func TestFences(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var logged bytes.Buffer
	f.source.Log = slog.New(slog.NewTextHandler(&logged, nil))
	write := func() error {
		c, err := pgx.Connect(ctx, f.src.ConnString("postgres"))
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "INSERT INTO sluice_ledger (id) VALUES (-1)")
		return err
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	// A connection open before the fence must not survive it.
	held, err := pgx.Connect(ctx, f.src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	spared, err := pgx.Connect(ctx, f.src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer spared.Close(ctx)
	var sparedPID int
	if err := spared.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&sparedPID); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []migration.FenceMode{migration.FenceReadOnly, migration.FenceStop} {
		lsn, err := f.source.Fence(ctx, mode, []int{sparedPID})
		if err != nil {
			t.Fatalf("fence %s: %v", mode, err)
		}
		if mode == migration.FenceReadOnly {
			var pid int
			if err := spared.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil || pid != sparedPID {
				t.Fatalf("fence %s: spared backend %d: pid %d, %v", mode, sparedPID, pid, err)
			}
			line := logged.String()
			for _, step := range []string{"hba=", "alter_system=", "reload=", "terminate=", "flush="} {
				if !strings.Contains(line, "source fenced (read-only)") || !strings.Contains(line, " "+step) {
					t.Fatalf("fence %s: log %q lacks the step %s", mode, line, step)
				}
			}
		}
		if lsn == 0 {
			t.Fatalf("fence %s: zero LSN", mode)
		}
		if err := write(); err == nil {
			t.Fatalf("fence %s: a new connection could still write", mode)
		}
		if _, err := held.Exec(ctx, "INSERT INTO sluice_ledger (id) VALUES (-2)"); err == nil {
			t.Fatalf("fence %s: an old connection could still write", mode)
		}
		if mode == migration.FenceStop {
			out, err := f.src.Run(ctx, "pg_controldata", "-D", f.src.Dir)
			if err != nil {
				t.Fatalf("pg_controldata: %v\n%s", err, out)
			}
			want := ""
			for _, line := range strings.Split(string(out), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Latest checkpoint location" {
					want = strings.TrimSpace(v)
				}
			}
			if got := (lsn - 1).String(); got != want {
				t.Fatalf("stop fence LSN-1 = %s, pg_controldata says %s", got, want)
			}
		}
		if err := f.source.Unfence(ctx); err != nil {
			t.Fatalf("unfence %s: %v", mode, err)
		}
		if err := write(); err != nil {
			t.Fatalf("after unfence %s: %v", mode, err)
		}
		held.Close(ctx)
		if held, err = pgx.Connect(ctx, f.src.ConnString("postgres")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPreflight: a source without wal_level=replica is refused for a live
// migration, nothing changed; the real target reports version 15 and space.
func TestPreflight(t *testing.T) {
	src := pgtest.New(t, pgcluster.Options{Settings: map[string]string{"wal_level": "minimal", "max_wal_senders": "0"}})
	s := NewLocalSource(src)
	defer s.Close()
	tgt := NewLocalTarget(pgtest.TempDir(t), pgcluster.Options{})
	ctx := context.Background()
	err := migration.Preflight(ctx, migration.Request{Tenant: "t1", Source: "a", Target: "b"}, s, tgt, nil)
	if !errors.Is(err, migration.ErrWALLevel) {
		t.Fatalf("Preflight = %v, want ErrWALLevel", err)
	}
	t.Log(err)
	if err := migration.Preflight(ctx, migration.Request{Tenant: "t1", Source: "a", Target: "b", Mode: migration.StopAndCopy}, s, tgt, nil); err != nil {
		t.Fatalf("stop-and-copy needs no wal_level: %v", err)
	}
	ti, err := tgt.Info(ctx, "t1")
	if err != nil || ti.Major != 15 || ti.FreeBytes <= 0 {
		t.Fatalf("target info %+v, %v", ti, err)
	}
}

// gateProbe is a limiter that counts the bytes it granted and the WaitN
// calls waiting in it.
type gateProbe struct {
	*throttle.Limiter
	granted atomic.Int64
	waiting atomic.Int32
}

func (g *gateProbe) WaitN(ctx context.Context, n int) error {
	g.waiting.Add(1)
	err := g.Limiter.WaitN(ctx, n)
	g.waiting.Add(-1)
	if err == nil {
		g.granted.Add(int64(n))
	}
	return err
}

// TestRateChangeMidSnapshot: the snapshot stream follows the limiter's rate
// as it changes: paused (rate 0) it moves nothing, raised it completes.
func TestRateChangeMidSnapshot(t *testing.T) {
	f := newFixture(t, 8)
	lim := throttle.NewLimiter(8<<20, 0)
	gate := &gateProbe{Limiter: lim}
	var done atomic.Int64
	var phase atomic.Value
	phase.Store(migration.PhasePending)
	env := migration.Env{
		Source: f.source, Target: f.target, Router: migration.DirectRouter{}, Limiter: gate,
		ProgressEvery: time.Nanosecond,
		Progress: func(p migration.Progress) {
			phase.Store(p.Phase)
			if p.Phase == migration.PhaseSnapshot {
				done.Store(p.BytesDone)
			}
		},
	}
	type result struct {
		rec migration.Record
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := migration.Run(context.Background(), migration.New("m1", "t1", "a", "b", migration.Live, time.Now()), env)
		res <- result{r, err}
	}()
	for done.Load() < 2<<20 {
		time.Sleep(time.Millisecond)
	}
	lim.SetRate(0)
	// Bytes earned before the pause may still pass, and chunks granted may
	// still land: wait until the stream waits at the limiter with nothing
	// granted since (it sends a chunk before asking for the next, so all it
	// was granted is sent), however long its disk or CPU stalls take.
	granted := gate.granted.Load()
	for still, deadline := 0, time.Now().Add(time.Minute); still < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("the stream never came to wait at the paused limiter (phase %v)", phase.Load())
		}
		time.Sleep(50 * time.Millisecond)
		if g := gate.granted.Load(); g != granted || gate.waiting.Load() == 0 {
			granted, still = g, 0
		} else {
			still++
		}
	}
	paused := done.Load() // reported by a 100 ms ticker: what was sent, or less
	time.Sleep(500 * time.Millisecond)
	if moved := gate.granted.Load() - granted; moved > 0 || gate.waiting.Load() == 0 || phase.Load() != migration.PhaseSnapshot {
		t.Fatalf("paused stream moved %d bytes (waiting at the limiter: %d; phase %v)", moved, gate.waiting.Load(), phase.Load())
	}
	lim.SetRate(math.Inf(1))
	r := <-res
	if r.err != nil || r.rec.Phase != migration.PhaseDone {
		t.Fatalf("Run: %v, %+v", r.err, r.rec)
	}
	if r.rec.SnapshotBytes <= paused {
		t.Fatalf("snapshot %d bytes, paused at %d", r.rec.SnapshotBytes, paused)
	}
	t.Logf("paused at %d of %d bytes", paused, r.rec.SnapshotBytes)
}

var _ migration.Router = switchThenDie{}
