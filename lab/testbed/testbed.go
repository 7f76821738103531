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
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/damon"
	"github.com/sluicedb/sluice/lab/netns"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// Options describe the servers. Zero values take the defaults noted.
type Options struct {
	// ProxyProcess runs the proxy as a `Binary proxy` subprocess instead of
	// in this process, so that its memory and file descriptors are its own
	// (ProxyPID); Bed.Proxy is then nil and the proxy is reached through
	// ProxyAPI and ProxyAddr alone.
	ProxyProcess bool
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
	// FollowCatalogs makes the proxy follow every agent's catalog (proxy
	// Config.Catalogs, polled each second): the tenants they serve and the
	// keyspaces they hold, which its keyspace router then routes. Its
	// two-phase commit log is in Root.
	FollowCatalogs bool
	// Hosts, if set, are the servers' hosts (package lab/netns), one per
	// server: server i's agent, and so its tenants, runs inside Hosts[i]
	// and listens on its address, and the proxy runs as a subprocess
	// (ProxyProcess is implied) inside ProxyHost. Servers defaults to
	// len(Hosts). Nil: every process on this host's loopback.
	Hosts     []*netns.Host
	ProxyHost *netns.Host
	// InterferenceModel is the agents' interference model file (agent
	// config interference_model); "" = the thesis's coefficients.
	InterferenceModel string
	// Proxies is the number of proxies in ProxyHost (Hosts only), each
	// routing every tenant; an agent hands over on all of them (agent
	// Config.Proxies). Default 1.
	Proxies int
	// CADir, with Hosts, holds the CA (sluice certs init) the bed issues
	// its agents', proxies' and own certificates from (tls.go); "" = a CA
	// of its own under Root.
	CADir string
	// Catalog, if set, is the etcd catalog (etcd://host:port,…/prefix)
	// every agent keeps its catalog in and every proxy watches the
	// placements of; "" = each agent its own bbolt file.
	Catalog string
	// FaultHooks turns on the agents' fault-injection endpoints (agent
	// Config.FaultHooks).
	FaultHooks bool
	// Progress, if set, receives one line per step of setting up.
	Progress func(format string, args ...any)
}

func (o Options) withDefaults() (Options, error) {
	if o.Servers == 0 {
		o.Servers = 2
		if len(o.Hosts) > 0 {
			o.Servers = len(o.Hosts)
		}
	}
	if o.Hosts != nil {
		if len(o.Hosts) != o.Servers || o.ProxyHost == nil {
			return o, fmt.Errorf("testbed: %d hosts for %d servers (and a proxy host: %v): want one host per server, and one for the proxy", len(o.Hosts), o.Servers, o.ProxyHost != nil)
		}
		o.ProxyProcess = true
	}
	if o.Proxies == 0 {
		o.Proxies = 1
	}
	if o.Proxies != 1 && o.Hosts == nil {
		return o, fmt.Errorf("testbed: %d proxies: more than one needs Hosts", o.Proxies)
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

// Bed is a running testbed.
type Bed struct {
	Opt Options
	// Proxy is the in-process proxy; nil with Options.ProxyProcess.
	Proxy    *proxy.Proxy
	ProxyAPI *proxyclient.Client

	token     string           // the agents' API token (makeCredentials)
	tokenFile string           // where it is, for the agents' configs
	user      agentclient.User // the tenants' user, clients' login through the proxy
	Servers   []*Server
	// lastID is the last tenant ID given out: tenant IDs are unique across
	// the bed's servers (an agent numbers its own from 1, and a tenant
	// cannot move to a server where its ID is taken).
	lastID atomic.Int64

	agentPorts              []int         // the agents' API ports, chosen before the proxy starts
	proxyAddr, proxyAPIAddr string        // host:port of the proxy's client and API listeners
	proxyCmd                *exec.Cmd     // the proxy subprocess (Options.ProxyProcess), nil when in-process
	proxyExit               chan struct{} // closed when proxyCmd has exited
	extraProxies            []*proxyProc  // Options.Proxies after the first
	certs                   *bedCerts     // across hosts; nil on loopback

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
	b.agentPorts = make([]int, opt.Servers)
	for i := range b.agentPorts {
		if b.agentPorts[i], err = pgcluster.FreePort(); err != nil {
			return nil, err
		}
	}
	if err := b.startProxy(ctx, bin); err != nil {
		return nil, err
	}
	if opt.CPUShares > 0 {
		if err := b.joinOwnGroup(); err != nil {
			return nil, err
		}
	}
	if opt.ReadMBps > 0 || opt.ReadIOPS > 0 {
		if b.dev, err = cgroup.DeviceOf(b.root); err != nil {
			return nil, fmt.Errorf("testbed: disk caps: %w", err)
		}
	}
	if err := b.startServers(ctx, bin); err != nil {
		return nil, err
	}
	if opt.MemoryMB > 0 && !opt.HostReclaim {
		b.excludeFromReclaim()
	}
	for _, s := range b.Servers {
		opt.Progress("server %s: agent %s, %s", s.Name, s.URL, b.Describe())
	}
	return b, nil
}

// joinOwnGroup puts this process (the workload generator and the proxy) in
// a group of its own weighted Options.CPUShares.
func (b *Bed) joinOwnGroup() (err error) {
	if b.self, err = cgroup.New(fmt.Sprintf("sluice-bed-%d-bench", os.Getpid())); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if err := b.self.SetCPUShares(b.Opt.CPUShares); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if err := b.self.AddPID(os.Getpid()); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if b.proxyCmd != nil {
		if err := b.self.AddPID(b.proxyCmd.Process.Pid); err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
	}
	return nil
}

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
	// Postmasters outlive their agent: stop them through it first.
	for _, s := range b.Servers {
		errs = append(errs, s.stopTenants(ctx)...)
	}
	for _, s := range b.Servers {
		errs = append(errs, s.stop())
	}
	errs = append(errs, b.stopProxy())
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
