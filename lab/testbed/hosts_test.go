package testbed

import (
	"context"
	"testing"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/internal/testbin"
	"github.com/sluicedb/sluice/lab/ledger"
	"github.com/sluicedb/sluice/lab/netns"
)

// TestHostsMoveAndCutOff runs sluice across hosts: three network
// namespaces with an agent each (its tenants' postmasters inside), the
// proxy in a fourth, links shaped to 80 Mbit/s. Under a ledger write load
// through the proxy a tenant moves from host 1 to host 3 and back; then a
// third move starts and host 1 is cut off (link down) during the copy,
// past the migration's deadline: the driver, on host 1, rolls back, and
// once the link returns the target is cleaned up and the tenant serves on
// host 1. Every acknowledged write is checked row by row at the end.
//
// It runs wherever the machine can make network namespaces (root; CI),
// and skips with the reason elsewhere.
func TestHostsMoveAndCutOff(t *testing.T) {
	_, hosts := fourHosts(t, 80)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := Start(ctx, Options{Binary: testbin.Sluice(t), Hosts: hosts[:3], ProxyHost: hosts[3],
		CPUs: -1, MemoryMB: -1, LogDir: t.TempDir(), Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tn, err := b.CreateTenant(ctx, 0, "wan", 40e6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Setup(ctx, tn.DSN); err != nil {
		t.Fatal(err)
	}
	w := &ledger.Workload{Router: fixedRouter(b.ProxyAddr()), ConnString: func(string) string { return tn.DSN }, Rate: 200, Workers: 4}
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
	m := cutOffDuringCopy(t, ctx, b, hosts[0], tn)
	if m.Outcome == "committed" {
		t.Fatalf("migration %s committed although its source was cut off past its deadline", m.ID)
	}
	if owner, _, err := b.Owner(ctx, tn); err != nil || owner != 0 {
		t.Fatalf("after the cut: owner %d (%v), want host 1 (0)", owner, err)
	}
	if ts, err := b.Servers[2].Client.Tenants(ctx, false); err != nil || len(ts) != 0 {
		t.Fatalf("host 3 keeps %d tenants after the rollback (%v): %+v", len(ts), err, ts)
	}
	// The rollback dropped the migration's replication slot on host 1.
	if slots, _, err := b.Slots(ctx); err != nil || len(slots) != 0 {
		t.Fatalf("slots left after the rollback (%v): %+v", err, slots)
	}
	// The tenant serves on host 1 again: new writes are acknowledged.
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

// cutOffDuringCopy starts moving tn from host 1 (server 0) to host 3 with
// a 15 s deadline, takes host 1's link down once the snapshot has sent
// bytes, keeps it down past the deadline, brings it back and returns the
// migration's final record.
func cutOffDuringCopy(t *testing.T, ctx context.Context, b *Bed, h1 *netns.Host, tn Tenant) agentclient.Migration {
	t.Helper()
	_, id, err := b.Owner(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	src := b.Servers[0].Client
	const deadline = 15 * time.Second
	started := time.Now()
	m, err := src.StartMigration(ctx, agentclient.StartMigration{Tenant: id, To: b.Servers[2].Name, Deadline: deadline.String()})
	if err != nil {
		t.Fatal(err)
	}
	for m.Progress.Phase != "snapshot" || m.Progress.Bytes == 0 {
		if m.Done {
			t.Fatalf("migration %s ended before its copy could be cut: %+v", m.ID, m)
		}
		time.Sleep(50 * time.Millisecond)
		if m, err = src.Migration(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := h1.SetLink(false); err != nil {
		t.Fatal(err)
	}
	t.Logf("host 1 cut off at %d of %d snapshot bytes", m.Progress.Bytes, m.Progress.TotalBytes)
	// Down until 5 s past the deadline: the driver gives up while cut off.
	time.Sleep(time.Until(started.Add(deadline + 5*time.Second)))
	if err := h1.SetLink(true); err != nil {
		t.Fatal(err)
	}
	t.Logf("host 1 back after %v", time.Since(started).Round(time.Second))
	for !m.Done {
		select {
		case <-ctx.Done():
			t.Fatalf("migration %s not done: %+v", m.ID, m.Progress)
		case <-time.After(500 * time.Millisecond):
		}
		if x, err := src.Migration(ctx, m.ID); err == nil {
			m = x
		}
	}
	t.Logf("migration %s: outcome %s, error %q", m.ID, m.Outcome, m.Error)
	return m
}

// waitAcked waits until w has n more acknowledged writes than now (progress
// of the workload, not a timing).
func waitAcked(t *testing.T, ctx context.Context, w *ledger.Workload, n int) {
	t.Helper()
	want := w.Stats().Acknowledged + n
	for w.Stats().Acknowledged < want {
		select {
		case <-ctx.Done():
			t.Fatalf("writes stalled: %+v", w.Stats())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fixedRouter sends every write to one address (the proxy's).
type fixedRouter string

func (r fixedRouter) Enter(ctx context.Context) (string, error) { return string(r), ctx.Err() }
func (fixedRouter) Leave()                                      {}

var _ ledger.Router = fixedRouter("")

// fourHosts makes host1, host2, host3 and proxy, network namespaces linked
// by a router, each link shaped to mbit (0: unshaped), removed at the
// test's end; it skips where namespaces cannot be made.
func fourHosts(t *testing.T, mbit float64) (*netns.Net, []*netns.Host) {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skip(err)
	}
	n, err := netns.New(netns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	var hosts []*netns.Host
	for _, name := range []string{"host1", "host2", "host3", "proxy"} {
		h, err := n.AddHost(name)
		if err != nil {
			t.Fatal(err)
		}
		if mbit > 0 {
			if err := h.Shape(mbit); err != nil {
				t.Fatal(err)
			}
		}
		hosts = append(hosts, h)
	}
	return n, hosts
}
