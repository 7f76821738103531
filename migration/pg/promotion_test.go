package pg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

func TestWALFileName(t *testing.T) {
	for _, tc := range []struct {
		tli     uint32
		segno   uint64
		segSize uint64
		want    string
	}{
		{1, 1, 16 << 20, "000000010000000000000001"},
		{1, 255, 16 << 20, "0000000100000000000000FF"},
		{2, 256, 16 << 20, "000000020000000100000000"}, // 256 segments of 16 MiB per xlogid
		{0x1A, 0x1234, 64 << 20, "0000001A0000004800000034"},
		{3, 5, 1 << 20, "000000030000000000000005"},
	} {
		if got := WALFileName(tc.tli, tc.segno, tc.segSize); got != tc.want {
			t.Errorf("WALFileName(%d, %d, %d) = %s, want %s", tc.tli, tc.segno, tc.segSize, got, tc.want)
		}
	}
}

func TestNextTimeline(t *testing.T) {
	for _, tc := range []struct {
		tli   uint32
		names []string
		want  uint32
	}{
		{1, nil, 2},
		{3, []string{"000000030000000000000004", "00000002.history", "00000003.history", "archive_status"}, 4},
		// A history file of a newer timeline (another promotion's) wins,
		// as in PostgreSQL's findNewestTimeLine.
		{3, []string{"00000007.history", "0000000A.history.partial", "xyz.history"}, 8},
	} {
		if got := NextTimeline(tc.tli, tc.names); got != tc.want {
			t.Errorf("NextTimeline(%d, %v) = %d, want %d", tc.tli, tc.names, got, tc.want)
		}
	}
}

// TestCreateZeroSegmentKeepsExisting: a segment that exists (the server's
// own) is never replaced, and a created one is all zeros of the given size.
func TestCreateZeroSegmentKeepsExisting(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "000000020000000000000003")
	if err := os.WriteFile(own, []byte("the server's"), 0o600); err != nil {
		t.Fatal(err)
	}
	noChown := func(string) error { return nil }
	ctx := context.Background()
	if ok, err := createZeroSegment(ctx, dir, "000000020000000000000003", 1<<20, noChown); ok || err != nil {
		t.Fatalf("existing segment: created %t, err %v", ok, err)
	}
	if b, _ := os.ReadFile(own); string(b) != "the server's" {
		t.Fatalf("existing segment changed: %q", b)
	}
	if ok, err := createZeroSegment(ctx, dir, "000000020000000000000004", 3<<20+5, noChown); !ok || err != nil {
		t.Fatalf("new segment: created %t, err %v", ok, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "000000020000000000000004"))
	if err != nil || len(b) != 3<<20+5 {
		t.Fatalf("new segment: %d bytes, %v", len(b), err)
	}
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d is %d", i, c)
		}
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 2 {
		t.Fatalf("directory holds %d entries, want 2 (no temporary file left)", len(es))
	}
}

// TestPromotionSegments: PromotionBytes in whole segments, at least two.
func TestPromotionSegments(t *testing.T) {
	for _, c := range []struct{ seg, want uint64 }{{1 << 20, 32}, {16 << 20, 2}, {64 << 20, 2}, {3 << 20, 11}, {0, 2}} {
		if got := PromotionSegments(c.seg); got != c.want {
			t.Errorf("PromotionSegments(%d) = %d, want %d", c.seg, got, c.want)
		}
	}
}

// inodeRouter is a GateRouter that, when HANDOVER holds the tenant (right
// after PreparePromotion), records the inodes of the target's WAL segments.
type inodeRouter struct {
	*migration.GateRouter
	walDir func() string
	seen   map[string]uint64
}

var _ migration.Router = (*inodeRouter)(nil)

func (r *inodeRouter) Hold(ctx context.Context, tenant string, deadline time.Duration) ([]int, error) {
	es, _ := os.ReadDir(r.walDir())
	for _, e := range es {
		if fi, err := e.Info(); err == nil && len(e.Name()) == 24 {
			r.seen[e.Name()] = fi.Sys().(*syscall.Stat_t).Ino
		}
	}
	return r.GateRouter.Hold(ctx, tenant, deadline)
}

// TestPromotionUsesPreparedSegments: before the hold, the target standby
// gets the first segments of its new timeline, and the promoted server
// writes into them instead of creating its own.
func TestPromotionUsesPreparedSegments(t *testing.T) {
	f := newFixture(t, 8)
	var rec migration.Record // as runMigration makes it
	r := &inodeRouter{GateRouter: migration.NewGateRouter(f.src.Addr()), seen: map[string]uint64{},
		walDir: func() string { return filepath.Join(f.target.dirFor(rec), "pg_wal") }}
	w, stop := startWorkload(t, r.GateRouter)
	waitAcked(t, w, 200)
	out, err := runMigration(t, f, migration.Live, r, func(m *migration.Record) { rec = *m })
	stop()
	if err != nil {
		t.Fatalf("migration: %v", err)
	}
	verify(t, w, r.Addr())

	ctx := context.Background()
	c, err := pgx.Connect(ctx, connURL(r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var tli uint32
	var segSize uint64
	if err := c.QueryRow(ctx, "SELECT (SELECT timeline_id FROM pg_control_checkpoint()), (SELECT bytes_per_wal_segment FROM pg_control_init())").Scan(&tli, &segSize); err != nil {
		t.Fatal(err)
	}
	prepared := 0
	for name := range r.seen {
		if name[:8] == fmt.Sprintf("%08X", tli) {
			prepared++
		}
	}
	if want := PromotionSegments(segSize); uint64(prepared) < want {
		t.Fatalf("at the hold pg_wal held %d segments of %d bytes of timeline %d, want %d: %v", prepared, segSize, tli, want, r.seen)
	}
	// Into the next segment: it must be one of those prepared, the same file.
	if _, err := c.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE after_switch AS SELECT 1 AS x"); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_insert_lsn())").Scan(&name); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(out.TargetDir, "pg_wal", name))
	if err != nil {
		t.Fatal(err)
	}
	ino, ok := r.seen[name]
	if !ok || ino != fi.Sys().(*syscall.Stat_t).Ino {
		t.Fatalf("the promoted server writes %s (inode %d), not a segment prepared before the hold (%v)", name, fi.Sys().(*syscall.Stat_t).Ino, r.seen)
	}
}

// orderTarget is the LocalTarget, logging its Prewarm calls.
type orderTarget struct {
	*LocalTarget
	log *[]string
}

var _ migration.Target = orderTarget{}

func (t orderTarget) Prewarm(ctx context.Context, m migration.Record, blocks []migration.Block) error {
	if l := *t.log; len(l) == 0 || l[len(l)-1] != "prewarm" {
		*t.log = append(*t.log, "prewarm")
	}
	return t.LocalTarget.Prewarm(ctx, m, blocks)
}

// orderRouter is a GateRouter that prepares sessions, logging Prepare and
// Hold.
type orderRouter struct {
	*migration.GateRouter
	log *[]string
}

var _ migration.Router = orderRouter{}

func (r orderRouter) Prepare(ctx context.Context, tenant, addr string) error {
	*r.log = append(*r.log, "prepare")
	return nil
}

func (r orderRouter) Hold(ctx context.Context, tenant string, deadline time.Duration) ([]int, error) {
	*r.log = append(*r.log, "hold")
	return r.GateRouter.Hold(ctx, tenant, deadline)
}

// TestPrepareBeforeWarm: the target is readied for the switch (sessions
// prepared, WAL segments made) once, at the start of WARM, while the clients
// are still on the source — not just before the freeze.
func TestPrepareBeforeWarm(t *testing.T) {
	f := newFixture(t, 8)
	var log []string
	r := orderRouter{GateRouter: migration.NewGateRouter(f.src.Addr()), log: &log}
	w, stop := startWorkload(t, r.GateRouter)
	waitAcked(t, w, 200)
	rec := migration.New("m1", "t1", "a", "b", migration.Live, time.Now())
	env := migration.Env{Source: f.source, Target: orderTarget{LocalTarget: f.target, log: &log}, Router: r, Persist: func(migration.Record) error { return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := migration.Run(ctx, rec, env)
	stop()
	if err != nil || out.Phase != migration.PhaseDone {
		t.Fatalf("migration: %v (phase %s)", err, out.Phase)
	}
	verify(t, w, r.Addr())
	if want := []string{"prepare", "prewarm", "hold"}; !slices.Equal(log, want) {
		t.Fatalf("calls %v, want %v", log, want)
	}
	// WARM's connections (one per database, kept across batches) are closed
	// with the others when the migration commits.
	f.target.mu.Lock()
	defer f.target.mu.Unlock()
	if len(f.target.conns) != 0 {
		t.Fatalf("target still holds %d connections after the migration", len(f.target.conns))
	}
}
