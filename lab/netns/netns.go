// Package netns makes "hosts" on one machine for the lab's multi-host tests
// and benchmarks: each host is a Linux network namespace with its own IPv4
// address, linked point to point (a veth pair) to one router namespace that
// forwards between them. The lab's own process stays in the machine's
// namespace and reaches every host through a further veth pair to the router.
//
//	         root namespace (the test, the workload, the CLI)
//	                │ 10.N.0.1
//	                │ 10.N.0.2
//	         ┌─── router ───┐   forwards; the delay line's tun (delay.go)
//	10.N.1.1 │      …       │ 10.N.k.1
//	10.N.1.2 │              │ 10.N.k.2
//	       host 1   …     host k   (eth0 in each; default route via the router)
//
// A host's link is its two veth ends: Shape caps it in bandwidth in both
// directions (a tbf qdisc on each end's egress: this kernel has tc's tbf and
// htb, not netem), Net.ShapePath caps only the traffic between two hosts
// (an htb class in the router), SetLink(false) takes it down (the router's end: the host
// is cut off from everyone, its processes keep running), Net.Delay adds a
// fixed one-way delay and optional loss between two hosts through a
// user-space delay line in the router (delay.go). Processes run inside a
// host through `ip netns exec` (Host.Command); Go code opens sockets inside
// one with Host.Do (setns on a locked OS thread: a socket keeps the
// namespace it was made in).
//
// Names: every namespace of a Net is named "sluicelab-<pid>-<N>-<host>",
// with the creating process's id, so that RemoveStale can find and remove
// those of a run that was killed before its Close. N (10.N.0.0/16, 200–254)
// is chosen free among the namespaces and addresses present.
//
// A Net is an adapter: it runs ip(8) and tc(8) and needs root. Available
// says whether this machine can make one.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// Prefix starts the name of every namespace this package makes.
const Prefix = "sluicelab-"

// Net is a set of hosts around one router namespace.
type Net struct {
	id     int    // N of 10.N.0.0/16
	name   string // "sluicelab-<pid>-<N>"
	router string // the router's namespace
	rootIf string // the root namespace's end of its link to the router
	mtu    int

	mu    sync.Mutex
	hosts []*Host
	delay *delayLine
	htb   map[string]bool // the router's links with an htb root (ShapePath)
}

// Host is one namespace with its address.
type Host struct {
	Name string // as given to AddHost
	NS   string // the namespace's name
	Addr string // its IPv4 address (on its eth0)

	net      *Net
	index    int    // k of 10.N.k.0/24
	routerIf string // the router's end of its link
}

// Options configure a Net. Zero values take the defaults noted.
type Options struct {
	// MTU of every link, bytes, 576–65535; default 1500. The delay line
	// handles one packet per read: a larger MTU means fewer packets at a
	// given bandwidth.
	MTU int
}

// Available reports why this machine cannot make a Net (not root, no ip(8)
// or tc(8), network namespaces refused), or nil when it can. Tests skip
// with its message.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root (network namespaces and veth links)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("netns: %s(8) not found (Debian's iproute2)", tool)
		}
	}
	probe := fmt.Sprintf("%s%d-probe", Prefix, os.Getpid())
	if err := ip("netns", "add", probe); err != nil {
		return fmt.Errorf("netns: cannot make a network namespace: %w", err)
	}
	defer ip("netns", "del", probe)
	if err := ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"); err != nil {
		return fmt.Errorf("netns: cannot make a veth pair: %w", err)
	}
	return nil
}

// New makes the router namespace and its link to this process's namespace.
// Close removes everything the Net made.
func New(opt Options) (_ *Net, err error) {
	if opt.MTU == 0 {
		opt.MTU = 1500
	}
	if opt.MTU < 576 || opt.MTU > 65535 {
		return nil, fmt.Errorf("netns: MTU %d: want 576..65535", opt.MTU)
	}
	if err := RemoveStale(); err != nil {
		return nil, err
	}
	n, err := claim(opt.MTU)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	steps := [][]string{
		{"-n", n.router, "link", "set", "lo", "up"},
		{"addr", "add", n.addr(0, 1) + "/24", "dev", n.rootIf},
		{"link", "set", n.rootIf, "up"},
		{"-n", n.router, "addr", "add", n.addr(0, 2) + "/24", "dev", "up0"},
		{"-n", n.router, "link", "set", "up0", "up"},
		{"route", "add", fmt.Sprintf("10.%d.0.0/16", n.id), "via", n.addr(0, 2)},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	// Forward between the links; no reverse-path filter, so that packets
	// the delay line hands back (arriving on its tun) are accepted.
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/ipv4/conf/all/rp_filter", "0"}, {"net/ipv4/conf/default/rp_filter", "0"}} {
		if err := n.sysctl(n.router, kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// claim makes the router namespace of a new Net and its link to this
// namespace, named for a free N: the link's name, slab<N>, is the claim
// (another process making a Net at the same moment may pick the same N;
// one of the two links is refused, and that one tries the next N).
func claim(mtu int) (*Net, error) {
	taken := map[int]bool{}
	for try := 0; try < 5; try++ {
		id, err := freeID(taken)
		if err != nil {
			return nil, err
		}
		n := &Net{mtu: mtu, id: id}
		n.name = fmt.Sprintf("%s%d-%d", Prefix, os.Getpid(), n.id)
		n.router = n.name + "-router"
		n.rootIf = fmt.Sprintf("slab%d", n.id)
		if err := ip("netns", "add", n.router); err != nil {
			return nil, err
		}
		m := strconv.Itoa(mtu)
		err = ip("link", "add", n.rootIf, "mtu", m, "type", "veth", "peer", "name", "up0", "mtu", m, "netns", n.router)
		if err == nil {
			return n, nil
		}
		removeNS(n.router)
		if !strings.Contains(err.Error(), "exists") {
			return nil, err
		}
		taken[id] = true
	}
	return nil, errors.New("netns: no free 10.N.0.0/16 after 5 tries")
}

// addr is 10.N.k.last.
func (n *Net) addr(k, last int) string { return fmt.Sprintf("10.%d.%d.%d", n.id, k, last) }

// RootAddr is this process's address on the Net: where hosts reach it.
func (n *Net) RootAddr() string { return n.addr(0, 1) }

// AddHost makes host name (letters, digits, '-'; at most 20 characters): a
// namespace linked to the router, with its address and a default route.
func (n *Net) AddHost(name string) (_ *Host, err error) {
	if !validName(name) {
		return nil, fmt.Errorf("netns: host name %q: want 1..20 letters, digits or '-'", name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.hosts {
		if h.Name == name {
			return nil, fmt.Errorf("netns: host %q exists", name)
		}
	}
	k := len(n.hosts) + 1
	if k > 250 {
		return nil, errors.New("netns: at most 250 hosts")
	}
	h := &Host{Name: name, NS: n.name + "-" + name, Addr: n.addr(k, 2), net: n, index: k, routerIf: fmt.Sprintf("h%d", k)}
	if err := ip("netns", "add", h.NS); err != nil {
		return nil, err
	}
	n.hosts = append(n.hosts, h)
	mtu := strconv.Itoa(n.mtu)
	steps := [][]string{
		{"-n", h.NS, "link", "set", "lo", "up"},
		{"-n", n.router, "link", "add", h.routerIf, "mtu", mtu, "type", "veth", "peer", "name", "eth0", "mtu", mtu, "netns", h.NS},
		{"-n", n.router, "addr", "add", n.addr(k, 1) + "/24", "dev", h.routerIf},
		{"-n", n.router, "link", "set", h.routerIf, "up"},
		{"-n", h.NS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
		{"-n", h.NS, "route", "add", "default", "via", n.addr(k, 1)},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, fmt.Errorf("netns: host %s: %w", name, err)
		}
	}
	return h, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// Hosts are the Net's hosts in the order they were added.
func (n *Net) Hosts() []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Host(nil), n.hosts...)
}

// Command is name run with args inside h's namespace (`ip netns exec`,
// which execs it: the process's id is the command's own).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// SetLink takes h's link down (false: h is cut off from every other host
// and from this process; its processes and their connections stay, and
// TCP retransmits until the link returns or gives up) or up again (true).
func (h *Host) SetLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if err := ip("-n", h.net.router, "link", "set", h.routerIf, state); err != nil {
		return fmt.Errorf("netns: link of %s %s: %w", h.Name, state, err)
	}
	return nil
}

// Close stops the delay line, kills whatever still runs in the Net's
// namespaces and removes them (with them their links, routes and qdiscs).
// Safe to call more than once.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	if n.delay != nil {
		n.delay.close()
		n.delay = nil
	}
	for _, h := range n.hosts {
		errs = append(errs, removeNS(h.NS))
	}
	n.hosts = nil
	if n.router != "" {
		errs = append(errs, removeNS(n.router))
		n.router = ""
	}
	return errors.Join(errs...)
}

// removeNS kills the processes left in namespace ns and deletes it.
func removeNS(ns string) error {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
	}
	return ip("netns", "del", ns)
}

// RemoveStale removes the namespaces (and so the links) of Nets whose
// creating process is gone: a run killed before its Close.
func RemoveStale() error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("netns: ip netns list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], Prefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(f[0], Prefix), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its run is alive
		}
		errs = append(errs, removeNS(f[0]))
	}
	return errors.Join(errs...)
}

// freeID picks N in 200..254, not in taken, such that no namespace of this
// package and no address or route of this namespace uses 10.N.
func freeID(taken map[int]bool) (int, error) {
	used := maps.Clone(taken)
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], Prefix) {
				continue
			}
			if p := strings.Split(f[0], "-"); len(p) >= 3 {
				if id, err := strconv.Atoi(p[2]); err == nil {
					used[id] = true
				}
			}
		}
	}
	addrs, _ := exec.Command("ip", "-o", "addr").Output()
	routes, _ := exec.Command("ip", "route").Output()
	for id := 200; id <= 254; id++ {
		pre := fmt.Sprintf("10.%d.", id)
		if !used[id] && !bytes.Contains(addrs, []byte(pre)) && !bytes.Contains(routes, []byte(pre)) {
			return id, nil
		}
	}
	return 0, errors.New("netns: no free 10.N.0.0/16 (N 200..254) for a new net")
}

// sysctl writes value to /proc/sys/key inside namespace ns.
func (n *Net) sysctl(ns, key, value string) error {
	return inNS(ns, func() error {
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	})
}

func ip(args ...string) error { return run("ip", args...) }
func tc(args ...string) error { return run("tc", args...) }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
