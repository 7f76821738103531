package commands

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/snapshot"
)

// benchSnapshotOptions are bench snapshot's flags.
type benchSnapshotOptions struct {
	sizeMB  int
	reps    int
	jsonOut bool
	out     string
	keep    bool
	cpuprof string
}

var benchSnapshotFlags benchSnapshotOptions

var benchSnapshotCmd = &cobra.Command{
	Use:   "snapshot",
	Short: "Unthrottled hot snapshot vs tar over TCP vs pg_basebackup, same tenant, one run",
	Long: `Starts its own PostgreSQL 15 cluster in a temp directory, loads a pgbench tenant
of about --size MB (pgbench -i, server-side generation), CHECKPOINTs, and then
copies its data directory three ways, each into a fresh temp directory on the same
disk over loopback TCP:

  sluice         snapshot.Send → snapshot.Receive (pg_backup_start/stop, per-file
                 CRC-32C verified, no limiter)
  tar            tar c of exactly the files sluice copies | TCP | tar x (two tar processes)
  pg_basebackup  pg_basebackup -X none -c fast --no-sync (plain format)

One untimed warm-up pass of each method runs first so all see the same page-cache
state; then --reps rounds of the three, interleaved, each round starting with the
next method so that none always runs first. sync(2) runs (untimed) after every
copy so dirty pages of one run do not slow the next. No method fsyncs.
Rates are the bytes of file data sluice copied divided by each method's wall time,
in MB/s (10^6 bytes); the median round is reported.

CPU: every copy's CPU time is measured in two parts, the client (this process for
sluice — both its sender and its receiver —, the two tar processes, the
pg_basebackup client) and the server (every process of the PostgreSQL cluster,
from /proc: for pg_basebackup the walsender that reads and sends the files,
for all methods the checkpoint of the backup start). The result gives the median
of client+server per GB (10^9 bytes) for each method: unlike the rates, CPU
time is only mildly affected by other load on the machine. The 1-minute load
average before and after the rounds is reported too.`,
	Args: cobra.NoArgs,
	RunE: runBenchSnapshot,
}

func init() {
	f := benchSnapshotCmd.Flags()
	f.IntVar(&benchSnapshotFlags.sizeMB, "size", 1024, "approximate tenant size, MB")
	f.IntVar(&benchSnapshotFlags.reps, "reps", 3, "timed rounds of the three methods; the median is reported")
	f.BoolVar(&benchSnapshotFlags.jsonOut, "json", false, "print results as JSON")
	f.StringVar(&benchSnapshotFlags.out, "out", "", "also write the JSON result to this file")
	f.BoolVar(&benchSnapshotFlags.keep, "keep", false, "keep the temp directory for inspection")
	f.StringVar(&benchSnapshotFlags.cpuprof, "cpuprofile", "", "write a CPU profile of this process (sluice's side of every copy) to this file")
	benchCmd.AddCommand(benchSnapshotCmd)
}

// benchSnapshotResult is the JSON contract of `sluice bench snapshot --json`.
type benchSnapshotResult struct {
	Bytes           int64   `json:"bytes"`
	SluiceMBs       float64 `json:"sluice_mb_s"`
	TarMBs          float64 `json:"tar_mb_s"`
	PgBasebackupMBs float64 `json:"pg_basebackup_mb_s"`
	// CPU seconds (client + PostgreSQL server) per 10^9 bytes copied, median round.
	SluiceCPUPerGB       float64 `json:"sluice_cpu_s_per_gb"`
	TarCPUPerGB          float64 `json:"tar_cpu_s_per_gb"`
	PgBasebackupCPUPerGB float64 `json:"pg_basebackup_cpu_s_per_gb"`
	// 1-minute load average before the first and after the last round.
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`
}

// pgbenchMBPerScale is the approximate on-disk size of one pgbench scale
// unit (100 000 accounts rows with their primary key), MB.
const pgbenchMBPerScale = 15

func runBenchSnapshot(cmd *cobra.Command, _ []string) error {
	bf := benchSnapshotFlags
	if err := bf.check(); err != nil {
		return err
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench snapshot: "+format+"\n", args...)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()

	dir, done, err := benchDir("snapshot", bf.keep, progress)
	if err != nil {
		return err
	}
	defer done()

	progress("initdb and start PostgreSQL")
	src, err := pgcluster.Init(ctx, filepath.Join(dir, "src"), pgcluster.Options{
		Settings: map[string]string{"shared_buffers": "128MB", "max_wal_size": "4GB", "synchronous_commit": "off"},
	})
	if err != nil {
		return err
	}
	if err := src.Start(ctx); err != nil {
		return err
	}
	defer src.Stop(context.Background(), pgcluster.Fast)
	scale, err := loadSnapshotSource(ctx, src, bf.sizeMB, progress)
	if err != nil {
		return err
	}

	stopProfile, err := startCPUProfile(bf.cpuprof)
	if err != nil {
		return err
	}
	defer stopProfile()
	loadBefore := loadAvg1()
	rounds, err := measureSnapshots(ctx, src, dir, bf.reps, progress)
	if err != nil {
		return err
	}
	res := rounds.result(loadBefore, loadAvg1())
	if bf.out != "" {
		if err := writeSnapshotResult(bf.out, res); err != nil {
			return err
		}
	}
	if bf.jsonOut {
		return cli.WriteJSON(cmd.OutOrStdout(), res)
	}
	printBenchSnapshot(cmd.OutOrStdout(), res, scale, bf.reps)
	return nil
}

// check reports the first bad flag, or a missing program.
func (bf benchSnapshotOptions) check() error {
	if bf.sizeMB < 16 {
		return cli.Usagef("bench snapshot: --size must be at least 16 (MB)")
	}
	if bf.reps < 1 {
		return cli.Usagef("bench snapshot: --reps must be positive")
	}
	for _, bin := range []string{filepath.Join(pgcluster.DefaultBinDir, "pgbench"), filepath.Join(pgcluster.DefaultBinDir, "pg_basebackup")} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("bench snapshot: %w", err)
		}
	}
	if _, err := exec.LookPath("tar"); err != nil {
		return fmt.Errorf("bench snapshot: %w", err)
	}
	return nil
}

// loadSnapshotSource loads a pgbench tenant of about sizeMB into src and
// CHECKPOINTs, and returns its pgbench scale.
func loadSnapshotSource(ctx context.Context, src *pgcluster.Cluster, sizeMB int, progress func(string, ...any)) (int, error) {
	scale := max(1, (sizeMB-30)/pgbenchMBPerScale)
	progress("pgbench -i -s %d (about %d MB)", scale, sizeMB)
	t0 := time.Now()
	host, port, _ := net.SplitHostPort(src.Addr())
	pgb, err := src.Command(ctx, "pgbench", "-i", "-q", "-I", "dtGvp", "-s", strconv.Itoa(scale), "-h", host, "-p", port, "-U", "postgres", "postgres")
	if err != nil {
		return 0, err
	}
	if out, err := pgb.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("bench snapshot: pgbench -i: %w\n%s", err, out)
	}
	if out, err := src.Run(ctx, "psql", "-X", "-q", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres", "-c", "CHECKPOINT"); err != nil {
		return 0, fmt.Errorf("bench snapshot: checkpoint: %w\n%s", err, out)
	}
	progress("loaded in %v", time.Since(t0).Round(time.Second))
	return scale, nil
}

// startCPUProfile starts a CPU profile of this process into path, if set,
// and returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench snapshot: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench snapshot: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// snapshotMethod is one way to copy a data directory into dest; it returns
// the file bytes copied when it knows them.
type snapshotMethod struct {
	name string
	run  func(ctx context.Context, dest string) (int64, error)
}

// snapshotMethods are the three copies of src bench snapshot compares,
// sluice's first (its bytes are the yardstick); tmp holds their scratch
// files.
func snapshotMethods(src *pgcluster.Cluster, tmp string) []snapshotMethod {
	return []snapshotMethod{
		{"sluice", func(ctx context.Context, dest string) (int64, error) { return benchSluice(ctx, src, dest) }},
		{"tar", func(ctx context.Context, dest string) (int64, error) { return benchTar(ctx, src.Dir, dest, tmp) }},
		{"pg_basebackup", func(ctx context.Context, dest string) (int64, error) { return benchBasebackup(ctx, src, dest) }},
	}
}

// snapshotRounds are the timed rounds' figures of each method, in
// snapshotMethods' order.
type snapshotRounds struct {
	bytes int64       // file bytes sluice copied
	secs  [][]float64 // wall time per round, s
	cpus  [][]float64 // client+server CPU time per round, s
}

// snapshotCopy is one copy's cost.
type snapshotCopy struct {
	bytes          int64 // as the method returned
	wall           time.Duration
	client, server time.Duration // CPU time
}

// measureSnapshots runs an untimed warm-up of every method, then reps
// timed rounds, each round starting with the next method so that none
// always goes first.
func measureSnapshots(ctx context.Context, src *pgcluster.Cluster, dir string, reps int, progress func(string, ...any)) (snapshotRounds, error) {
	methods := snapshotMethods(src, dir)
	rs := snapshotRounds{secs: make([][]float64, len(methods)), cpus: make([][]float64, len(methods))}
	pgPID, err := src.PID()
	if err != nil {
		return rs, fmt.Errorf("bench snapshot: %w", err)
	}
	for round := 0; round <= reps; round++ {
		for k := range methods {
			// sluice first in the warm-up (its bytes are the yardstick), then
			// each round starts with the next method so none always goes first.
			i := (k + round) % len(methods)
			m := methods[i]
			c, err := copyOnce(ctx, m, filepath.Join(dir, "dest-"+m.name), pgPID)
			if err != nil {
				return rs, err
			}
			if i == 0 {
				rs.bytes = c.bytes
			}
			if round == 0 {
				progress("warm-up %-13s %6.2fs", m.name, c.wall.Seconds())
				continue
			}
			rs.secs[i] = append(rs.secs[i], c.wall.Seconds())
			rs.cpus[i] = append(rs.cpus[i], (c.client + c.server).Seconds())
			detail := ""
			if i == 0 {
				detail = benchSluiceDetail
			}
			progress("round %d/%d %-13s %6.2fs %8.1f MB/s  cpu client %5.2fs + server %5.2fs = %5.2fs/GB  load %.1f %s",
				round, reps, m.name, c.wall.Seconds(), float64(rs.bytes)/1e6/c.wall.Seconds(), c.client.Seconds(), c.server.Seconds(),
				(c.client+c.server).Seconds()/(float64(rs.bytes)/1e9), loadAvg1(), detail)
		}
	}
	return rs, nil
}

// copyOnce copies with m into dest, measuring its wall time, this process's
// and its children's CPU and the server's (the cluster whose postmaster is
// pgPID), then removes dest and syncs, untimed.
func copyOnce(ctx context.Context, m snapshotMethod, dest string, pgPID int) (snapshotCopy, error) {
	var c snapshotCopy
	srv0, err := treeCPU(pgPID)
	if err != nil {
		return c, fmt.Errorf("bench snapshot: %w", err)
	}
	start, cpu0 := time.Now(), cpuTime()
	n, err := m.run(ctx, dest)
	c.bytes, c.wall, c.client = n, time.Since(start), cpuTime()-cpu0
	if err != nil {
		return c, fmt.Errorf("bench snapshot: %s: %w", m.name, err)
	}
	if err := os.RemoveAll(dest); err != nil {
		return c, fmt.Errorf("bench snapshot: %w", err)
	}
	syscall.Sync()
	// The server's share, read after the untimed cleanup so that the
	// backend or walsender of the copy has exited and been reaped.
	srv1, err := treeCPU(pgPID)
	if err != nil {
		return c, fmt.Errorf("bench snapshot: %w", err)
	}
	c.server = srv1 - srv0
	return c, nil
}

// result is the rounds' medians, with the load averages before and after.
func (rs snapshotRounds) result(loadBefore, loadAfter float64) benchSnapshotResult {
	rate := func(i int) float64 { return math.Round(float64(rs.bytes)/1e6/stats.Median(rs.secs[i])*10) / 10 }
	cpuGB := func(i int) float64 { return math.Round(stats.Median(rs.cpus[i])/(float64(rs.bytes)/1e9)*100) / 100 }
	return benchSnapshotResult{
		Bytes: rs.bytes, SluiceMBs: rate(0), TarMBs: rate(1), PgBasebackupMBs: rate(2),
		SluiceCPUPerGB: cpuGB(0), TarCPUPerGB: cpuGB(1), PgBasebackupCPUPerGB: cpuGB(2),
		LoadBefore: loadBefore, LoadAfter: loadAfter,
	}
}

// writeSnapshotResult writes res as JSON to path.
func writeSnapshotResult(path string, res benchSnapshotResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench snapshot: %w", err)
	}
	err = cli.WriteJSON(f, res)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench snapshot: %w", err)
	}
	return nil
}

// printBenchSnapshot prints res as a table, each method's rate against
// sluice's.
func printBenchSnapshot(w io.Writer, res benchSnapshotResult, scale, reps int) {
	fmt.Fprintf(w, "hot snapshot of a %.1f MB tenant (pgbench -s %d), median of %d rounds after a warm-up; load average %.1f before, %.1f after\n",
		float64(res.Bytes)/1e6, scale, reps, res.LoadBefore, res.LoadAfter)
	fmt.Fprintf(w, "%-14s %10s %10s %12s\n", "method", "MB/s", "sluice/x", "CPU s/GB")
	fmt.Fprintf(w, "%-14s %10.1f %10s %12.2f\n", "sluice", res.SluiceMBs, "", res.SluiceCPUPerGB)
	fmt.Fprintf(w, "%-14s %10.1f %10.2f %12.2f   (goal ≥ 0.90)\n", "tar", res.TarMBs, res.SluiceMBs/res.TarMBs, res.TarCPUPerGB)
	fmt.Fprintf(w, "%-14s %10.1f %10.2f %12.2f   (goal ≥ 1.00)\n", "pg_basebackup", res.PgBasebackupMBs, res.SluiceMBs/res.PgBasebackupMBs, res.PgBasebackupCPUPerGB)
}

// loopback returns both ends of a fresh loopback TCP connection.
func loopback() (client, server *net.TCPConn, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	type acc struct {
		c   net.Conn
		err error
	}
	ac := make(chan acc, 1)
	go func() {
		c, err := l.Accept()
		ac <- acc{c, err}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	a := <-ac
	if a.err != nil {
		c.Close()
		return nil, nil, a.err
	}
	return c.(*net.TCPConn), a.c.(*net.TCPConn), nil
}

// benchSluiceDetail describes the last sluice run for the progress line.
var benchSluiceDetail string

// benchSluice is one unthrottled snapshot over loopback TCP; it returns the
// file bytes copied.
func benchSluice(ctx context.Context, src *pgcluster.Cluster, dest string) (int64, error) {
	c, s, err := loopback()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	defer s.Close()
	type recv struct {
		res snapshot.Result
		err error
	}
	rc := make(chan recv, 1)
	go func() {
		res, err := snapshot.Receive(ctx, s, dest, snapshot.ReceiveOptions{})
		rc <- recv{res, err}
	}()
	sres, err := snapshot.Send(ctx, src, c, snapshot.SendOptions{Label: "sluice bench"})
	if err != nil {
		c.Close()
		<-rc
		return 0, err
	}
	r := <-rc
	if r.err != nil {
		return 0, r.err
	}
	if r.res.Bytes != sres.Bytes {
		return 0, fmt.Errorf("sent %d bytes, received %d", sres.Bytes, r.res.Bytes)
	}
	benchSluiceDetail = fmt.Sprintf("(pg_backup_start %v, pg_backup_stop %v, %d files)", sres.StartDuration.Round(time.Millisecond), sres.StopDuration.Round(time.Millisecond), sres.Files)
	return sres.Bytes, nil
}

// benchTar copies exactly the files snapshot.List names with tar c | TCP | tar x.
func benchTar(ctx context.Context, srcDir, dest, tmp string) (int64, error) {
	entries, err := snapshot.List(srcDir)
	if err != nil {
		return 0, err
	}
	var names strings.Builder
	var bytes int64
	for _, e := range entries {
		names.WriteString(e.Path)
		names.WriteByte('\n')
		bytes += e.Size
	}
	list := filepath.Join(tmp, "tar-files")
	if err := os.WriteFile(list, []byte(names.String()), 0o600); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dest, 0o700); err != nil {
		return 0, err
	}
	c, s, err := loopback()
	if err != nil {
		return 0, err
	}
	cf, err := c.File()
	c.Close()
	if err != nil {
		return 0, err
	}
	defer cf.Close()
	sf, err := s.File()
	s.Close()
	if err != nil {
		return 0, err
	}
	defer sf.Close()
	x := exec.CommandContext(ctx, "tar", "-x", "-f", "-", "-C", dest)
	x.Stdin = sf
	var xerr strings.Builder
	x.Stderr = &xerr
	cr := exec.CommandContext(ctx, "tar", "-c", "-f", "-", "--no-recursion", "-C", srcDir, "-T", list)
	cr.Stdout = cf
	var cerr strings.Builder
	cr.Stderr = &cerr
	if err := x.Start(); err != nil {
		return 0, err
	}
	if err := cr.Start(); err != nil {
		x.Process.Kill()
		x.Wait()
		return 0, err
	}
	// Our copies of the socket must not keep the stream open.
	cf.Close()
	sf.Close()
	errC := cr.Wait()
	errX := x.Wait()
	if errC != nil {
		return 0, fmt.Errorf("tar c: %w: %s", errC, cerr.String())
	}
	if errX != nil {
		return 0, fmt.Errorf("tar x: %w: %s", errX, xerr.String())
	}
	return bytes, nil
}

// benchBasebackup runs pg_basebackup into dest as the PostgreSQL OS user.
func benchBasebackup(ctx context.Context, src *pgcluster.Cluster, dest string) (int64, error) {
	host, port, _ := net.SplitHostPort(src.Addr())
	cmd, err := src.Command(ctx, "pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D", dest, "-X", "none", "-c", "fast", "--no-sync", "-Fp")
	if err != nil {
		return 0, err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, out)
	}
	return 0, nil
}
