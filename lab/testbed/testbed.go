// Package testbed builds, on one machine, the "servers" sluice's closed-loop
// benchmarks run on: each server is a `sluice agent` subprocess in its own
// cgroup v1 group (CPU quota, memory cap with the page cache counted,
// optional block-I/O caps), so the tenant postmasters it forks inherit the
// same limits and a migration's copy competes with the tenants' transactions
// for the same CPU, memory and disk — Slacker's testbed (§6: a small buffer
// pool, a tenant larger than memory, one server's resources shared by the
// workload and the migration). A proxy, in this process, is the clients'
// front door and the agents' latency instrument.
//
// Bed is an adapter: it starts and stops processes. Experiments (package
// experiment) drive it.
package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/damon"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// Options describe the servers. Zero values take the defaults noted.
type Options struct {
	// ReleaseLimit is the bed's proxy's release ramp (proxy.Config's
	// ReleaseLimit; ReleaseWindow stays its default): 0 = none.
	ReleaseLimit int
	// Root holds the agents' directories and logs; "" = a temp dir that
	// Close removes.
	Root string
	// LogDir, if set, is where Close copies each agent's log (<server>.log:
	// its slow-step warnings, the fence's step times) before it removes
	// Root, and where the proxy writes its log (proxy.log: routes, holds,
	// session moves); "" = the agents' logs go with Root, the proxy's
	// nowhere.
	LogDir string
	// Binary is the sluice executable run as `sluice agent`; "" = this
	// process's own executable.
	Binary string
	// Servers is the number of servers (agents); default 2.
	Servers int
	// CPUs is each server's CPU quota in cores (CFS quota over a 10 ms
	// period); default 0.5; negative = no cap.
	CPUs float64
	// MemoryMB caps each server's memory in MiB: its agent, postmasters and
	// the page cache of the files they touch; default 768; negative = no cap.
	MemoryMB int
	// ReadMBps caps each server's reads from the data disk, MB/s (1e6
	// bytes); 0 = none.
	ReadMBps float64
	// ReadIOPS caps each server's read operations per second on the data
	// disk; 0 = none.
	ReadIOPS int64
	// CPUShares, when > 0, is the cpu.shares weight of each server's group
	// and of a group the bed puts its own process in (the workload
	// generator and the proxy): against other processes on the host (1024
	// each) the experiment wins contended CPU, so a busy neighbour disturbs
	// it less. The servers' quotas still cap them. 0 = no weighting.
	CPUShares int64
	// SharedBuffers is the tenants' shared_buffers; default "32MB" (a small
	// buffer pool, as Slacker's).
	SharedBuffers string
	// Settings are further postgresql.conf parameters for every tenant, over
	// the bed's own: max_wal_size 1GB, synchronous_commit off,
	// backend_flush_after 256kB (see startServer).
	Settings map[string]string
	// HostReclaim leaves the host's DAMON pageout (package damon) free to
	// evict the servers' page cache. By default, when a memory cap applies,
	// the servers' memory cgroups are excluded from it for the bed's
	// lifetime, so what a server keeps cached is what its cap allows.
	HostReclaim bool
	// Progress, if set, receives one line per step of setting up.
	Progress func(format string, args ...any)
}

func (o Options) withDefaults() (Options, error) {
	if o.Servers == 0 {
		o.Servers = 2
	}
	if o.CPUs == 0 {
		o.CPUs = 0.5
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 768
	}
	if o.SharedBuffers == "" {
		o.SharedBuffers = "32MB"
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	switch {
	case o.Servers < 1 || o.Servers > 16:
		return o, fmt.Errorf("testbed: %d servers: want 1..16", o.Servers)
	case o.CPUs != 0 && CheckCPUs(o.CPUs) != nil:
		return o, CheckCPUs(o.CPUs)
	case o.MemoryMB > 0 && o.MemoryMB < 128:
		return o, fmt.Errorf("testbed: memory cap %d MiB is below 128 MiB", o.MemoryMB)
	case o.ReadMBps < 0 || math.IsNaN(o.ReadMBps) || math.IsInf(o.ReadMBps, 0):
		return o, fmt.Errorf("testbed: read cap %v MB/s must be a non-negative number", o.ReadMBps)
	case o.CPUShares < 0 || o.CPUShares == 1 || o.CPUShares > 262144:
		return o, fmt.Errorf("testbed: CPU shares %d: want 2..262144, or 0 for none", o.CPUShares)
	case o.ReadIOPS < 0:
		return o, fmt.Errorf("testbed: read IOPS cap %d must not be negative", o.ReadIOPS)
	}
	return o, nil
}

// Check reports the first bad option before anything starts.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

// Server is one agent and its cgroup.
type Server struct {
	Name   string
	URL    string // the agent's API
	Client *agentclient.Client
	Group  *cgroup.Group // nil when no limit applies

	// cpus is the server's CPU quota in cores while its limits are on:
	// Options.CPUs until SetCPUs changes it; negative = no cap.
	cpus float64
	cmd  *exec.Cmd
	exit chan struct{}
	log  string
}

// Bed is a running testbed.
type Bed struct {
	Opt      Options
	Proxy    *proxy.Proxy
	ProxyAPI *proxyclient.Client
	Servers  []*Server

	root    string
	ownRoot bool
	dev     string // the data disk's major:minor when disk caps apply
	cancel  context.CancelFunc
	self    *cgroup.Group    // the bed's own process's group (Options.CPUShares), nil when none
	reclaim *damon.Exclusion // the servers' groups kept out of the host's DAMON pageout; nil when not
	// proxyLog receives the proxy's log lines when Options.LogDir is set.
	logMu    sync.Mutex
	proxyLog *os.File
	// reclaimNote says, for Describe, why the host's pageout still applies
	// when it could not be excluded ("" otherwise).
	reclaimNote string
}

// Tenant is a tenant the bed created.
type Tenant struct {
	Name  string
	DSN   string // through the proxy
	Rows  int64  // YCSB usertable rows loaded
	Bytes int64  // the loaded table's size on disk, bytes
}

// Start starts the proxy and the servers. On error everything started is
// stopped again.
func Start(ctx context.Context, opt Options) (_ *Bed, err error) {
	if opt, err = opt.withDefaults(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 && (opt.CPUs > 0 || opt.MemoryMB > 0 || opt.ReadMBps > 0 || opt.ReadIOPS > 0) {
		return nil, errors.New("testbed: cgroup limits need root")
	}
	b := &Bed{Opt: opt, root: opt.Root}
	if b.root == "" {
		if b.root, err = pgcluster.MkdirTemp("sluice-testbed-"); err != nil {
			return nil, err
		}
		b.ownRoot = true
	} else if err := os.MkdirAll(b.root, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	bin := opt.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("testbed: own executable: %w", err)
		}
	}
	var pctx context.Context
	pctx, b.cancel = context.WithCancel(context.Background())
	pcfg := proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, ReleaseLimit: opt.ReleaseLimit}
	if opt.LogDir != "" {
		if err := os.MkdirAll(opt.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("testbed: logs: %w", err)
		}
		if b.proxyLog, err = os.Create(filepath.Join(opt.LogDir, "proxy.log")); err != nil {
			return nil, fmt.Errorf("testbed: proxy log: %w", err)
		}
		pcfg.Logf = b.logProxy
	}
	b.Proxy, err = proxy.New(pcfg)
	if err != nil {
		return nil, err
	}
	if err := b.Proxy.Start(pctx); err != nil {
		return nil, err
	}
	b.ProxyAPI = proxyclient.New(b.Proxy.APIAddr(), nil)

	if opt.CPUShares > 0 {
		if b.self, err = cgroup.New(fmt.Sprintf("sluice-bed-%d-bench", os.Getpid())); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
		if err := b.self.SetCPUShares(opt.CPUShares); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
		if err := b.self.AddPID(os.Getpid()); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	if opt.ReadMBps > 0 || opt.ReadIOPS > 0 {
		if b.dev, err = cgroup.DeviceOf(b.root); err != nil {
			return nil, fmt.Errorf("testbed: disk caps: %w", err)
		}
	}
	// Every agent knows every other as a peer by name.
	ports := make([]int, opt.Servers)
	for i := range ports {
		if ports[i], err = pgcluster.FreePort(); err != nil {
			return nil, err
		}
	}
	peers := map[string]string{}
	for i := range ports {
		peers[serverName(i)] = fmt.Sprintf("http://127.0.0.1:%d", ports[i])
	}
	for i := 0; i < opt.Servers; i++ {
		s, err := b.startServer(ctx, i, bin, ports[i], peers)
		if s != nil {
			b.Servers = append(b.Servers, s) // Close stops it even if it never answered
		}
		if err != nil {
			return nil, err
		}
	}
	if opt.MemoryMB > 0 && !opt.HostReclaim {
		var groups []string
		for _, s := range b.Servers {
			if s.Group != nil {
				groups = append(groups, "/"+s.Group.Name)
			}
		}
		// Not fatal: the bed still runs, and Describe says the host's reclaim
		// applies.
		if b.reclaim, err = damon.Exclude(groups...); err != nil {
			b.reclaim, b.reclaimNote = nil, err.Error()
			err = nil
		}
	}
	for _, s := range b.Servers {
		opt.Progress("server %s: agent %s, %s", s.Name, s.URL, b.Describe())
	}
	return b, nil
}

func serverName(i int) string { return "server-" + string(rune('a'+i)) }

// Describe says what each server is limited to, for reports.
func (b *Bed) Describe() string {
	o := b.Opt
	s := "no limits"
	if o.CPUs > 0 || o.MemoryMB > 0 || o.ReadMBps > 0 || o.ReadIOPS > 0 {
		s = "cgroup"
		if o.CPUs > 0 {
			s += fmt.Sprintf(" %.2g CPU", o.CPUs)
		}
		if o.MemoryMB > 0 {
			s += fmt.Sprintf(", %d MiB memory", o.MemoryMB)
		}
		if o.ReadMBps > 0 {
			s += fmt.Sprintf(", reads ≤ %.0f MB/s", o.ReadMBps)
		}
		if o.ReadIOPS > 0 {
			s += fmt.Sprintf(", ≤ %d read IOPS", o.ReadIOPS)
		}
	}
	if o.CPUShares > 0 {
		s += fmt.Sprintf("; servers and workload weighted %d cpu.shares against the host's other processes", o.CPUShares)
	}
	switch {
	case b.reclaim != nil && b.reclaim.Schemes() > 0:
		s += "; excluded from the host's DAMON pageout"
	case b.reclaimNote != "":
		s += "; the host's DAMON pageout applies (" + b.reclaimNote + ")"
	case o.HostReclaim:
		s += "; the host's proactive reclaim (DAMON pageout, if any) applies"
	}
	s += fmt.Sprintf("; tenants: shared_buffers %s, synchronous_commit off", o.SharedBuffers)
	keys := make([]string, 0, len(o.Settings))
	for k := range o.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += fmt.Sprintf(", %s %s", k, o.Settings[k])
	}
	return s + " (one disk shared by the servers)"
}

// agentConfig is the subset of agent.Config (JSON) the bed writes.
type agentConfig struct {
	Name   string            `json:"name"`
	Root   string            `json:"root"`
	Listen string            `json:"listen"`
	Proxy  string            `json:"proxy"`
	Peers  map[string]string `json:"peers"`
	// RetireGrace "0s": a migrated-away tenant's directory is purged from
	// migration.PurgeDelay after the handover, before the next trial.
	// Kept for the agent's default 10 minutes, every retired copy's page
	// cache stays charged to the server's memory cgroup: in a sweep (a
	// migration every 1–2 minutes) three retired 1.3–1.9 GB copies filled a
	// 3 GiB cap, and the latency before each trial climbed from 4 to 12 ms
	// until fixed 30 MB/s overloaded the server (285 ms; 2026-11-23).
	RetireGrace string `json:"retire_grace"`
	// AnalyzeAfter "0s": no ANALYZE after a migration commits. The
	// benchmarks migrate back and forth every 1–2 minutes, and the agent's
	// default (30 s after each commit) would put a cost-limited ANALYZE of
	// the 1 GB tenant into the next trial's warm-up or first seconds.
	AnalyzeAfter string `json:"analyze_after"`
	Tenant       struct {
		BasePort      int               `json:"base_port"`
		SharedBuffers string            `json:"shared_buffers"`
		Settings      map[string]string `json:"settings"`
	} `json:"tenant"`
}

func (b *Bed) startServer(ctx context.Context, i int, bin string, port int, peers map[string]string) (*Server, error) {
	o := b.Opt
	s := &Server{Name: serverName(i), URL: fmt.Sprintf("http://127.0.0.1:%d", port), cpus: o.CPUs}
	base, err := freeBase(16)
	if err != nil {
		return nil, err
	}
	var cfg agentConfig
	cfg.Name, cfg.Root, cfg.Listen = s.Name, filepath.Join(b.root, s.Name), fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Proxy = "http://" + b.Proxy.APIAddr()
	cfg.RetireGrace = "0s"
	cfg.AnalyzeAfter = "0s"
	cfg.Peers = map[string]string{}
	for n, u := range peers {
		if n != s.Name {
			cfg.Peers[n] = u
		}
	}
	cfg.Tenant.BasePort, cfg.Tenant.SharedBuffers = base, o.SharedBuffers
	// The servers share this machine's one disk: a server's commits must not
	// wait on the other server's writes (on separate machines they would
	// not), so commits do not wait for the WAL flush (synchronous_commit
	// off; the WAL writer flushes within 200 ms). Backends push the pages
	// they evict to the disk at once (backend_flush_after), so dirty page
	// cache does not pile up in a server's memory cgroup and stall it in
	// reclaim.
	cfg.Tenant.Settings = map[string]string{"max_wal_size": "1GB", "synchronous_commit": "off", "backend_flush_after": "256kB"}
	for k, v := range o.Settings {
		cfg.Tenant.Settings[k] = v
	}
	cj, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(b.root, s.Name+".json")
	if err := os.WriteFile(cfgPath, cj, 0o644); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}

	if o.CPUs > 0 || o.MemoryMB > 0 || b.dev != "" || o.CPUShares > 0 {
		if s.Group, err = cgroup.New(fmt.Sprintf("sluice-bed-%d-%s", os.Getpid(), s.Name)); err != nil {
			return s, fmt.Errorf("testbed: %w", err)
		}
		if err := b.setLimits(s, true); err != nil {
			return s, err
		}
	}

	s.log = filepath.Join(b.root, s.Name+".log")
	lf, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return s, fmt.Errorf("testbed: %w", err)
	}
	defer lf.Close()
	s.cmd = exec.Command(bin, "agent", "--config", cfgPath)
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	// Its own process group: a ^C to the bench reaches the bench, which
	// stops tenants before agents; the agents never see it first.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return s, fmt.Errorf("testbed: start agent %s: %w", s.Name, err)
	}
	s.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(s.cmd, s.exit)
	// The agent has started no postmaster yet (a fresh root): those it
	// starts from now on inherit the group.
	if s.Group != nil {
		if err := s.Group.AddPID(s.cmd.Process.Pid); err != nil {
			return s, err
		}
	}
	if s.Client, err = agentclient.New(s.URL); err != nil {
		return s, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := s.Client.Info(wctx); err == nil {
			return s, nil
		}
		select {
		case <-s.exit:
			return s, fmt.Errorf("testbed: agent %s exited at start; its log: %s", s.Name, s.log)
		case <-wctx.Done():
			return s, fmt.Errorf("testbed: agent %s did not answer within a minute; its log: %s", s.Name, s.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// setLimits applies the options' CPU and disk caps to s's group (on), or
// lifts them (off). The memory cap stays.
func (b *Bed) setLimits(s *Server, on bool) error {
	o := b.Opt
	if s.Group == nil {
		return nil
	}
	if o.MemoryMB > 0 {
		if err := s.Group.SetMemoryLimit(int64(o.MemoryMB) << 20); err != nil {
			return err
		}
	}
	if o.CPUShares > 0 {
		if err := s.Group.SetCPUShares(o.CPUShares); err != nil {
			return err
		}
	}
	if o.CPUs > 0 {
		period, quota := 10*time.Millisecond, time.Duration(0)
		if on && s.cpus > 0 {
			quota = time.Duration(s.cpus * float64(period))
		}
		if err := s.Group.SetCPUQuota(period, quota); err != nil {
			return err
		}
	}
	if b.dev == "" {
		return nil
	}
	rbps, riops := int64(0), int64(0)
	if on {
		rbps, riops = int64(o.ReadMBps*1e6), o.ReadIOPS
	}
	if err := s.Group.SetIOLimit(b.dev, rbps, 0); err != nil {
		return err
	}
	return s.Group.SetIOPSLimit(b.dev, riops, 0)
}

// CheckCPUs reports whether cores is a CPU quota a server can have: 0.01
// to 64 cores, or negative for none.
func CheckCPUs(cores float64) error {
	if math.IsNaN(cores) || cores == 0 || cores > 64 || (cores > 0 && cores < 0.01) {
		return fmt.Errorf("testbed: CPU quota %v cores: want 0.01..64, or negative for none", cores)
	}
	return nil
}

// SetCPUs sets server i's CPU quota to cores (negative: no cap) from now
// on, for the rest of the bed's life or the next SetCPUs: an experiment
// gives the server a tenant moves to a quota of its own (Slacker's target
// was an idle machine of its own, not one as loaded as the source). It
// needs a bed with CPU caps (Options.CPUs > 0).
func (b *Bed) SetCPUs(i int, cores float64) error {
	if i < 0 || i >= len(b.Servers) {
		return fmt.Errorf("testbed: no server %d", i)
	}
	s := b.Servers[i]
	switch {
	case b.Opt.CPUs <= 0 || s.Group == nil:
		return fmt.Errorf("testbed: server %s has no CPU cap to change (the bed was started without one)", s.Name)
	case CheckCPUs(cores) != nil:
		return CheckCPUs(cores)
	}
	s.cpus = cores
	return b.setLimits(s, true)
}

// CPUs is server i's CPU quota in cores while its limits are on (negative:
// none).
func (b *Bed) CPUs(i int) float64 { return b.Servers[i].cpus }

// freeBase returns a tenant base port with n free ports above it, taken
// below the kernel's ephemeral range: every other test process (clusters on
// pgcluster.FreePort, client connections) gets its ports from that range, so
// a tenant port free at the bed's start cannot be taken before a migration
// reserves it (in the ephemeral range it was, now and then, by a concurrent
// package's test: "port … for tenant 1 is in use").
func freeBase(n int) (int, error) {
	const lo = 10000
	hi := ephemeralLow() - n - 1
	if hi <= lo {
		return 0, errors.New("testbed: no room for tenant ports below the ephemeral range")
	}
	for try := 0; try < 100; try++ {
		p := lo + rand.IntN(hi-lo)
		ok := true
		for k := 0; k <= n && ok; k++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+k))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("testbed: no free range of tenant ports")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 0 {
		return 32768
	}
	return p
}

// CreateTenant creates tenant name on Servers[server], routes it in the
// proxy, and loads Slacker's YCSB usertable to about size bytes through the
// proxy (then VACUUM and CHECKPOINT, so the copy and the workload start
// from a clean state).
func (b *Bed) CreateTenant(ctx context.Context, server int, name string, size int64, seed uint64) (Tenant, error) {
	if server < 0 || server >= len(b.Servers) {
		return Tenant{}, fmt.Errorf("testbed: no server %d", server)
	}
	s := b.Servers[server]
	tn, err := s.Client.CreateTenant(ctx, agentclient.CreateTenant{Name: name})
	if err != nil {
		return Tenant{}, fmt.Errorf("testbed: create tenant %s on %s: %w", name, s.Name, err)
	}
	if err := b.ProxyAPI.SetRoute(ctx, proxyclient.Route{Tenant: tn.Name, Addr: net.JoinHostPort(tn.Host, strconv.Itoa(tn.Port)), Database: tn.Database}); err != nil {
		return Tenant{}, err
	}
	// Loading is setup, not the experiment: the server's limits are lifted
	// meanwhile.
	if err := b.setLimits(s, false); err != nil {
		return Tenant{}, err
	}
	defer b.setLimits(s, true)
	t := Tenant{Name: tn.Name, DSN: fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", b.Proxy.Addr(), tn.Name)}
	conn, err := pgx.Connect(ctx, t.DSN)
	if err != nil {
		return t, fmt.Errorf("testbed: connect to %s through the proxy: %w", name, err)
	}
	defer conn.Close(context.Background())
	lr, err := workload.Load(ctx, conn, workload.RowsForSize(size), seed, nil)
	if err != nil {
		return t, fmt.Errorf("testbed: load %s: %w", name, err)
	}
	// VACUUM sets the hint bits and the visibility map now, so the first
	// trial does not pay for them; CHECKPOINT writes them out.
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) usertable"); err != nil {
		return t, fmt.Errorf("testbed: %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return t, fmt.Errorf("testbed: %s: %w", name, err)
	}
	t.Rows, t.Bytes = lr.Rows, lr.Bytes
	b.Opt.Progress("tenant %s on %s: %d rows, %.0f MB", name, s.Name, lr.Rows, float64(lr.Bytes)/1e6)
	return t, nil
}

// RetiredDirs lists the migrated-away tenant data directories still on the
// servers' disk (agent: tenants/<id>.retired-<unix>, purged PurgeDelay after
// their migration, at migration.PurgeRate).
func (b *Bed) RetiredDirs() []string {
	ms, _ := filepath.Glob(filepath.Join(b.root, "*", "tenants", "*.retired-*"))
	return ms
}

// WaitPurged waits, up to max, until no retired tenant directory is left on
// the servers' disk, and returns how long it waited. The purge frees ~2 GB
// in 8–10 s, and on this bed, whose servers share one disk, the clients of
// the tenant that just moved saw one second in two at 50–65 ms mean while it
// ran (2026-11-25): a trial that starts then starts on a disturbed plant. An
// error only when ctx ends; at max it returns with the directories left.
func (b *Bed) WaitPurged(ctx context.Context, max time.Duration) (time.Duration, error) {
	start := time.Now()
	for len(b.RetiredDirs()) > 0 && time.Since(start) < max {
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Since(start), ctx.Err()
		case <-t.C:
		}
	}
	return time.Since(start), nil
}

// Owner returns the index of the server that serves t, and t's id there.
func (b *Bed) Owner(ctx context.Context, t Tenant) (int, int64, error) {
	for i, s := range b.Servers {
		ts, err := s.Client.Tenants(ctx, false)
		if err != nil {
			return -1, 0, fmt.Errorf("testbed: %s: %w", s.Name, err)
		}
		for _, x := range ts {
			if x.Name == t.Name && x.State == "running" {
				return i, x.ID, nil
			}
		}
	}
	return -1, 0, fmt.Errorf("testbed: no server runs tenant %s", t.Name)
}

// Migrate moves t from its owner to Servers[to] with req (its Tenant and To
// are filled in), polling about twice a second and calling each (if set)
// with every record. It returns the final record; an outcome other than
// "committed" is an error.
func (b *Bed) Migrate(ctx context.Context, t Tenant, to int, req agentclient.StartMigration, each func(agentclient.Migration)) (agentclient.Migration, error) {
	from, id, err := b.Owner(ctx, t)
	if err != nil {
		return agentclient.Migration{}, err
	}
	if to < 0 || to >= len(b.Servers) || to == from {
		return agentclient.Migration{}, fmt.Errorf("testbed: cannot move %s from server %d to %d", t.Name, from, to)
	}
	src := b.Servers[from].Client
	req.Tenant, req.To = id, b.Servers[to].Name
	m, err := src.StartMigration(ctx, req)
	if err != nil {
		return m, fmt.Errorf("testbed: start migration of %s: %w", t.Name, err)
	}
	for !m.Done {
		select {
		case <-ctx.Done():
			src.AbortMigration(context.Background(), m.ID)
			return m, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if m, err = src.Migration(ctx, m.ID); err != nil {
			return m, err
		}
		if each != nil {
			each(m)
		}
	}
	if m.Outcome != "committed" {
		return m, fmt.Errorf("testbed: migration %s of %s ended %s: %s", m.ID, t.Name, m.Outcome, m.Error)
	}
	return m, nil
}

// Close stops every tenant, the agents and the proxy, removes the cgroups,
// and removes Root if the bed made it. Safe to call more than once.
func (b *Bed) Close() error {
	var errs []error
	// Before the groups go: DAMON refuses a filter naming a missing group.
	if b.reclaim != nil {
		if err := b.reclaim.Restore(); err != nil {
			errs = append(errs, fmt.Errorf("testbed: %w", err))
		}
		b.reclaim = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range b.Servers {
		if s.Client == nil {
			continue
		}
		// Postmasters outlive their agent: stop them through it first.
		if ts, err := s.Client.Tenants(ctx, false); err == nil {
			for _, t := range ts {
				if t.Alive {
					if _, err := s.Client.StopTenant(ctx, t.ID); err != nil {
						errs = append(errs, fmt.Errorf("testbed: stop tenant %s on %s: %w", t.Name, s.Name, err))
					}
				}
			}
		}
	}
	for _, s := range b.Servers {
		if s.cmd != nil {
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exit:
			case <-time.After(20 * time.Second):
				s.cmd.Process.Kill()
				<-s.exit
			}
			s.cmd = nil
		}
		if s.Group != nil {
			// Whatever still runs in the group (a postmaster the agent could not
			// stop) is stopped with an immediate shutdown.
			if pids, err := s.Group.PIDs(); err == nil && len(pids) > 0 {
				for _, p := range pids {
					syscall.Kill(p, syscall.SIGQUIT)
				}
				time.Sleep(time.Second)
			}
			if err := s.Group.Remove(); err != nil {
				errs = append(errs, err)
			}
			s.Group = nil
		}
	}
	if b.cancel != nil {
		b.cancel()
	}
	if b.Proxy != nil {
		b.Proxy.Close()
		b.Proxy = nil
	}
	if b.proxyLog != nil {
		b.logMu.Lock()
		errs = append(errs, b.proxyLog.Close())
		b.proxyLog = nil
		b.logMu.Unlock()
	}
	if b.self != nil {
		// Remove moves this process back to the root groups.
		if err := b.self.Remove(); err != nil {
			errs = append(errs, err)
		}
		b.self = nil
	}
	if b.Opt.LogDir != "" {
		if err := b.saveLogs(b.Opt.LogDir); err != nil {
			errs = append(errs, err)
		}
	}
	if b.ownRoot && b.root != "" {
		os.RemoveAll(b.root)
		b.root = ""
	}
	return errors.Join(errs...)
}

// logProxy appends one line, stamped with the time in ms, to proxy.log.
func (b *Bed) logProxy(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	if b.proxyLog != nil {
		fmt.Fprintf(b.proxyLog, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// saveLogs copies each server's agent log into dir (created if missing).
func (b *Bed) saveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("testbed: logs: %w", err)
	}
	var errs []error
	for _, s := range b.Servers {
		if s.log == "" {
			continue
		}
		data, err := os.ReadFile(s.log)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, s.Name+".log"), data, 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("testbed: log of %s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}
