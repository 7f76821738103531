package testbed

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/internal/etcdtest"
	"github.com/sluicedb/sluice/lab/internal/testbin"
	"github.com/sluicedb/sluice/lab/ledger"
	"github.com/sluicedb/sluice/lab/netns"
)

// TestHostsEtcdCutOffAtHandover is issue 51's end-to-end case: three hosts
// (network namespaces) with an agent each, all keeping their catalog in one
// three-member etcd cluster (in this process, on the address the hosts
// reach this namespace at, mutual TLS), two proxies in a fourth host
// watching that catalog and both named in every agent's proxies; every API
// is mutual TLS with certificates of one CA. Under a ledger write load
// spread over both proxies a tenant moves from host 1 to host 3 and back.
// Then a third move is paused by the driver's fault hook just before the
// proxies switch (the target on host 3 already promoted, the source on
// host 1 fenced), host 1's link is cut, the driver let go, and the link
// kept down past the driver's etcd lease. Once it returns and the
// migration has ended, a write is tried on the tenant's PostgreSQL on host
// 1 and on host 3 directly, as the tenant's user: exactly one accepts.
// Every acknowledged write is checked row by row at the end.
//
// It runs wherever the machine can make network namespaces (root; CI),
// and skips with the reason elsewhere.
func TestHostsEtcdCutOffAtHandover(t *testing.T) {
	n, hosts := fourHosts(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	caDir := filepath.Join(t.TempDir(), "ca")
	if err := certs.Init(caDir, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	ecrt, err := certs.Issue(caDir, t.TempDir(), certs.Request{Name: "etcd", Hosts: []string{n.RootAddr(), "127.0.0.1"}}, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(caDir, certs.CACertFile)
	ec := etcdtest.StartTLSOn(t, 3, n.RootAddr(), etcdtest.TLS{Cert: ecrt, Key: strings.TrimSuffix(ecrt, ".crt") + ".key", CA: ca})
	b, err := Start(ctx, Options{Binary: testbin.Sluice(t), Hosts: hosts[:3], ProxyHost: hosts[3], Proxies: 2,
		CADir: caDir, Catalog: "etcd://" + strings.Join(ec.Endpoints, ",") + "/e2e", FaultHooks: true,
		CPUs: -1, MemoryMB: -1, LogDir: t.TempDir(), Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tn, err := b.CreateTenant(ctx, 0, "e2e", 20e6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Setup(ctx, tn.DSN); err != nil {
		t.Fatal(err)
	}
	if err := execOn(ctx, tn.DSN, "CREATE TABLE probe (host text)"); err != nil {
		t.Fatal(err)
	}
	w := &ledger.Workload{Router: alternate(b.ProxyAddrs()), ConnString: b.ClientDSNAt(tn.Name), Rate: 200, Workers: 4}
	wctx, stopWrites := context.WithCancel(ctx)
	written := make(chan struct{})
	go func() { w.Run(wctx); close(written) }()
	defer func() { stopWrites(); <-written }()

	for _, to := range []int{2, 0} {
		waitAcked(t, ctx, w, 100)
		m, err := b.Migrate(ctx, tn, to, agentclient.StartMigration{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if owner, _, err := b.Owner(ctx, tn); err != nil || owner != to {
			t.Fatalf("after migration %s: owner %d (%v), want %d", m.ID, owner, err, to)
		}
		t.Logf("moved to %s: freeze %.1f ms", b.Servers[to].Name, m.Summary.FreezeMS)
	}

	waitAcked(t, ctx, w, 100)
	m := cutOffAtHandover(t, ctx, b, hosts[0], tn)
	writable := writableCopies(t, ctx, b, tn, 0, 2)
	if len(writable) != 1 {
		t.Fatalf("after host 1 was cut off at the handover (migration %s %s: %q): %d writable copies %v, want exactly one", m.ID, m.Outcome, m.Error, len(writable), writable)
	}
	t.Logf("the one writable copy: %s", writable[0])
	// Writes are acknowledged again through the proxies.
	waitAcked(t, ctx, w, 100)
	stopWrites()
	<-written
	rep, err := w.Verify(ctx, tn.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ledger: %+v; workload %+v", rep, w.Stats())
	if rep.Acknowledged == 0 || rep.Missing != 0 || rep.Duplicated != 0 {
		t.Fatalf("ledger not exact: %+v", rep)
	}
}

// cutOffAtHandover moves tn from host 1 (server 0) to host 3, paused by
// host 1's fault hook before the proxies switch; it cuts host 1's link
// there, lets the driver go, keeps the link down past the driver's etcd
// lease (catalog.DefaultLeaseTTL, 10 s), brings it back and returns the
// migration's final record.
func cutOffAtHandover(t *testing.T, ctx context.Context, b *Bed, h1 *netns.Host, tn Tenant) agentclient.Migration {
	t.Helper()
	_, id, err := b.Owner(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	src := b.Servers[0].Client
	const point = "before:switch"
	if err := src.Do(ctx, http.MethodPost, "/v1/debug/pause", map[string]string{"point": point}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := src.StartMigration(ctx, agentclient.StartMigration{Tenant: id, To: b.Servers[2].Name})
	if err != nil {
		t.Fatal(err)
	}
	for {
		var s struct{ Reached bool }
		if err := src.Do(ctx, http.MethodGet, "/v1/debug/pause", nil, &s); err != nil {
			t.Fatal(err)
		}
		if s.Reached {
			break
		}
		if m, err = src.Migration(ctx, m.ID); err != nil || m.Done {
			t.Fatalf("migration %s ended (%v) before its handover could be cut: %+v", m.ID, err, m)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("migration %s never reached %s: %+v", m.ID, point, m.Progress)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := h1.SetLink(false); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	t.Logf("host 1 cut off at %s", point)
	// The resume call itself cannot cross the cut link: the agent is asked
	// from inside host 1.
	if out, err := h1.Command("curl", "-sS", "--cacert", b.certs.ca, "--cert", b.certs.client.Cert, "--key", b.certs.client.Key,
		"-H", "Authorization: Bearer "+b.token, "-X", "POST", b.Servers[0].URL+"/v1/debug/resume").CombinedOutput(); err != nil {
		t.Fatalf("resume from inside host 1: %v: %s", err, out)
	}
	time.Sleep(time.Until(cut.Add(15 * time.Second)))
	if err := h1.SetLink(true); err != nil {
		t.Fatal(err)
	}
	t.Logf("host 1 back after %v", time.Since(cut).Round(time.Second))
	// The driver lost its lease while cut off and stopped driving; once the
	// link is back the agent takes the tenant's lock again and resumes or
	// rolls back from the catalog's record (agent retakeMigration), with
	// no restart.
	for !m.Done {
		select {
		case <-ctx.Done():
			t.Fatalf("migration %s not taken up again after the link returned: %+v", m.ID, m)
		case <-time.After(500 * time.Millisecond):
		}
		if x, err := src.Migration(ctx, m.ID); err == nil {
			m = x
		}
	}
	t.Logf("migration %s: outcome %s, error %q", m.ID, m.Outcome, m.Error)
	return m
}

// writableCopies tries one write, as the tenant's user and directly (not
// through a proxy), on tn's PostgreSQL on each of the servers named, and
// returns those that accepted it. A copy that is gone, stopped, a standby
// or fenced refuses.
func writableCopies(t *testing.T, ctx context.Context, b *Bed, tn Tenant, servers ...int) []string {
	t.Helper()
	var ok []string
	for _, i := range servers {
		s := b.Servers[i]
		ts, err := s.Client.Tenants(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		tried := map[int]bool{} // a moved-away record and the running one may share a port
		for _, x := range ts {
			if x.Name != tn.Name || tried[x.Port] {
				continue
			}
			tried[x.Port] = true
			dsn := fmt.Sprintf("postgres://%s:%s@%s/%s?connect_timeout=5", b.user.Name, b.user.Password, net.JoinHostPort(x.Host, strconv.Itoa(x.Port)), x.Database)
			err := execOn(ctx, dsn, "INSERT INTO probe VALUES ('"+s.Name+"')")
			t.Logf("write on %s's copy (state %s, port %d): %v", s.Name, x.State, x.Port, err)
			if err == nil {
				ok = append(ok, s.Name)
				break
			}
		}
	}
	return ok
}

// execOn runs sql in a connection of its own to dsn.
func execOn(ctx context.Context, dsn, sql string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(cctx, sql)
	return err
}

// alternate sends writes to one proxy of addrs for half a second, then to
// the next: every worker's connection crosses both proxies in turn, and
// both carry writes throughout (a handover holds them on both).
type alternate []string

func (a alternate) Enter(ctx context.Context) (string, error) {
	return a[int(time.Now().UnixMilli()/500)%len(a)], ctx.Err()
}
func (alternate) Leave() {}
