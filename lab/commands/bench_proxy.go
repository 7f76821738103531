package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
)

// benchProxyOptions are bench proxy's flags.
type benchProxyOptions struct {
	duration   time.Duration
	scale      int
	clients    int
	rounds     int
	pgbouncer  string
	jsonOut    bool
	keep       bool
	procs      int
	serverNet  string
	syncCommit string
}

var benchProxyFlags benchProxyOptions

var benchProxyCmd = &cobra.Command{
	Use:   "proxy",
	Short: "pgbench select-only and read-write: direct vs through sluice proxy vs through PgBouncer",
	Long: `Starts its own PostgreSQL 15 cluster, PgBouncer (session mode) and sluice proxy
(a child process running this binary's proxy command, like PgBouncer a
process of its own, with --proxy-procs as its --procs), then runs pgbench -S (select_only) and the default TPC-B-like script
(read_write) with --clients clients for --duration against each of the three, the
three interleaved in a rotating order, --rounds times; each figure is the
median over rounds. p50 latency is
computed from pgbench's per-transaction log; the CPU each middleman used per
transaction (user+system, from /proc/PID/stat) is shown in the progress
lines and the JSON. pgbench reaches all three over TCP on 127.0.0.1; both
middlemen reach the server the same way, over TCP (--server-transport tcp)
or both through its Unix socket (unix), as a proxy on the database host
usually would. Everything runs on this machine: the
proxy competes with pgbench and the server for the same cores, as PgBouncer does.

The server runs with --synchronous-commit off by default, so read-write
measures the path rather than the disk's flush latency; on (PostgreSQL's
default) makes every read-write commit wait for its WAL flush.`,
	Args: cobra.NoArgs,
	RunE: runBenchProxy,
}

func init() {
	f := benchProxyCmd.Flags()
	f.DurationVar(&benchProxyFlags.duration, "duration", 20*time.Second, "length of each pgbench run")
	f.IntVar(&benchProxyFlags.scale, "scale", 10, "pgbench scale factor")
	f.IntVar(&benchProxyFlags.clients, "clients", 8, "pgbench clients")
	f.IntVar(&benchProxyFlags.rounds, "rounds", 1, "rounds of the three targets; the median is reported")
	f.StringVar(&benchProxyFlags.pgbouncer, "pgbouncer", "/usr/sbin/pgbouncer", "PgBouncer binary")
	f.BoolVar(&benchProxyFlags.jsonOut, "json", false, "print results as JSON")
	f.BoolVar(&benchProxyFlags.keep, "keep", false, "keep the temp directory (logs) for inspection")
	f.StringVar(&benchProxyFlags.serverNet, "server-transport", "tcp", "how both middlemen reach PostgreSQL: tcp (127.0.0.1) or unix (its socket directory)")
	f.StringVar(&benchProxyFlags.syncCommit, "synchronous-commit", "off", "the server's synchronous_commit: off (measures the path) or on (PostgreSQL's default: read-write waits for WAL flushes)")
	f.IntVar(&benchProxyFlags.procs, "proxy-procs", proxy.DefaultProcs, "--procs of the sluice proxy under test (GOMAXPROCS; 0 = one per core)")
	benchCmd.AddCommand(benchProxyCmd)
}

// benchResult is one workload's figures (the JSON contract).
type benchResult struct {
	DirectTPS      float64 `json:"direct_tps"`
	SluiceTPS      float64 `json:"sluice_tps"`
	PgbouncerTPS   float64 `json:"pgbouncer_tps"`
	DirectP50MS    float64 `json:"direct_p50_ms"`
	SluiceP50MS    float64 `json:"sluice_p50_ms"`
	PgbouncerP50MS float64 `json:"pgbouncer_p50_ms"`
	// CPU (user+system) of the middleman process per transaction, µs: the
	// median over rounds.
	SluiceCPUUS    float64 `json:"sluice_cpu_us_per_tx"`
	PgbouncerCPUUS float64 `json:"pgbouncer_cpu_us_per_tx"`
	// How both middlemen reached the server: tcp or unix.
	ServerTransport string `json:"server_transport"`
	// The server's synchronous_commit (on: commits wait for the WAL flush).
	SynchronousCommit string `json:"synchronous_commit"`
	// The sluice proxy's --procs (GOMAXPROCS; 0 = one per core).
	SluiceProcs int `json:"sluice_procs"`
}

type pgbenchRun struct {
	tps   float64
	p50ms float64
	cpuUS float64 // the middleman's CPU per transaction, µs (0 for direct)
}

const benchPassword = "bench-pw"

func runBenchProxy(cmd *cobra.Command, _ []string) error {
	bf := benchProxyFlags
	if err := bf.check(); err != nil {
		return err
	}
	pgbench := filepath.Join(pgcluster.DefaultBinDir, "pgbench")
	if _, err := os.Stat(pgbench); err != nil {
		return fmt.Errorf("bench proxy: pgbench not found: %w", err)
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench proxy: "+format+"\n", args...)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()

	dir, done, err := benchDir("proxy", bf.keep, progress)
	if err != nil {
		return err
	}
	defer done()
	pb := &proxyBench{opt: bf, pgbench: pgbench, dir: dir, progress: progress}
	defer pb.stop()
	if err := pb.start(ctx); err != nil {
		return err
	}
	results := map[string]*benchResult{}
	for _, wl := range pgbenchWorkloads {
		if results[wl.name], err = pb.measure(ctx, wl); err != nil {
			return err
		}
	}
	if bf.jsonOut {
		return cli.WriteJSON(cmd.OutOrStdout(), struct {
			SelectOnly *benchResult `json:"select_only"`
			ReadWrite  *benchResult `json:"read_write"`
		}{results["select_only"], results["read_write"]})
	}
	printBenchProxy(cmd.OutOrStdout(), results)
	return nil
}

// check reports the first bad flag, or a missing PgBouncer.
func (bf benchProxyOptions) check() error {
	if bf.duration < time.Second {
		return cli.Usagef("bench proxy: --duration must be at least 1s")
	}
	if bf.scale < 1 || bf.clients < 1 || bf.rounds < 1 {
		return cli.Usagef("bench proxy: --scale, --clients and --rounds must be positive")
	}
	if bf.procs < 0 {
		return cli.Usagef("bench proxy: --proxy-procs must be 0 (one per core) or positive")
	}
	if bf.serverNet != "tcp" && bf.serverNet != "unix" {
		return cli.Usagef("bench proxy: --server-transport must be tcp or unix, not %q", bf.serverNet)
	}
	if bf.syncCommit != "on" && bf.syncCommit != "off" {
		return cli.Usagef("bench proxy: --synchronous-commit must be on or off, not %q", bf.syncCommit)
	}
	if _, err := os.Stat(bf.pgbouncer); err != nil {
		return fmt.Errorf("bench proxy: PgBouncer not found at %s (install it: make bench-deps): %w", bf.pgbouncer, err)
	}
	return nil
}

// pgbenchWorkload is a pgbench script: its name in the results and its
// arguments.
type pgbenchWorkload struct {
	name string
	args []string
}

// pgbenchWorkloads are the workloads bench proxy measures, in order.
var pgbenchWorkloads = []pgbenchWorkload{
	{"select_only", []string{"-S"}},
	{"read_write", nil},
}

// pgbenchTarget is one way for pgbench to reach the database: directly or
// through a middleman.
type pgbenchTarget struct {
	name string
	args []string // pgbench's connection arguments
	pid  int      // the middleman's process, 0 for direct
}

// proxyBench is bench proxy's setup: a PostgreSQL cluster loaded by
// pgbench -i, PgBouncer and the sluice proxy in front of it, and the three
// targets. start sets it up; stop tears down, in reverse order, whatever
// start set up, even when start failed.
type proxyBench struct {
	opt      benchProxyOptions
	pgbench  string // pgbench binary
	dir      string // the cluster's, the middlemen's and pgbench's files
	progress func(format string, args ...any)

	targets []pgbenchTarget // direct, sluice, pgbouncer
	stops   []func()
}

// start starts the server and loads it, then starts both middlemen.
func (pb *proxyBench) start(ctx context.Context) error {
	bf := pb.opt
	pb.progress("initdb and start PostgreSQL (synchronous_commit %s)", bf.syncCommit)
	c, err := pgcluster.Init(ctx, filepath.Join(pb.dir, "data"), pgcluster.Options{
		Settings: map[string]string{"max_connections": "100", "shared_buffers": "256MB", "synchronous_commit": bf.syncCommit},
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	pb.stops = append(pb.stops, func() { c.Stop(context.Background(), pgcluster.Fast) })
	pgHost, pgPort, _ := net.SplitHostPort(c.Addr())
	pb.progress("pgbench -i -s %d", bf.scale)
	if out, err := runPgbench(ctx, pb.pgbench, pb.dir, nil, "-i", "-q", "-s", strconv.Itoa(bf.scale), "-h", pgHost, "-p", pgPort, "-U", "postgres", "postgres"); err != nil {
		return fmt.Errorf("bench proxy: pgbench -i: %w\n%s", err, out)
	}
	pb.targets = append(pb.targets, pgbenchTarget{"direct", []string{"-h", pgHost, "-p", pgPort, "-U", "postgres", "postgres"}, 0})

	// The address both middlemen use for the server: host:port, the host
	// being the socket directory for unix.
	serverAddr := c.Addr()
	if bf.serverNet == "unix" {
		serverAddr = net.JoinHostPort(c.Dir, pgPort)
	}
	return pb.startMiddlemen(ctx, serverAddr)
}

// startMiddlemen starts PgBouncer and the sluice proxy in front of
// serverAddr. Both authenticate clients with SCRAM from the same userlist
// and reach the (trust) server as postgres.
func (pb *proxyBench) startMiddlemen(ctx context.Context, serverAddr string) error {
	bf := pb.opt
	uid, gid, asRoot, err := pgcluster.OSUserIDs("")
	if err != nil {
		return err
	}
	userlist := filepath.Join(pb.dir, "userlist.txt")
	if err := os.WriteFile(userlist, []byte(fmt.Sprintf("\"postgres\" \"%s\"\n", benchPassword)), 0o600); err != nil {
		return err
	}
	if asRoot {
		os.Chown(userlist, uid, gid)
	}

	pb.progress("start PgBouncer (session mode, server over %s)", bf.serverNet)
	bouncerPort, bouncerPID, stopBouncer, err := startPgbouncer(ctx, bf.pgbouncer, pb.dir, userlist, serverAddr, uid, gid, asRoot)
	if err != nil {
		return err
	}
	pb.stops = append(pb.stops, stopBouncer)

	pb.progress("start sluice proxy (--procs %d)", bf.procs)
	sluicePort, sluicePID, stopSluice, err := startSluiceProxy(ctx, pb.dir, userlist, bf.procs, "--route", "bench="+serverAddr+"/postgres")
	if err != nil {
		return err
	}
	pb.stops = append(pb.stops, stopSluice)

	pb.targets = append(pb.targets,
		pgbenchTarget{"sluice", []string{"-h", "127.0.0.1", "-p", sluicePort, "-U", "postgres", "bench"}, sluicePID},
		pgbenchTarget{"pgbouncer", []string{"-h", "127.0.0.1", "-p", strconv.Itoa(bouncerPort), "-U", "postgres", "bench"}, bouncerPID})
	return nil
}

// stop stops what start started, last first.
func (pb *proxyBench) stop() {
	for i := len(pb.stops) - 1; i >= 0; i-- {
		pb.stops[i]()
	}
	pb.stops = nil
}

// measure runs wl against every target, --rounds times, and returns the
// medians.
func (pb *proxyBench) measure(ctx context.Context, wl pgbenchWorkload) (*benchResult, error) {
	bf := pb.opt
	runs := map[string][]pgbenchRun{}
	for r := 0; r < bf.rounds; r++ {
		// Rotate the order each round so slow drifts of a shared machine's
		// load do not always fall on the same target.
		for k := range pb.targets {
			tg := pb.targets[(k+r)%len(pb.targets)]
			run, err := pb.runOnce(ctx, wl, tg, r)
			if err != nil {
				return nil, err
			}
			runs[tg.name] = append(runs[tg.name], run)
		}
	}
	d, s, b := median(runs["direct"]), median(runs["sluice"]), median(runs["pgbouncer"])
	return &benchResult{
		DirectTPS: round1(d.tps), SluiceTPS: round1(s.tps), PgbouncerTPS: round1(b.tps),
		DirectP50MS: round3(d.p50ms), SluiceP50MS: round3(s.p50ms), PgbouncerP50MS: round3(b.p50ms),
		SluiceCPUUS: round1(medianCPU(runs["sluice"])), PgbouncerCPUUS: round1(medianCPU(runs["pgbouncer"])),
		ServerTransport: bf.serverNet, SynchronousCommit: bf.syncCommit, SluiceProcs: bf.procs,
	}, nil
}

// runOnce runs wl against tg for --duration, in round r, and returns its
// TPS, p50 and the middleman's CPU per transaction.
func (pb *proxyBench) runOnce(ctx context.Context, wl pgbenchWorkload, tg pgbenchTarget, r int) (pgbenchRun, error) {
	bf := pb.opt
	pb.progress("%s via %s, round %d/%d, %v", wl.name, tg.name, r+1, bf.rounds, bf.duration)
	prefix := filepath.Join(pb.dir, fmt.Sprintf("log-%s-%s-%d", wl.name, tg.name, r))
	args := append([]string{"-n", "-c", strconv.Itoa(bf.clients), "-T", strconv.Itoa(int(bf.duration.Seconds())),
		"-l", "--log-prefix=" + prefix}, wl.args...)
	args = append(args, tg.args...)
	cpu0 := processCPU(tg.pid)
	out, err := runPgbench(ctx, pb.pgbench, pb.dir, []string{"PGPASSWORD=" + benchPassword}, args...)
	cpu := processCPU(tg.pid) - cpu0
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("bench proxy: pgbench %s via %s: %w\n%s", wl.name, tg.name, err, out)
	}
	run, err := parsePgbench(out, prefix)
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("bench proxy: %s via %s: %w", wl.name, tg.name, err)
	}
	if tg.name == "direct" {
		pb.progress("  %.0f tps, p50 %.3f ms", run.tps, run.p50ms)
	} else {
		// CPU the middleman used per transaction: robust to machine noise.
		run.cpuUS = cpu.Seconds() * 1e6 / (run.tps * bf.duration.Seconds())
		pb.progress("  %.0f tps, p50 %.3f ms, %s CPU %.1f µs/transaction", run.tps, run.p50ms, tg.name, run.cpuUS)
	}
	removeLogs(prefix)
	return run, nil
}

// printBenchProxy prints one line per workload: each target's TPS and p50.
func printBenchProxy(w io.Writer, results map[string]*benchResult) {
	fmt.Fprintf(w, "%-12s %12s %12s %12s %10s %10s %10s\n", "workload", "direct tps", "sluice tps", "bouncer tps", "direct p50", "sluice p50", "bouncer p50")
	for _, wl := range pgbenchWorkloads {
		r := results[wl.name]
		fmt.Fprintf(w, "%-12s %12.1f %12.1f %12.1f %8.3fms %8.3fms %8.3fms\n", wl.name, r.DirectTPS, r.SluiceTPS, r.PgbouncerTPS, r.DirectP50MS, r.SluiceP50MS, r.PgbouncerP50MS)
	}
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// median returns the run with the median TPS.
func median(rs []pgbenchRun) pgbenchRun {
	if len(rs) == 0 {
		return pgbenchRun{}
	}
	s := append([]pgbenchRun(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].tps < s[j].tps })
	return s[len(s)/2]
}

// medianCPU returns the median of the runs' CPU per transaction.
func medianCPU(rs []pgbenchRun) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.cpuUS
	}
	return stats.Median(v)
}

func runPgbench(ctx context.Context, bin, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// parsePgbench reads TPS from pgbench's summary and the median latency from
// its per-transaction logs (prefix.*): field 3 is the latency in µs.
func parsePgbench(out, prefix string) (pgbenchRun, error) {
	var run pgbenchRun
	m := tpsRe.FindStringSubmatch(out)
	if m == nil {
		return run, fmt.Errorf("no tps in pgbench output:\n%s", out)
	}
	run.tps, _ = strconv.ParseFloat(m[1], 64)
	if !strings.Contains(out, "number of failed transactions: 0 ") {
		return run, fmt.Errorf("pgbench reports failed transactions:\n%s", out)
	}
	files, _ := filepath.Glob(prefix + ".*")
	if len(files) == 0 {
		return run, errors.New("pgbench wrote no transaction log")
	}
	var lat []int64
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return run, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fs[2], 10, 64)
			if err != nil {
				continue
			}
			lat = append(lat, us)
		}
		fh.Close()
	}
	if len(lat) == 0 {
		return run, errors.New("empty pgbench transaction log")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	run.p50ms = float64(lat[(len(lat)-1)/2]) / 1000
	return run, nil
}

func removeLogs(prefix string) {
	files, _ := filepath.Glob(prefix + ".*")
	for _, f := range files {
		os.Remove(f)
	}
}

// benchDir makes the working directory of bench name (readable by the
// postgres OS user); done removes it, unless keep, when it is named in
// progress and left.
func benchDir(name string, keep bool, progress func(string, ...any)) (dir string, done func(), err error) {
	dir, err = pgcluster.MkdirTemp("sluice-bench-" + name + "-")
	if err != nil {
		return "", nil, err
	}
	if keep {
		progress("keeping %s", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}
