package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
)

// TestProxyRouterWarnsSlowCalls: a handover call to the proxy that takes
// longer than slowProxyCall is logged with its name and tenant, and its
// error is passed through.
func TestProxyRouterWarnsSlowCalls(t *testing.T) {
	var logged bytes.Buffer
	p := proxyRouter{name: "t1", log: slog.New(slog.NewTextHandler(&logged, nil))}
	boom := errors.New("boom")
	err := p.timed("release", func() error {
		time.Sleep(slowProxyCall + 10*time.Millisecond)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	line := logged.String()
	for _, want := range []string{`msg="slow proxy call"`, "call=release", "tenant=t1", "took="} {
		if !strings.Contains(line, want) {
			t.Fatalf("log %q lacks %s", line, want)
		}
	}
	// Without a logger nothing is written and the call still runs.
	ran := false
	if err := (proxyRouter{}).timed("hold", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("timed without a logger: ran %v, err %v", ran, err)
	}
}

// heldProbeRouter is a DirectRouter that asks the source agent's GET
// /v1/tenants, at the switch and at the release, whether it says the tenant
// is held, as a proxy polling the catalog would.
type heldProbeRouter struct {
	migration.DirectRouter
	c                   func() *client.Client
	id                  int64
	atSwitch, atRelease chan bool
}

func (r heldProbeRouter) probe(ctx context.Context, ch chan bool) {
	tn, err := r.c().Tenant(ctx, r.id)
	select {
	case ch <- err == nil && tn.Held:
	default:
	}
}

func (r heldProbeRouter) Switch(ctx context.Context, _, _ string) error {
	r.probe(ctx, r.atSwitch)
	return nil
}

func (r heldProbeRouter) Release(ctx context.Context, _ string) (time.Time, error) {
	r.probe(ctx, r.atRelease)
	return time.Time{}, nil
}

// TestTenantHeldEndsBeforeRelease: the catalog says a tenant is held from
// the hold until the release begins, not until the driver records the
// proxies' answer — a proxy polling it between the two would otherwise hold
// the tenant again after its release.
func TestTenantHeldEndsBeforeRelease(t *testing.T) {
	c1, c2 := agentPair(t)
	var a1 *testAgent
	r := heldProbeRouter{c: func() *client.Client { return a1.c }, atSwitch: make(chan bool, 1), atRelease: make(chan bool, 1)}
	c1.RouterFor = func(id int64) migration.Router { r.id = id; return r }
	a1 = startAgent(t, c1)
	startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	if m = waitMigration(t, a1.c, m.ID, 2*time.Minute, nil); m.Outcome != "committed" {
		t.Fatalf("migration ended %s (%s)", m.Outcome, m.Error)
	}
	if !<-r.atSwitch {
		t.Error("GET /v1/tenants did not say held between the hold and the release")
	}
	if <-r.atRelease {
		t.Error("GET /v1/tenants still said held once the release began")
	}
}
