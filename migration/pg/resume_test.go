package pg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/throttle"
)

// TestResumeAfterInterruptedRun: a Run cancelled mid-migration (an agent
// killed) leaves a persisted record; a second Run resumes it to the end with
// nothing lost.
func TestResumeAfterInterruptedRun(t *testing.T) {
	f := newFixture(t, 2)
	g := migration.NewGateRouter(f.src.Addr())
	w, stop := startWorkload(t, g)
	waitAcked(t, w, 100)
	var saved migration.Record
	ctx, cancel := context.WithCancel(context.Background())
	env := migration.Env{
		Source: f.source, Target: f.target, Router: g,
		Persist: func(r migration.Record) error {
			saved = roundTrip(t, r)
			if r.Phase == migration.PhaseCatchUp && r.StandbyStarted {
				cancel() // the agent dies during CATCH-UP
			}
			return nil
		},
	}
	_, err := migration.Run(ctx, migration.New("m1", "t1", "a", "b", migration.Live, time.Now()), env)
	if !errors.Is(err, context.Canceled) || saved.Phase != migration.PhaseCatchUp {
		t.Fatalf("first Run: %v, saved phase %s", err, saved.Phase)
	}
	// A new agent: fresh Source and Target objects, the persisted record.
	f.source.Close()
	env.Source = NewLocalSource(f.src)
	env.Target = NewLocalTarget(f.root, pgcluster.Options{})
	env.Persist = func(r migration.Record) error { saved = r; return nil }
	rec, err := migration.Run(context.Background(), saved, env)
	if err != nil || rec.Phase != migration.PhaseDone || rec.Attempt != 2 {
		t.Fatalf("resumed Run: %v, %+v", err, rec)
	}
	waitAcked(t, w, 100)
	stop()
	verify(t, w, g.Addr())
}

// handoverBreakdown lists the handover steps of rec with their durations.
func handoverBreakdown(rec migration.Record) string {
	steps := []struct {
		name string
		at   time.Time
	}{{"fence", rec.FencedAt}, {"copy", rec.CopiedAt}, {"replay", rec.ReplayedAt}, {"promote", rec.PromotedAt}, {"switch", rec.SwitchedAt}, {"release", rec.ReleasedAt}}
	var b strings.Builder
	prev := rec.HeldAt
	for _, s := range steps {
		if s.at.IsZero() {
			continue
		}
		fmt.Fprintf(&b, "%s %s; ", s.name, s.at.Sub(prev))
		prev = s.at
	}
	return b.String()
}

// TestResumeMidHandoverRollsBack: an agent killed after fencing the source
// but before the route switch; the restarted agent (fresh Source and Target
// objects, the persisted record) rolls back: the fence is lifted, the target
// removed, the slot dropped, and the source serves every acknowledged write.
func TestResumeMidHandoverRollsBack(t *testing.T) {
	for _, fence := range []migration.FenceMode{migration.FenceReadOnly, migration.FenceStop} {
		t.Run(string(fence), func(t *testing.T) {
			f := newFixture(t, 2)
			g := migration.NewGateRouter(f.src.Addr())
			w, stop := startWorkload(t, g)
			waitAcked(t, w, 100)
			var saved migration.Record
			ctx, cancel := context.WithCancel(context.Background())
			env := migration.Env{
				Source: f.source, Target: f.target, Router: g,
				Persist: func(r migration.Record) error {
					saved = roundTrip(t, r)
					if !r.FencedAt.IsZero() {
						cancel() // the agent dies right after the fence
					}
					return nil
				},
			}
			rec := migration.New("m1", "t1", "a", "b", migration.Live, time.Now())
			rec.Fence = fence
			if _, err := migration.Run(ctx, rec, env); !errors.Is(err, context.Canceled) || saved.FencedAt.IsZero() {
				t.Fatalf("first Run: %v, saved %+v", err, saved)
			}
			f.source.Close()
			env.Source = NewLocalSource(f.src)
			env.Target = NewLocalTarget(f.root, pgcluster.Options{})
			env.Persist = func(r migration.Record) error { saved = r; return nil }
			out, err := migration.Run(context.Background(), saved, env)
			if !errors.Is(err, migration.ErrAborted) || out.Phase != migration.PhaseAborted || out.FailedIn != migration.PhaseHandover {
				t.Fatalf("resumed Run: %v, %+v", err, out)
			}
			waitAcked(t, w, 100) // the source takes writes again
			stop()
			verify(t, w, f.src.Addr())
			if _, err := os.Stat(out.TargetDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("target dir left: %v", err)
			}
			if _, err := os.Stat(filepath.Join(f.src.Dir, unfencedHBA)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("saved pg_hba.conf left behind: %v", err)
			}
		})
	}
}

// switchThenDie routes to the target and then "kills the agent" before the
// Switched event is recorded.
type switchThenDie struct {
	*migration.GateRouter
	cancel context.CancelFunc
}

func (s switchThenDie) Switch(ctx context.Context, tenant, addr string) error {
	err := s.GateRouter.Switch(ctx, tenant, addr)
	s.cancel()
	return err
}

// TestResumeAfterUnrecordedSwitch: the route switched but the agent died
// before recording it; the restarted agent rolls back and routes the tenant
// back to the source before releasing, so no client is sent to the removed
// target and nothing acknowledged is lost.
func TestResumeAfterUnrecordedSwitch(t *testing.T) {
	f := newFixture(t, 2)
	g := migration.NewGateRouter(f.src.Addr())
	w, stop := startWorkload(t, g)
	waitAcked(t, w, 100)
	var saved migration.Record
	ctx, cancel := context.WithCancel(context.Background())
	env := migration.Env{
		Source: f.source, Target: f.target, Router: switchThenDie{g, cancel},
		Persist: func(r migration.Record) error { saved = roundTrip(t, r); return nil },
	}
	if _, err := migration.Run(ctx, migration.New("m1", "t1", "a", "b", migration.Live, time.Now()), env); !errors.Is(err, context.Canceled) || saved.PromotedAt.IsZero() || saved.Switched() {
		t.Fatalf("first Run: %v, saved %+v", err, saved)
	}
	if g.Addr() == f.src.Addr() {
		t.Fatal("the route did not move")
	}
	env.Source, env.Target, env.Router = NewLocalSource(f.src), NewLocalTarget(f.root, pgcluster.Options{}), g
	out, err := migration.Run(context.Background(), saved, env)
	if !errors.Is(err, migration.ErrAborted) || out.Phase != migration.PhaseAborted {
		t.Fatalf("resumed Run: %v, %+v", err, out)
	}
	if g.Addr() != f.src.Addr() {
		t.Fatalf("route %s after rollback, want the source %s", g.Addr(), f.src.Addr())
	}
	waitAcked(t, w, 100)
	stop()
	verify(t, w, f.src.Addr())
}

// TestSlotLost: a slot whose WAL the source removed (beyond
// max_slot_wal_keep_size) is reported lost, and CATCH-UP fails on it at once.
func TestSlotLost(t *testing.T) {
	src := pgtest.New(t, pgcluster.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1MB", "max_wal_size": "32MB", "min_wal_size": "32MB"}})
	s := NewLocalSource(src)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateSlot(ctx, "sluice_lost"); err != nil {
		t.Fatal(err)
	}
	if st, err := s.SlotStatus(ctx, "sluice_lost"); err != nil || st != "reserved" {
		t.Fatalf("fresh slot status %q, %v", st, err)
	}
	// A reserved slot reports where it holds the WAL from (what a standby
	// streaming through it has received); a missing slot reports 0.
	flush, err := s.FlushLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.SlotRestartLSN(ctx, "sluice_lost"); err != nil || got == 0 || got > flush {
		t.Fatalf("fresh slot restart lsn %v (%v), want 0 < it <= the flush lsn %v", got, err, flush)
	}
	if got, err := s.SlotRestartLSN(ctx, "no_such_slot"); err != nil || got != 0 {
		t.Fatalf("missing slot restart lsn %v, %v; want 0", got, err)
	}
	for i := 0; i < 3; i++ {
		exec1(t, src.ConnString("postgres"), "SELECT pg_switch_wal()")
		exec1(t, src.ConnString("postgres"), "CREATE TABLE IF NOT EXISTS w AS SELECT 1 AS x")
	}
	exec1(t, src.ConnString("postgres"), "CHECKPOINT")
	st, err := s.SlotStatus(ctx, "sluice_lost")
	if err != nil || st != "lost" {
		t.Fatalf("slot status after WAL removal %q, %v", st, err)
	}
	if st, err := s.SlotStatus(ctx, "no_such_slot"); err != nil || st != "" {
		t.Fatalf("missing slot status %q, %v", st, err)
	}
}

// TestResumeMidSnapshot: an agent killed while the snapshot streams; the
// restarted agent discards the partial copy and the slot, starts again on a
// fresh directory and a fresh slot, and completes with nothing lost.
func TestResumeMidSnapshot(t *testing.T) {
	f := newFixture(t, 8)
	g := migration.NewGateRouter(f.src.Addr())
	w, stop := startWorkload(t, g)
	waitAcked(t, w, 100)
	var saved migration.Record
	ctx, cancel := context.WithCancel(context.Background())
	env := migration.Env{
		Source: f.source, Target: f.target, Router: g,
		Limiter:       throttle.NewLimiter(8<<20, 0),
		ProgressEvery: time.Nanosecond,
		Progress: func(p migration.Progress) {
			if p.Phase == migration.PhaseSnapshot && p.BytesDone > 2<<20 {
				cancel() // the agent dies mid-stream
			}
		},
		Persist: func(r migration.Record) error { saved = roundTrip(t, r); return nil },
	}
	if _, err := migration.Run(ctx, migration.New("m1", "t1", "a", "b", migration.Live, time.Now()), env); !errors.Is(err, context.Canceled) || saved.Phase != migration.PhaseSnapshot {
		t.Fatalf("first Run: %v, saved phase %s", err, saved.Phase)
	}
	firstSlotLSN := saved.SlotLSN
	f.source.Close()
	env.Source, env.Target, env.Limiter, env.Progress = NewLocalSource(f.src), NewLocalTarget(f.root, pgcluster.Options{}), nil, nil
	var phases []migration.Phase
	env.Persist = func(r migration.Record) error {
		if len(phases) == 0 || phases[len(phases)-1] != r.Phase {
			phases = append(phases, r.Phase)
		}
		return nil
	}
	rec, err := migration.Run(context.Background(), saved, env)
	if err != nil || rec.Phase != migration.PhaseDone {
		t.Fatalf("resumed Run: %v, %+v", err, rec)
	}
	if len(phases) < 2 || phases[0] != migration.PhaseSnapshot || phases[1] != migration.PhasePrepare || rec.SlotLSN <= firstSlotLSN {
		t.Fatalf("resume did not restart from a fresh slot: phases %v, slot LSN %s then %s", phases, firstSlotLSN, rec.SlotLSN)
	}
	waitAcked(t, w, 100)
	stop()
	verify(t, w, g.Addr())
}

// TestRetireGrace: with a grace period, Retire stops the source and renames
// its directory, dropping the copy's page cache (when the file system keeps
// one); RemoveRetired removes it once the grace has passed, not before.
func TestRetireGrace(t *testing.T) {
	f := newFixture(t, 8)
	ctx := context.Background()
	var rel string
	dir := f.src.Dir
	c, err := pgx.Connect(ctx, f.src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT pg_relation_filepath('filler')").Scan(&rel); err != nil {
		t.Fatal(err)
	}
	c.Exec(ctx, "SELECT count(*) FROM filler") // read it: its pages are cached
	c.Close(ctx)
	cachedBefore := residentPages(t, filepath.Join(dir, rel))
	f.source.RetireGrace = time.Hour
	f.source.cacheDropAfter = 10 * time.Millisecond
	unix.Sync() // the kernel's own writeback, which Retire waits for, done now
	if err := f.source.Retire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("retired directory still at %s (%v)", dir, err)
	}
	ms, _ := filepath.Glob(dir + ".retired-*")
	if len(ms) != 1 {
		t.Fatalf("retired copies %v, want one", ms)
	}
	after := residentPages(t, filepath.Join(ms[0], rel))
	for deadline := time.Now().Add(10 * time.Second); cachedBefore > 0 && after*4 > cachedBefore && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		after = residentPages(t, filepath.Join(ms[0], rel))
	}
	if cachedBefore > 0 && after*4 > cachedBefore {
		t.Errorf("retired copy's page cache not dropped: %d of its pages resident (%d before)", after, cachedBefore)
	} else {
		t.Logf("filler pages resident: %d before retire, %d after", cachedBefore, after)
	}
	if err := RemoveRetired(dir, time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ms[0]); err != nil {
		t.Fatalf("RemoveRetired removed a copy within its grace: %v", err)
	}
	if err := RemoveRetired(dir, time.Hour, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ms[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("RemoveRetired left %s after its grace (%v)", ms[0], err)
	}
}

// TestRetirePurges: without a grace period, Retire stops the source and
// renames its directory at once, and the copy is purged in the background
// after the purge delay (PurgeDelay, here shortened), not inside Retire.
func TestRetirePurges(t *testing.T) {
	f := newFixture(t, 8)
	dir := f.src.Dir
	f.source.RetireGrace = 0
	f.source.purgeAfter = 300 * time.Millisecond
	if err := f.source.Retire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("retired directory still at %s (%v)", dir, err)
	}
	ms, _ := filepath.Glob(dir + ".retired-*")
	if len(ms) != 1 {
		t.Fatalf("retired copies right after Retire %v, want one (the purge is not due yet)", ms)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(ms[0]); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	t.Fatalf("%s not purged within 30 s", ms[0])
}

// residentPages counts the pages of file path in the page cache (mincore).
func residentPages(t *testing.T, path string) int {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || st.Size() == 0 {
		t.Fatalf("stat %s: %v (size %d)", path, err, st.Size())
	}
	m, err := unix.Mmap(int(fh.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
