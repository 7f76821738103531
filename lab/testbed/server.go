package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"net"
	"strconv"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/damon"
)

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

func serverName(i int) string { return "server-" + string(rune('a'+i)) }

// agentConfig is the subset of agent.Config (JSON) the bed writes.
type agentConfig struct {
	Name   string            `json:"name"`
	Root   string            `json:"root"`
	Listen string            `json:"listen"`
	Proxy  string            `json:"proxy"`
	Peers  map[string]string `json:"peers"`
	// TokenFile and PeerTokenFile: one token for every agent of the bed;
	// ProxyTokenFile: the proxy's.
	TokenFile      string `json:"token_file"`
	PeerTokenFile  string `json:"peer_token_file"`
	ProxyTokenFile string `json:"proxy_token_file"`
	// RetireGrace "0s": a migrated-away tenant's directory is purged from
	// migration.PurgeDelay after the handover, before the next trial. Kept
	// for the agent's default 10 minutes, every retired copy's page cache
	// stays charged to the server's memory cgroup: in a sweep (a migration
	// every 1–2 minutes) three retired 1.3–1.9 GB copies fill a 3 GiB cap,
	// and each trial starts on a server slower than the last.
	RetireGrace string `json:"retire_grace"`
	// AnalyzeAfter "0s": no ANALYZE after a migration commits. The
	// benchmarks migrate back and forth every 1–2 minutes, and the agent's
	// default (30 s after each commit) would put a cost-limited ANALYZE of
	// the 1 GB tenant into the next trial's warm-up or first seconds.
	AnalyzeAfter string `json:"analyze_after"`
	// InterferenceModel: Options.InterferenceModel.
	InterferenceModel string `json:"interference_model,omitempty"`
	Tenant            struct {
		BasePort      int               `json:"base_port"`
		ListenAddr    string            `json:"listen_addr,omitempty"`
		SharedBuffers string            `json:"shared_buffers"`
		Settings      map[string]string `json:"settings"`
	} `json:"tenant"`
	// InsecureLoopback: the bed's agents listen on loopback and talk plain
	// HTTP with the token, as on one host (agent.Config.InsecureLoopback).
	InsecureLoopback bool `json:"insecure_loopback"`
	// TLSCert, TLSKey, TLSCA: across hosts (Options.Hosts) the agent's
	// certificate (its host's address), key and the bed's CA (tls.go).
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	TLSCA   string `json:"tls_ca,omitempty"`
	// Catalog: Options.Catalog; Proxies: the bed's proxies after the first
	// (Options.Proxies); FaultHooks: Options.FaultHooks.
	Catalog    string   `json:"catalog,omitempty"`
	Proxies    []string `json:"proxies,omitempty"`
	FaultHooks bool     `json:"fault_hooks,omitempty"`
}

// startServers starts Options.Servers agents on b.agentPorts, each knowing
// every other as a peer by name. A server that was started is in b.Servers even if it
// never answered, so that Close stops it.
func (b *Bed) startServers(ctx context.Context, bin string) (err error) {
	ports := b.agentPorts
	peers := map[string]string{}
	for i, u := range b.agentURLs() {
		peers[serverName(i)] = u
	}
	for i := 0; i < b.Opt.Servers; i++ {
		s, err := b.startServer(ctx, i, bin, ports[i], peers)
		if s != nil {
			b.Servers = append(b.Servers, s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startServer writes server i's agent config, makes its cgroup with the
// limits on, starts its agent in the group and waits until it answers.
func (b *Bed) startServer(ctx context.Context, i int, bin string, port int, peers map[string]string) (*Server, error) {
	o := b.Opt
	s := &Server{Name: serverName(i), URL: b.agentURLs()[i], cpus: o.CPUs}
	cfgPath, err := b.writeAgentConfig(i, port, peers)
	if err != nil {
		return nil, err
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
	if err := s.startAgent(b.command(i, bin, "agent", "--config", cfgPath)); err != nil {
		return s, err
	}
	if s.Client, err = agentclient.New(s.URL); err != nil {
		return s, err
	}
	s.Client = s.Client.WithToken(b.token)
	if b.certs != nil {
		tc, err := b.certs.clientTLS()
		if err != nil {
			return s, err
		}
		s.Client = s.Client.WithTLS(tc)
	}
	return s, s.waitReady(ctx)
}

// tenantPorts is how many tenant ports (base+1 … base+n: a tenant's port is
// the base plus its ID) each bed agent's range is checked free for. IDs
// are bed-wide with a shared catalog, so the range covers the IDs of a
// whole bed's tenants, not one server's.
const tenantPorts = 64

// writeAgentConfig writes the config of server i's agent, listening on
// port with a fresh range of tenant ports, into Root, and returns its path.
func (b *Bed) writeAgentConfig(i, port int, peers map[string]string) (string, error) {
	base, err := freeBase(tenantPorts)
	if err != nil {
		return "", err
	}
	name, host := serverName(i), b.serverHost(i)
	var cfg agentConfig
	cfg.Name, cfg.Root, cfg.Listen = name, filepath.Join(b.root, name), net.JoinHostPort(host, strconv.Itoa(port))
	cfg.InsecureLoopback = b.certs == nil
	if b.certs != nil {
		f, err := b.certs.issue(b.root, certs.Request{Name: name, Hosts: []string{host}})
		if err != nil {
			return "", err
		}
		cfg.TLSCert, cfg.TLSKey, cfg.TLSCA = f.Cert, f.Key, f.CA
	}
	cfg.Catalog, cfg.FaultHooks = b.Opt.Catalog, b.Opt.FaultHooks
	cfg.Proxy = b.scheme() + "://" + b.proxyAPIAddr
	for _, p := range b.extraProxies {
		cfg.Proxies = append(cfg.Proxies, b.scheme()+"://"+p.api)
	}
	cfg.TokenFile, cfg.PeerTokenFile, cfg.ProxyTokenFile = b.tokenFile, b.tokenFile, b.proxyTokenFile()
	cfg.RetireGrace = "0s"
	cfg.AnalyzeAfter = "0s"
	cfg.InterferenceModel = b.Opt.InterferenceModel
	cfg.Peers = map[string]string{}
	for n, u := range peers {
		if n != name {
			cfg.Peers[n] = u
		}
	}
	cfg.Tenant.BasePort, cfg.Tenant.SharedBuffers = base, b.Opt.SharedBuffers
	cfg.Tenant.ListenAddr = host
	// The servers share this machine's one disk: a server's commits must not
	// wait on the other server's writes (on separate machines they would
	// not), so commits do not wait for the WAL flush (synchronous_commit
	// off; the WAL writer flushes within 200 ms). Backends push the pages
	// they evict to the disk at once (backend_flush_after), so dirty page
	// cache does not pile up in a server's memory cgroup and stall it in
	// reclaim.
	cfg.Tenant.Settings = map[string]string{"max_wal_size": "1GB", "synchronous_commit": "off", "backend_flush_after": "256kB"}
	for k, v := range b.Opt.Settings {
		cfg.Tenant.Settings[k] = v
	}
	cj, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(b.root, name+".json")
	if err := os.WriteFile(cfgPath, cj, 0o644); err != nil {
		return "", fmt.Errorf("testbed: %w", err)
	}
	return cfgPath, nil
}

// startAgent starts cmd (`bin agent --config …`, in its host), logging to
// s.log, and puts it in s.Group, if any.
func (s *Server) startAgent(cmd *exec.Cmd) error {
	lf, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	defer lf.Close()
	s.cmd = cmd
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	// Its own process group: a ^C to the bench reaches the bench, which
	// stops tenants before agents; the agents never see it first.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fmt.Errorf("testbed: start agent %s: %w", s.Name, err)
	}
	s.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(s.cmd, s.exit)
	// The agent has started no postmaster yet (a fresh root): those it
	// starts from now on inherit the group.
	if s.Group != nil {
		return s.Group.AddPID(s.cmd.Process.Pid)
	}
	return nil
}

// PID is the process id of s's agent; 0 once stopped.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// waitReady waits up to a minute for s's agent to answer.
func (s *Server) waitReady(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := s.Client.Info(wctx); err == nil {
			return nil
		}
		select {
		case <-s.exit:
			return fmt.Errorf("testbed: agent %s exited at start; its log: %s", s.Name, s.log)
		case <-wctx.Done():
			return fmt.Errorf("testbed: agent %s did not answer within a minute; its log: %s", s.Name, s.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// excludeFromReclaim keeps the servers' memory groups out of the host's
// DAMON pageout until Close. Not fatal: when it fails the bed still runs,
// and Describe says the host's reclaim applies.
func (b *Bed) excludeFromReclaim() {
	var groups []string
	for _, s := range b.Servers {
		if s.Group != nil {
			groups = append(groups, "/"+s.Group.Name)
		}
	}
	var err error
	if b.reclaim, err = damon.Exclude(groups...); err != nil {
		b.reclaim, b.reclaimNote = nil, err.Error()
	}
}

// stopTenants stops, through s's agent, every tenant postmaster still
// running on s (they outlive their agent).
func (s *Server) stopTenants(ctx context.Context) []error {
	if s.Client == nil {
		return nil
	}
	ts, err := s.Client.Tenants(ctx, false)
	if err != nil {
		return nil
	}
	var errs []error
	for _, t := range ts {
		if t.Alive {
			if _, err := s.Client.StopTenant(ctx, t.ID); err != nil {
				errs = append(errs, fmt.Errorf("testbed: stop tenant %s on %s: %w", t.Name, s.Name, err))
			}
		}
	}
	return errs
}

// stop stops s's agent (SIGTERM, SIGKILL after 20 s) and removes its group,
// stopping with an immediate shutdown whatever still runs in it (a
// postmaster the agent could not stop).
func (s *Server) stop() error {
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
	if s.Group == nil {
		return nil
	}
	if pids, err := s.Group.PIDs(); err == nil && len(pids) > 0 {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGQUIT)
		}
		time.Sleep(time.Second)
	}
	err := s.Group.Remove()
	s.Group = nil
	return err
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

// serverHost is the address server i's agent and tenants listen on: its
// host's (Options.Hosts), else loopback.
func (b *Bed) serverHost(i int) string {
	if b.Opt.Hosts != nil {
		return b.Opt.Hosts[i].Addr
	}
	return "127.0.0.1"
}

// command is bin with args, run in server i's host (Options.Hosts; i < 0:
// the proxy's), else here.
func (b *Bed) command(i int, bin string, args ...string) *exec.Cmd {
	switch {
	case b.Opt.Hosts == nil:
		return exec.Command(bin, args...)
	case i < 0:
		return b.Opt.ProxyHost.Command(bin, args...)
	}
	return b.Opt.Hosts[i].Command(bin, args...)
}
