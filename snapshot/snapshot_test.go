package snapshot

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/throttle"
	"github.com/sluicedb/sluice/transfer"
)

var _ transfer.Limiter = (*throttle.Limiter)(nil)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

const slotName = "sluice_snap"

// writer inserts rows with increasing ids into ledger and records the ids
// whose commit was acknowledged.
type writer struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	acked []int64
	err   error
}

func startWriter(t *testing.T, ctx context.Context, src *pgcluster.Cluster) *writer {
	t.Helper()
	conn, err := pgx.Connect(ctx, src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		for id := int64(1); ; id++ {
			select {
			case <-w.stop:
				return
			default:
			}
			if _, err := conn.Exec(ctx, "INSERT INTO ledger(id, pad) VALUES ($1, repeat('w', 100))", id); err != nil {
				w.mu.Lock()
				w.err = fmt.Errorf("insert %d: %w", id, err)
				w.mu.Unlock()
				return
			}
			w.mu.Lock()
			w.acked = append(w.acked, id)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) finish(t *testing.T) []int64 {
	t.Helper()
	close(w.stop)
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
	return w.acked
}

func exec(t *testing.T, ctx context.Context, c *pgcluster.Cluster, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := poll(what, cond); err != nil {
		t.Fatal(err)
	}
}

// poll waits until cond holds; its deadline guards against a hang only.
func poll(what string, cond func() bool) error {
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// source starts a cluster with a filler table, an unlogged table, the
// ledger, and the replication slot (created before the snapshot, as the
// migration does).
func source(t *testing.T, ctx context.Context) *pgcluster.Cluster {
	src := pgtest.New(t, pgcluster.Options{})
	exec(t, ctx, src, `CREATE TABLE ledger(id bigint NOT NULL, pad text);
		CREATE TABLE filler AS SELECT g AS id, repeat(md5(g::text), 6) AS pad FROM generate_series(1, 100000) g;
		CREATE UNLOGGED TABLE scratch AS SELECT g FROM generate_series(1, 1000) g;
		CHECKPOINT`)
	exec(t, ctx, src, "SELECT pg_create_physical_replication_slot($1, true)", slotName)
	return src
}

// copyOver streams a snapshot of src over loopback TCP into a new directory
// and returns it with both sides' results.
func copyOver(t *testing.T, ctx context.Context, src *pgcluster.Cluster, opts SendOptions, rprog *Progress) (string, Result, Result) {
	t.Helper()
	dest := filepath.Join(pgtest.TempDir(t), "data")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type recv struct {
		res Result
		err error
	}
	rc := make(chan recv, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			rc <- recv{err: err}
			return
		}
		defer c.Close()
		res, err := Receive(ctx, c, dest, ReceiveOptions{Fsync: false, Progress: rprog})
		rc <- recv{res, err}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sres, serr := Send(ctx, src, c, opts)
	c.Close()
	r := <-rc
	if serr != nil || r.err != nil {
		t.Fatalf("send: %v; receive: %v", serr, r.err)
	}
	return dest, sres, r.res
}

// standby configures dest as a streaming standby of src on the slot, starts
// it, and waits until it has replayed src's flush position after the writer
// stops. It returns the acknowledged ids.
func standby(t *testing.T, ctx context.Context, src *pgcluster.Cluster, dest string, w *writer) (*pgcluster.Cluster, []int64) {
	t.Helper()
	port, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := pgcluster.Open(dest, pgcluster.Options{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	err = sb.Configure(map[string]string{
		"primary_conninfo":  fmt.Sprintf("host=%s port=%d user=postgres application_name=sluice_test", src.Host, src.Port),
		"primary_slot_name": slotName,
		"fsync":             "off",
		"full_page_writes":  "on",
		"max_connections":   "100",
		"shared_buffers":    "32MB",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile("standby.signal", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb.Stop(ctx, pgcluster.Immediate)
	})
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Let writes continue while the standby streams, then stop them.
	n := w.count()
	waitFor(t, "more writes after the standby started", func() bool { return w.count() > n+50 })
	acked := w.finish(t)

	sconn, err := pgx.Connect(ctx, src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(context.Background())
	var flush string
	if err := sconn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&flush); err != nil {
		t.Fatal(err)
	}
	tconn, err := pgx.Connect(ctx, sb.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer tconn.Close(context.Background())
	waitFor(t, "standby to replay "+flush, func() bool {
		var ok *bool
		if err := tconn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", flush).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok != nil && *ok
	})
	var inRecovery bool
	if err := tconn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		t.Fatalf("standby in recovery = %v, %v; want a standby", inRecovery, err)
	}
	return sb, acked
}

// verify checks row by row that every acknowledged id is on the standby
// exactly once and nothing else is, and that the filler table is intact.
func verify(t *testing.T, ctx context.Context, sb *pgcluster.Cluster, acked []int64) {
	t.Helper()
	conn, err := pgx.Connect(ctx, sb.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT id FROM ledger")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int64]int, len(acked))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		seen[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range acked {
		switch seen[id] {
		case 1:
		case 0:
			t.Errorf("acknowledged id %d missing on the standby", id)
		default:
			t.Errorf("acknowledged id %d on the standby %d times", id, seen[id])
		}
		delete(seen, id)
	}
	for id := range seen {
		t.Errorf("id %d on the standby was never acknowledged", id)
	}
	var n, sum int64
	if err := conn.QueryRow(ctx, "SELECT count(*), sum(id) FROM filler WHERE pad = repeat(md5(id::text), 6)").Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 100000 || sum != 100000*100001/2 {
		t.Errorf("filler on the standby: %d intact rows (sum %d), want 100000", n, sum)
	}
	t.Logf("verified %d acknowledged rows on the standby", len(acked))
}

func TestSnapshotUnderWritesYieldsStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	src := source(t, ctx)
	w := startWriter(t, ctx, src)
	waitFor(t, "first writes", func() bool { return w.count() > 100 })

	sprog, rprog := new(Progress), new(Progress)
	dest, sres, rres := copyOver(t, ctx, src, SendOptions{Label: "test", ReadAhead: 8 << 20, Progress: sprog}, rprog)
	if sres.Bytes != rres.Bytes || sres.Files != rres.Files || sres.Bytes < 10<<20 {
		t.Fatalf("sent %d files/%d bytes, received %d/%d", sres.Files, sres.Bytes, rres.Files, rres.Bytes)
	}
	if sprog.Phase() != PhaseDone || rprog.Phase() != PhaseDone {
		t.Fatalf("phases: send %q, receive %q", sprog.Phase(), rprog.Phase())
	}
	if sres.HighWater > 8<<20 {
		t.Fatalf("read-ahead high water %d exceeds the 8 MiB cap", sres.HighWater)
	}
	label, err := os.ReadFile(filepath.Join(dest, "backup_label"))
	if err != nil || string(label) != sres.BackupLabel || !strings.Contains(string(label), "LABEL: test") {
		t.Fatalf("backup_label on target = %q, %v; want pg_backup_stop's %q", label, err, sres.BackupLabel)
	}
	for _, gone := range []string{"postmaster.pid", "pg_replslot/" + slotName} {
		if _, err := os.Stat(filepath.Join(dest, gone)); err == nil {
			t.Errorf("%s was copied", gone)
		}
	}
	if des, err := os.ReadDir(filepath.Join(dest, "pg_wal")); err != nil || len(des) != 1 || des[0].Name() != "archive_status" {
		t.Errorf("pg_wal on target: %v, %v; want only archive_status", des, err)
	}
	t.Logf("snapshot: %d files, %d bytes, start %s stop %s, %v", sres.Files, sres.Bytes, sres.StartLSN, sres.StopLSN, sres.Duration)

	sb, acked := standby(t, ctx, src, dest, w)
	verify(t, ctx, sb, acked)
}

// TestSnapshotPausedAndResumed starts the snapshot with the send rate at 0:
// nothing is sent while it is paused however long it waits, while the reader
// fills the read-ahead buffer; then the rate is raised, paused again, and
// released, and the result is still a valid standby.
func TestSnapshotPausedAndResumed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	src := source(t, ctx)
	w := startWriter(t, ctx, src)
	waitFor(t, "first writes", func() bool { return w.count() > 100 })

	lim := throttle.NewLimiter(0, 0)
	const readAhead = 4 << 20
	prog := new(Progress)
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		defer lim.SetRate(math.Inf(1)) // never leave the copy paused
		// Large files go first (sendOrder): the reader may fill the buffer
		// before it has finished one file.
		if err := poll("reader to fill the buffer while paused", func() bool { return prog.Buffered.Load() >= readAhead/2 }); err != nil {
			errc <- err
			return
		}
		if s := prog.Snapshot(); s.BytesSent != 0 || s.Buffered > readAhead {
			errc <- fmt.Errorf("while paused from the start: %+v; want nothing sent, buffer within %d", s, readAhead)
		}
		lim.SetRate(8 << 20)
		if err := poll("some bytes sent", func() bool { return prog.BytesSent.Load() > 2<<20 }); err != nil {
			errc <- err
			return
		}
		lim.SetRate(0)
		time.Sleep(300 * time.Millisecond) // writes go on while the copy is paused
		lim.SetRate(math.Inf(1))
	}()
	dest, sres, _ := copyOver(t, ctx, src, SendOptions{Limiter: lim, ReadAhead: readAhead, Progress: prog}, nil)
	for err := range errc {
		t.Fatal(err)
	}
	if sres.HighWater > readAhead {
		t.Fatalf("read-ahead high water %d exceeds the cap %d", sres.HighWater, readAhead)
	}
	sb, acked := standby(t, ctx, src, dest, w)
	verify(t, ctx, sb, acked)
}

// TestSendErrorAbortsBackup kills the stream mid-copy: Send fails, its
// backup session is closed (which aborts the backup), and a new snapshot works.
func TestSendErrorAbortsBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := source(t, ctx)
	c, s := net.Pipe()
	go func() {
		buf := make([]byte, 1<<20)
		s.Read(buf) // take a little, then hang up
		s.Close()
	}()
	_, err := Send(ctx, src, c, SendOptions{})
	if err == nil {
		t.Fatal("Send succeeded into a closed connection")
	}
	backupSessionGone(t, ctx, src)
	// The source is unharmed: a second Send of the whole cluster succeeds.
	var sink discard
	if _, err := Send(ctx, src, &sink, SendOptions{}); err != nil {
		t.Fatalf("second Send after an aborted one: %v", err)
	}
	if sink.n < 10<<20 {
		t.Fatalf("second Send wrote only %d bytes", sink.n)
	}
}

type discard struct{ n int64 }

func (d *discard) Write(b []byte) (int, error) { d.n += int64(len(b)); return len(b), nil }

func TestReceiveRejectsStreamWithoutBackupLabel(t *testing.T) {
	root := t.TempDir()
	mkTree(t, root, "global/pg_control", "pg_wal/")
	entries, err := transfer.Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, s := net.Pipe()
	go func() {
		transfer.Send(context.Background(), c, root, entries, transfer.SendOptions{})
		c.Close()
	}()
	_, err = Receive(context.Background(), s, filepath.Join(t.TempDir(), "d"), ReceiveOptions{})
	if err == nil || !strings.Contains(err.Error(), "no backup_label") {
		t.Fatalf("Receive = %v, want missing backup_label", err)
	}
}

// TestTablespaceRefusedAndReceiverTold: a cluster with a tablespace is
// refused before anything is copied, the backup is aborted, and the receiver
// reports the sender's reason.
func TestTablespaceRefusedAndReceiverTold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := pgtest.New(t, pgcluster.Options{})
	loc := pgtest.TempDir(t)
	exec(t, ctx, src, fmt.Sprintf("CREATE TABLESPACE ts LOCATION '%s'", loc))
	c, s := net.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := Receive(ctx, s, filepath.Join(pgtest.TempDir(t), "data"), ReceiveOptions{})
		errc <- err
	}()
	_, err := Send(ctx, src, c, SendOptions{})
	c.Close()
	if !errors.Is(err, ErrTablespaces) {
		t.Fatalf("Send = %v, want ErrTablespaces", err)
	}
	if rerr := <-errc; !errors.Is(rerr, transfer.ErrAborted) || !strings.Contains(rerr.Error(), "tablespaces") {
		t.Fatalf("Receive = %v, want the sender's abort naming tablespaces", rerr)
	}
	backupSessionGone(t, ctx, src)
}

// backupSessionGone waits until no session of src has run pg_backup_start:
// the backup session was closed, which aborts its backup.
func backupSessionGone(t *testing.T, ctx context.Context, src *pgcluster.Cluster) {
	t.Helper()
	conn, err := pgx.Connect(ctx, src.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	waitFor(t, "the backup session to end", func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_backup_start%' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// lastCheckpointStart returns the last "checkpoint starting: ..." line of
// c's server log, "" if none.
func lastCheckpointStart(c *pgcluster.Cluster) string {
	var last string
	for _, l := range strings.Split(c.LogTail(200), "\n") {
		if i := strings.Index(l, "checkpoint starting: "); i >= 0 {
			last = l[i:]
		}
	}
	return last
}

// A paced checkpoint is requested without "immediate" and under the
// transient settings, which are gone when Send returns: without them a
// spread checkpoint would take checkpoint_completion_target ×
// checkpoint_timeout (4.5 minutes), past this test's deadline. A pace set
// against ALTER SYSTEM's checkpoint settings falls back to a fast
// checkpoint and says so; a transient file left behind is removed by the
// next Send; a bad pace changes nothing.
func TestCheckpointPace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := source(t, ctx)
	transient := filepath.Join(src.Dir, pgcluster.TransientConf)
	dirty := func() { exec(t, ctx, src, "UPDATE filler SET pad = pad WHERE id % 7 = 0") }

	dirty()
	var sink discard
	var started []Result
	res, err := Send(ctx, src, &sink, SendOptions{CheckpointPace: 2 * time.Second, Started: func(r Result) { started = append(started, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint != "paced 2s" {
		t.Errorf("Result.Checkpoint = %q, want paced 2s", res.Checkpoint)
	}
	if len(started) != 1 || started[0].Checkpoint != res.Checkpoint || started[0].StartLSN != res.StartLSN || started[0].Bytes != 0 {
		t.Errorf("Started called with %+v, want once, before the copy, with the start's figures of %+v", started, res)
	}
	if l := lastCheckpointStart(src); l != "checkpoint starting: force wait" {
		t.Errorf("the backup's checkpoint: %q, want a forced, waited, not immediate one", l)
	}
	if _, err := os.Stat(transient); !os.IsNotExist(err) {
		t.Errorf("%s after Send: %v, want it removed", pgcluster.TransientConf, err)
	}
	t.Logf("paced: pg_backup_start took %v; %s", res.StartDuration.Round(time.Millisecond), lastLine(src, "checkpoint complete"))

	// Unpaced: fast, as before.
	dirty()
	if res, err = Send(ctx, src, &sink, SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if l := lastCheckpointStart(src); res.Checkpoint != "fast" || l != "checkpoint starting: immediate force wait" {
		t.Errorf("unpaced: Result.Checkpoint %q, log %q; want fast, immediate", res.Checkpoint, l)
	}

	// A leftover transient file (a paced Send's process died) is removed.
	if err := src.SetTransient(checkpointSettings(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err = Send(ctx, src, &sink, SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(transient); !os.IsNotExist(err) {
		t.Errorf("leftover %s after an unpaced Send: %v, want it removed", pgcluster.TransientConf, err)
	}

	// ALTER SYSTEM's checkpoint_timeout wins over the transient file: fast.
	exec(t, ctx, src, "ALTER SYSTEM SET checkpoint_timeout = '10min'")
	exec(t, ctx, src, "SELECT pg_reload_conf()")
	waitFor(t, "the reload", func() bool { return strings.Contains(showSetting(t, ctx, src, "checkpoint_timeout"), "10min") })
	dirty()
	if res, err = Send(ctx, src, &sink, SendOptions{CheckpointPace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if l := lastCheckpointStart(src); !strings.HasPrefix(res.Checkpoint, "fast (") || l != "checkpoint starting: immediate force wait" {
		t.Errorf("pace against ALTER SYSTEM: Result.Checkpoint %q, log %q; want a fast one that says why", res.Checkpoint, l)
	}
	if _, err := os.Stat(transient); !os.IsNotExist(err) {
		t.Errorf("%s after a pace that could not apply: %v", pgcluster.TransientConf, err)
	}

	// Bad options: an error, and no backup started.
	for _, o := range []SendOptions{{CheckpointPace: MaxCheckpointPace + time.Second}, {CheckpointPace: -time.Second}, {CheckpointPace: time.Second, SpreadCheckpoint: true}} {
		before := lastCheckpointStart(src)
		if _, err := Send(ctx, src, &sink, o); err == nil {
			t.Errorf("Send(%+v) succeeded", o)
		}
		if after := lastCheckpointStart(src); after != before {
			t.Errorf("Send(%+v) checkpointed", o)
		}
	}
}

// lastLine returns the last line of c's server log that contains s.
func lastLine(c *pgcluster.Cluster, s string) string {
	var last string
	for _, l := range strings.Split(c.LogTail(200), "\n") {
		if strings.Contains(l, s) {
			last = l
		}
	}
	return last
}

func showSetting(t *testing.T, ctx context.Context, c *pgcluster.Cluster, name string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseCheckpoint(t *testing.T) {
	for _, c := range []struct {
		in     string
		spread bool
		pace   time.Duration
		bad    bool
	}{
		{in: "fast"}, {in: "spread", spread: true}, {in: "3s", pace: 3 * time.Second}, {in: " 500ms ", pace: 500 * time.Millisecond},
		{in: "27s", pace: 27 * time.Second}, {in: "28s", bad: true}, {in: "0s", bad: true}, {in: "-1s", bad: true}, {in: "slow", bad: true}, {in: "", bad: true},
	} {
		spread, pace, err := ParseCheckpoint(c.in)
		if (err != nil) != c.bad || spread != c.spread || pace != c.pace {
			t.Errorf("ParseCheckpoint(%q) = %v, %v, %v", c.in, spread, pace, err)
		}
	}
}
