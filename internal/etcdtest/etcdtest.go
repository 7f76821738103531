// Package etcdtest runs a real etcd cluster inside a test process
// (go.etcd.io/etcd/server/v3/embed): n members on free loopback ports, their
// data in a temporary directory. For tests only; the product links none of
// it.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Cluster is a running in-process etcd cluster.
type Cluster struct {
	// Endpoints are the members' client addresses (host:port), in member order.
	Endpoints []string

	dir     string
	members []*embed.Etcd
	stopped []bool
	cfgs    []*embed.Config
}

// Start starts an n-member cluster for t, stopped at t's cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := StartDir(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TLS names the PEM files of a cluster that speaks mutual TLS: every
// member presents Cert (for 127.0.0.1) to clients and peers, and requires
// theirs to chain to CA.
type TLS struct{ Cert, Key, CA string }

// StartTLS is Start for a cluster whose clients and peers speak mutual TLS
// (https URLs; Endpoints stay host:port).
func StartTLS(t testing.TB, n int, files TLS) *Cluster {
	t.Helper()
	c, err := startDir(t.TempDir(), n, &files)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartTLSOn is StartTLS with the members listening on host (an IPv4
// address of this machine other than loopback, e.g. one that network
// namespaces reach through a router) instead of 127.0.0.1; Cert must name
// host.
func StartTLSOn(t testing.TB, n int, host string, files TLS) *Cluster {
	t.Helper()
	c, err := startDirOn(t.TempDir(), n, host, &files)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartDir starts an n-member cluster with its data under dir and waits
// until every member is ready (a leader elected).
func StartDir(dir string, n int) (*Cluster, error) { return startDir(dir, n, nil) }

func startDir(dir string, n int, files *TLS) (*Cluster, error) {
	return startDirOn(dir, n, "127.0.0.1", files)
}

func startDirOn(dir string, n int, host string, files *TLS) (*Cluster, error) {
	ports, err := freePorts(host, 2*n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, members: make([]*embed.Etcd, n), stopped: make([]bool, n), cfgs: make([]*embed.Config, n)}
	var initial []string
	cfgs := make([]*embed.Config, n)
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		scheme := "http"
		if files != nil {
			scheme = "https"
			info := transport.TLSInfo{CertFile: files.Cert, KeyFile: files.Key, TrustedCAFile: files.CA, ClientCertAuth: true}
			cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
		}
		cu := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, fmt.Sprint(ports[2*i]))}
		pu := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, fmt.Sprint(ports[2*i+1]))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.InitialClusterToken = "etcdtest"
		// Not "error": every member logs "setting up serving … failed:
		// server closed" at error level when it is closed, which buries a
		// failing test's own output in CI's log.
		cfg.LogLevel = "fatal"
		cfgs[i] = cfg
		c.cfgs[i] = cfg
		initial = append(initial, cfg.Name+"="+pu.String())
		c.Endpoints = append(c.Endpoints, cu.Host)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = fmt.Errorf("etcdtest: start %s: %w", cfg.Name, err)
				return
			}
			c.members[i] = e
			select {
			case <-e.Server.ReadyNotify():
			case <-time.After(30 * time.Second):
				errs[i] = fmt.Errorf("etcdtest: %s not ready after 30 s", cfg.Name)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Stop stops member i (the others keep a quorum when n ≥ 3).
func (c *Cluster) Stop(i int) {
	if c.members[i] != nil && !c.stopped[i] {
		c.members[i].Close()
		c.stopped[i] = true
	}
}

// Restart starts stopped member i again on its data and addresses, and
// waits until it is ready (it rejoined, or with n = 1 it leads again).
func (c *Cluster) Restart(i int) error {
	if !c.stopped[i] {
		return fmt.Errorf("etcdtest: member %d is running", i)
	}
	cfg := c.cfgs[i]
	cfg.ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: restart %s: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("etcdtest: %s not ready 30 s after its restart", cfg.Name)
	}
	c.members[i], c.stopped[i] = e, false
	return nil
}

// Leader returns the index of the member that leads (-1: none known).
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		if m != nil && !c.stopped[i] && m.Server.Leader() == m.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Close stops every member and removes the data directory.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Stop(i)
	}
	os.RemoveAll(c.dir)
}

// freePorts returns n distinct ports of host free at the time of the call.
func freePorts(host string, n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("etcdtest: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
