package commands

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/migration/pg"
	"github.com/sluicedb/sluice/pgcluster"
)

// benchWarmOptions are bench warm's flags.
type benchWarmOptions struct {
	sizeMB   int
	sharedMB int
	hotMB    int
	memoryMB int
	workers  int
	readIOPS int64
	rounds   int
	warmup   time.Duration
	maxWait  time.Duration
	jsonOut  bool
	keep     bool
}

var benchWarmFlags benchWarmOptions

var benchWarmCmd = &cobra.Command{
	Use:   "warm",
	Short: "Throughput recovery after a live migration with WARM (buffer-cache block list prewarmed) vs without",
	Long: `Starts its own PostgreSQL 15 tenant with --shared-buffers MB of shared buffers and
about --size MB of data (several times the buffers), runs a read-mostly workload of
random primary-key lookups over a hot set of the first --hot MB of the table on
--workers connections, and live-migrates the tenant twice on this machine: first
without WARM (cold), then back with WARM (the source's pg_buffercache block list is
prewarmed on the target with pg_prewarm before the handover), --rounds times; the
medians are reported.

Every postmaster runs in a cgroup v1 group capped at --memory MB of memory (shared
buffers included) and --read-iops read operations per second on the data disk, and
the target's copied files are written back and dropped from the page cache
(fdatasync + POSIX_FADV_DONTNEED) before it starts, so a cold target really reads
from a disk of known speed.

Before each migration the workload runs --warmup to settle; its throughput over the
last 3 s is the baseline. Recovery is the time from the release of held
transactions until the throughput over a 0.5 s window is at least 90% of the
baseline (capped at --max-wait). Needs root and cgroup v1.`,
	Args: cobra.NoArgs,
	RunE: runBenchWarm,
}

func init() {
	f := benchWarmCmd.Flags()
	f.IntVar(&benchWarmFlags.sizeMB, "size", 512, "approximate tenant data, MB")
	f.IntVar(&benchWarmFlags.sharedMB, "shared-buffers", 128, "shared_buffers of the tenant, MB")
	f.IntVar(&benchWarmFlags.hotMB, "hot", 96, "hot set the workload reads, MB (should fit the shared buffers)")
	f.IntVar(&benchWarmFlags.memoryMB, "memory", 192, "cgroup memory cap of each postmaster, MB (shared buffers included)")
	f.IntVar(&benchWarmFlags.workers, "workers", 4, "client connections")
	f.Int64Var(&benchWarmFlags.readIOPS, "read-iops", 3000, "cgroup cap on each postmaster's read operations per second on the data disk (a cloud volume's baseline); 0 = none")
	f.DurationVar(&benchWarmFlags.warmup, "warmup", 20*time.Second, "workload time before each migration")
	f.IntVar(&benchWarmFlags.rounds, "rounds", 2, "rounds of (cold, warm) migrations; medians are reported")
	f.DurationVar(&benchWarmFlags.maxWait, "max-wait", 60*time.Second, "longest recovery measured")
	f.BoolVar(&benchWarmFlags.jsonOut, "json", false, "print results as JSON")
	f.BoolVar(&benchWarmFlags.keep, "keep", false, "keep the temp directory for inspection")
	benchCmd.AddCommand(benchWarmCmd)
}

// benchWarmResult is the JSON contract of `sluice bench warm --json`.
type benchWarmResult struct {
	RecoveryWarm float64 `json:"recovery_seconds_warm"`
	RecoveryCold float64 `json:"recovery_seconds_cold"`
}

// warmBucket is the width of one throughput bucket.
const warmBucket = 100 * time.Millisecond

func runBenchWarm(cmd *cobra.Command, _ []string) error {
	bf := benchWarmFlags
	if err := bf.check(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("bench warm: needs root (cgroup v1 memory groups)")
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench warm: "+format+"\n", args...)
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	wb := &warmBench{opt: bf, progress: progress}
	defer wb.close()
	if err := wb.start(ctx); err != nil {
		return err
	}
	stopReads := wb.startReads(ctx)
	defer stopReads()

	var colds, warms []float64
	for i := 0; i < 2*bf.rounds; i++ {
		recovery, err := wb.migrate(ctx, i)
		if err != nil {
			return err
		}
		if i%2 == 1 {
			warms = append(warms, recovery.Seconds())
		} else {
			colds = append(colds, recovery.Seconds())
		}
	}
	res := benchWarmResult{RecoveryWarm: migRound2(stats.Median(warms)), RecoveryCold: migRound2(stats.Median(colds))}
	if bf.jsonOut {
		return cli.WriteJSON(cmd.OutOrStdout(), res)
	}
	o := cmd.OutOrStdout()
	fmt.Fprintf(o, "recovery warm  %.2f s\n", res.RecoveryWarm)
	fmt.Fprintf(o, "recovery cold  %.2f s\n", res.RecoveryCold)
	return nil
}

// check reports the first bad flag.
func (bf benchWarmOptions) check() error {
	switch {
	case bf.sharedMB < 16:
		return cli.Usagef("bench warm: --shared-buffers must be at least 16 (MB)")
	case bf.sizeMB < 2*bf.sharedMB:
		return cli.Usagef("bench warm: --size must be at least twice --shared-buffers")
	case bf.hotMB < 1 || bf.hotMB > bf.sizeMB:
		return cli.Usagef("bench warm: --hot must be between 1 and --size")
	case bf.memoryMB <= bf.sharedMB:
		return cli.Usagef("bench warm: --memory must exceed --shared-buffers")
	case bf.workers < 1:
		return cli.Usagef("bench warm: --workers must be at least 1")
	case bf.warmup < 3*time.Second:
		return cli.Usagef("bench warm: --warmup must be at least 3s")
	case bf.rounds < 1:
		return cli.Usagef("bench warm: --rounds must be at least 1")
	case bf.readIOPS < 0:
		return cli.Usagef("bench warm: --read-iops must not be negative")
	case bf.maxWait < time.Second:
		return cli.Usagef("bench warm: --max-wait must be at least 1s")
	}
	return nil
}

// warmRowsPerMB is about how many rows of warmLoadData's table fill a MB.
const warmRowsPerMB = 4000

// warmBench is bench warm's setup: two hosts, the tenant on one of them,
// the cgroups its postmasters run in and the read workload's router.
type warmBench struct {
	opt      benchWarmOptions
	progress func(format string, args ...any)

	hosts  *migHosts       // hosts.current is the tenant
	dev    string          // the data disk's major:minor, for --read-iops
	groups []*cgroup.Group // every postmaster's, removed by close
	router *migration.GateRouter
	reads  *warmReadWorkload
}

// start makes the hosts, loads the tenant on the first and puts its
// postmaster in a group.
func (wb *warmBench) start(ctx context.Context) (err error) {
	bf := wb.opt
	if wb.hosts, err = newMigHosts("sluice-bench-warm-", bf.keep, wb.progress); err != nil {
		return err
	}
	if bf.readIOPS > 0 {
		if wb.dev, err = cgroup.DeviceOf(wb.hosts.dir); err != nil {
			return fmt.Errorf("bench warm: --read-iops: %w", err)
		}
	}
	c, err := wb.hosts.initTenant(ctx, map[string]string{"shared_buffers": fmt.Sprintf("%dMB", bf.sharedMB)}, 16)
	if err != nil {
		return err
	}
	wb.progress("loading about %d MB", bf.sizeMB)
	if err := warmLoadData(ctx, c, bf.sizeMB*warmRowsPerMB, float64(bf.hotMB)/float64(bf.sizeMB)); err != nil {
		return err
	}
	pid, err := c.PID()
	if err != nil {
		return err
	}
	return wb.newGroup(pid)
}

// newGroup puts process pid and its children in a new group capped at
// --memory and --read-iops.
func (wb *warmBench) newGroup(pid int) error {
	g, err := cgroup.New(fmt.Sprintf("sluice-warm-%d-%d", os.Getpid(), len(wb.groups)))
	if err != nil {
		return err
	}
	wb.groups = append(wb.groups, g)
	if err := g.SetMemoryLimit(int64(wb.opt.memoryMB) << 20); err != nil {
		return err
	}
	if wb.opt.readIOPS > 0 {
		if err := g.SetIOPSLimit(wb.dev, wb.opt.readIOPS, 0); err != nil {
			return err
		}
	}
	return g.AddTree(pid)
}

// startReads starts --workers readers of the hot set through a gate router
// and returns what stops them.
func (wb *warmBench) startReads(ctx context.Context) (stop func()) {
	wb.router = migration.NewGateRouter(wb.hosts.current.Addr())
	wb.reads = &warmReadWorkload{router: wb.router, hotRows: wb.opt.hotMB * warmRowsPerMB, start: time.Now(), buckets: make([]atomic.Int64, 1<<16)}
	wctx, stopW := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < wb.opt.workers; i++ {
		wg.Add(1)
		go func(seed int64) { defer wg.Done(); wb.reads.worker(wctx, seed) }(int64(i + 1))
	}
	return func() { stopW(); wg.Wait() }
}

// migrate runs migration i (0-based; odd ones with WARM) after --warmup of
// the workload, to the other host, and returns the workload's recovery
// time, --max-wait if it did not recover.
func (wb *warmBench) migrate(ctx context.Context, i int) (time.Duration, error) {
	bf, b := wb.opt, wb.hosts
	warm := i%2 == 1
	wb.progress("workload settling for %s on %s", bf.warmup, b.names[i%2])
	if err := clock.Sleep(ctx, bf.warmup); err != nil {
		return 0, err
	}
	now := time.Now()
	baseline := wb.reads.rate(now.Add(-3*time.Second), now)
	rec := migration.New(fmt.Sprintf("w%d", i+1), "bench", b.names[i%2], b.names[(i+1)%2], migration.Live, now)
	rec.Warm = warm
	tgt := warmColdTarget{LocalTarget: pg.NewLocalTarget(b.hosts[(i+1)%2], pgcluster.Options{}), group: wb.newGroup}
	out, err := b.migrate(ctx, rec, tgt, wb.router, fmt.Sprintf("bench warm: migration %d", i+1))
	if err != nil {
		return 0, err
	}
	recovery, ok := wb.reads.recovery(ctx, out.ReleasedAt, baseline, 0.9, 500*time.Millisecond, bf.maxWait)
	label := "cold"
	if warm {
		label = "warm"
	}
	note := ""
	if !ok {
		note = " (not recovered: capped at --max-wait)"
	}
	wb.progress("round %d %s migration %s→%s: baseline %.0f reads/s, freeze %.1f ms, warmed %d blocks, recovery %.2f s%s",
		i/2+1, label, rec.Source, rec.Target, baseline, float64(out.Freeze)/float64(time.Millisecond), out.WarmBlocks, recovery.Seconds(), note)
	return recovery, nil
}

// close stops the tenant and removes the hosts (migHosts.close), then the
// groups.
func (wb *warmBench) close() {
	if wb.hosts != nil {
		wb.hosts.close()
	}
	for _, g := range wb.groups {
		g.Remove()
	}
}

func migRound2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

// warmLoadData creates table data(id primary key, pad) with rows rows and
// loads the first hot fraction of the table and its index into shared buffers.
func warmLoadData(ctx context.Context, c *pgcluster.Cluster, rows int, hot float64) error {
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"CREATE TABLE data (id int PRIMARY KEY, pad text)",
		fmt.Sprintf("INSERT INTO data SELECT g, repeat(md5(g::text), 6) FROM generate_series(1, %d) g", rows),
		"VACUUM ANALYZE data",
		"CHECKPOINT",
		"CREATE EXTENSION IF NOT EXISTS pg_prewarm",
		fmt.Sprintf("SELECT pg_prewarm('data', 'buffer', 'main', 0, (pg_relation_size('data') / 8192 * %f)::int8)", hot),
		fmt.Sprintf("SELECT pg_prewarm('data_pkey', 'buffer', 'main', 0, (pg_relation_size('data_pkey') / 8192 * %f)::int8)", hot),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("load: %s: %w", q, err)
		}
	}
	return nil
}

// warmReadWorkload does random primary-key lookups in the hot set and counts
// completions per warmBucket since start.
type warmReadWorkload struct {
	router  *migration.GateRouter
	hotRows int
	start   time.Time
	buckets []atomic.Int64
}

func (r *warmReadWorkload) worker(ctx context.Context, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	var conn *pgx.Conn
	var connAddr string
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		addr, err := r.router.Enter(ctx)
		if err != nil {
			return
		}
		if conn != nil && (addr != connAddr || conn.IsClosed()) {
			conn.Close(context.Background())
			conn = nil
		}
		if conn == nil {
			c, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
			if err != nil {
				r.router.Leave()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			conn, connAddr = c, addr
		}
		var n int
		err = conn.QueryRow(ctx, "SELECT length(pad) FROM data WHERE id = $1", 1+rng.Intn(r.hotRows)).Scan(&n)
		r.router.Leave()
		if err != nil {
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if i := int(time.Since(r.start) / warmBucket); i < len(r.buckets) {
			r.buckets[i].Add(1)
		}
	}
}

// rate is the mean completions per second over whole buckets in [from, to).
func (r *warmReadWorkload) rate(from, to time.Time) float64 {
	a, b := int(from.Sub(r.start)/warmBucket), int(to.Sub(r.start)/warmBucket)
	if b <= a {
		return 0
	}
	var n int64
	for i := a; i < b && i < len(r.buckets); i++ {
		n += r.buckets[i].Load()
	}
	return float64(n) / (float64(b-a) * warmBucket.Seconds())
}

// recovery waits (as the workload runs) and returns the time from released
// until the first window of length win whose rate is ≥ frac×baseline; ok is
// false when that did not happen within maxWait.
func (r *warmReadWorkload) recovery(ctx context.Context, released time.Time, baseline, frac float64, win, maxWait time.Duration) (time.Duration, bool) {
	for t := released; t.Sub(released) <= maxWait; t = t.Add(warmBucket) {
		for time.Now().Before(t.Add(win + warmBucket)) {
			if clock.Sleep(ctx, warmBucket) != nil {
				return maxWait, false
			}
		}
		if r.rate(t, t.Add(win)) >= frac*baseline {
			return t.Sub(released), true
		}
	}
	return maxWait, false
}

// warmColdTarget is a LocalTarget whose received files are written back and
// dropped from the page cache, and whose postmaster runs in a memory cgroup.
type warmColdTarget struct {
	*pg.LocalTarget
	group func(pid int) error
}

var _ migration.Target = warmColdTarget{}

func (t warmColdTarget) OpenSnapshot(ctx context.Context, m migration.Record) (io.WriteCloser, error) {
	w, err := t.LocalTarget.OpenSnapshot(ctx, m)
	if err != nil {
		return nil, err
	}
	return warmEvictOnClose{w, m.TargetDir}, nil
}

func (t warmColdTarget) StartStandby(ctx context.Context, m migration.Record, ci, slot string) error {
	if err := t.LocalTarget.StartStandby(ctx, m, ci, slot); err != nil {
		return err
	}
	c, err := pgcluster.Open(m.TargetDir, pgcluster.Options{Port: m.TargetPort})
	if err != nil {
		return err
	}
	pid, err := c.PID()
	if err != nil {
		return err
	}
	return t.group(pid)
}

type warmEvictOnClose struct {
	io.WriteCloser
	dir string
}

func (e warmEvictOnClose) Close() error {
	if err := e.WriteCloser.Close(); err != nil {
		return err
	}
	return warmEvictDir(e.dir)
}

// warmEvictDir writes back and drops from the page cache every file under dir.
func warmEvictDir(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		unix.Fdatasync(int(f.Fd()))
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
}
