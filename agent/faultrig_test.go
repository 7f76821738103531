package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// The fault-injection rig: two `sluice agent` processes and a `sluice proxy`
// process that follows both agents' catalogs, a tenant with data, a writer
// through the proxy that keeps a ledger of acknowledged writes, and a probe
// that tries to write on both copies at every sample. faults_test.go runs
// the matrix on it.

// procProxy is a `sluice proxy` subprocess, restartable with the same command.
type procProxy struct {
	proc
	api    string // http://host:port
	token  string // its API token
	listen string // host:port for clients
}

// faultRig is one cell's world.
type faultRig struct {
	t              *testing.T
	src, dst       *procAgent
	srcCfg, dstCfg Config
	proxy          *procProxy
	tn             client.Tenant
	srcCS, dstCS   string // direct to the tenant's source and target postmasters
	proxyCS        string // through the proxy
}

// rigOptions shape a fault rig.
type rigOptions struct {
	mb        int                    // MiB of data in the tenant
	noCatalog bool                   // the proxy follows no catalog (and so has no route for the tenant)
	mod       func(i int, c *Config) // changes each agent's config further, if set
}

// newFaultRig starts the agents (fault hooks on, the proxy as their
// router), the proxy, and a tenant "victim" with data, routed by the proxy
// (unless o.noCatalog).
func newFaultRig(t *testing.T, o rigOptions) *faultRig {
	r := &faultRig{t: t}
	bin := buildSluice(t)
	lport, _ := pgcluster.FreePort()
	aport, _ := pgcluster.FreePort()
	proxyAPI := fmt.Sprintf("http://127.0.0.1:%d", aport)
	dir := pgtest.TempDir(t)
	proxyToken := writeTokenFile(t, "proxy-token")
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("%q %q\n", testUsers[0].Name, testUsers[0].Password)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.src, r.dst = procPairWith(t, func(i int, c *Config) {
		c.FaultHooks = true
		c.Proxy, c.ProxyTokenFile = proxyAPI, proxyToken
		if o.mod != nil {
			o.mod(i, c)
		}
	})
	r.srcCfg, r.dstCfg = r.src.config(), r.dst.config()
	r.proxy = &procProxy{api: proxyAPI, token: "proxy-token", listen: fmt.Sprintf("127.0.0.1:%d", lport)}
	r.proxy.proc = proc{t: t, bin: bin, log: filepath.Join(dir, "proxy.log"),
		args: []string{"proxy", "--listen", r.proxy.listen, "--api", fmt.Sprintf("127.0.0.1:%d", aport),
			"--auth-file", users, "--token-file", proxyToken, "--catalog-token-file", r.srcCfg.PeerTokenFile, "--quiet"}}
	pc := proxyclient.New(proxyAPI, nil).WithToken(r.proxy.token)
	r.proxy.ready = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := pc.Routes(ctx)
		return err
	}
	if o.noCatalog {
		r.proxy.args = append(r.proxy.args, "--route", "bystander=127.0.0.1:1") // a proxy needs a route
	} else {
		r.proxy.args = append(r.proxy.args, "--catalog", r.src.url, "--catalog", r.dst.url)
	}
	t.Cleanup(func() {
		r.proxy.stop()
		if t.Failed() {
			b, _ := os.ReadFile(r.proxy.log)
			t.Logf("--- proxy log ---\n%s", b)
		}
	})
	r.proxy.start()
	ctx := ctxT(t)
	tn, err := r.src.c.CreateTenant(ctx, client.CreateTenant{Name: "victim", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	r.tn = tn
	r.srcCS = appConnString(tn.Port)
	r.dstCS = appConnString(r.dstCfg.Tenant.BasePort + int(tn.ID))
	r.proxyCS = fmt.Sprintf("postgres://%s:%s@%s/victim?sslmode=disable", testUsers[0].Name, testUsers[0].Password, r.proxy.listen)
	loadData(t, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", tn.Dir, tn.Port), o.mb)
	if !o.noCatalog {
		r.waitRouted()
	}
	return r
}

// config reads back the agent's config file.
func (p *procAgent) config() Config {
	var c Config
	b, err := os.ReadFile(p.cfg)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// waitRouted waits until a client reaches the tenant through the proxy.
func (r *faultRig) waitRouted() {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, r.proxyCS)
		if err == nil {
			conn.Close(ctx)
			cancel()
			return
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatal("the proxy never routed the tenant")
}

// waitProxyRoute waits until the proxy routes the tenant to port on
// 127.0.0.1, held or not as held says.
func (r *faultRig) waitProxyRoute(port int, held bool) {
	r.t.Helper()
	pc := proxyclient.New(r.proxy.api, nil).WithToken(r.proxy.token)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	var last []proxyclient.Route
	for time.Now().Before(deadline) {
		last, _ = pc.Routes(context.Background())
		for _, rt := range last {
			if rt.Tenant == "victim" && rt.Addr == addr && rt.Held == held {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("the restarted proxy never routed the tenant to %s (held %t): %+v", addr, held, last)
}

// pause arms the source agent's driver to stop at point.
func (r *faultRig) pause(point string) {
	r.t.Helper()
	if err := r.src.c.Do(ctxT(r.t), http.MethodPost, "/v1/debug/pause", pauseState{Point: point}, nil); err != nil {
		r.t.Fatal(err)
	}
}

// waitPaused waits until the source's driver is paused at the armed point;
// it fails the test if the migration ends first.
func (r *faultRig) waitPaused(mid string) {
	r.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		var s pauseState
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.src.c.Do(ctx, http.MethodGet, "/v1/debug/pause", nil, &s)
		if err == nil && s.Reached {
			cancel()
			return
		}
		m, err := r.src.c.Migration(ctx, mid)
		cancel()
		if err == nil && m.Done {
			r.t.Fatalf("migration ended (%s: %s) before reaching the fault point", m.Outcome, m.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatal("the driver never reached the fault point")
}

// resume lets the source's paused driver go on.
func (r *faultRig) resume() {
	r.t.Helper()
	if err := r.src.c.Do(ctxT(r.t), http.MethodPost, "/v1/debug/resume", nil, nil); err != nil {
		r.t.Fatal(err)
	}
}

// postmasterPID reads the pid of the tenant's postmaster under root.
func (r *faultRig) postmasterPID(root string) int {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "tenants", strconv.FormatInt(r.tn.ID, 10), "postmaster.pid"))
	if err != nil {
		r.t.Fatalf("postmaster pid: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		r.t.Fatal(err)
	}
	return pid
}

// ownerProbe tries to write on both copies at every sample, the target
// first: a target that accepts a write was promoted before the source was
// probed, so a source accepting one in the same sample is a second
// writable copy. A probe's write never commits (the DO block raises).
type ownerProbe struct {
	cs [2]string // source, target

	mu       sync.Mutex
	samples  int
	both     int
	writable [2]int
	firstTwo time.Time
}

const probeSQL = "DO $$BEGIN INSERT INTO ledger (id, pad) VALUES (-1, 'probe'); RAISE EXCEPTION 'probe-wrote'; END$$"

func (p *ownerProbe) run(ctx context.Context) {
	var conns [2]*pgconn.PgConn
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	try := func(i int) bool {
		if conns[i] == nil {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			c, err := pgconn.Connect(cctx, p.cs[i])
			cancel()
			if err != nil {
				return false
			}
			conns[i] = c
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := conns[i].Exec(qctx, probeSQL).ReadAll()
		cancel()
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Message == "probe-wrote"
		}
		conns[i].Close(context.Background())
		conns[i] = nil
		return false
	}
	for ctx.Err() == nil {
		tw := try(1)
		sw := try(0)
		p.mu.Lock()
		p.samples++
		if sw {
			p.writable[0]++
		}
		if tw {
			p.writable[1]++
		}
		if sw && tw {
			p.both++
			if p.firstTwo.IsZero() {
				p.firstTwo = time.Now()
			}
		}
		p.mu.Unlock()
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

func (p *ownerProbe) result() (samples, both int, writable [2]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.samples, p.both, p.writable
}

// background runs f until the returned stop is called.
func background(f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f(ctx); close(done) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}
