package monitor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
)

type fakeProxy struct {
	byServer map[string][]client.Window
	err      error
}

func (f fakeProxy) Latency(context.Context, string) ([]client.Window, error) { return nil, f.err }
func (f fakeProxy) ServerLatency(_ context.Context, addr string) ([]client.Window, error) {
	return f.byServer[addr], f.err
}

var _ latencyReader = fakeProxy{}

func TestProxySignals(t *testing.T) {
	fp := fakeProxy{byServer: map[string][]client.Window{
		"src:1": {
			{Tenant: "", Server: "src:1", Count: 90, MeanMS: 30, P95MS: 50, P99MS: 80},
			{Tenant: "a", Server: "src:1", Count: 60, MeanMS: 25},
			{Tenant: "b", Server: "src:1", Count: 0},
		},
		"dst:2": {{Tenant: "", Server: "dst:2", Count: 10, MeanMS: 12}},
	}}
	p := &ProxyLatency{Proxy: fp, Servers: []string{"src:1", "dst:2", "empty:3"}}
	got := p.Signals(context.Background())
	if len(got) != 2 || got[0].Name != "src:1" || got[0].Mean != 30*time.Millisecond || got[0].P99 != 80*time.Millisecond || got[1].Mean != 12*time.Millisecond {
		t.Fatalf("server signals %+v", got)
	}
	p.PerTenant = true
	p.Contracts = map[string]time.Duration{"a": 40 * time.Millisecond}
	got = p.Signals(context.Background())
	if len(got) != 2 || got[0].Name != "a@src:1" || got[0].Contract != 40*time.Millisecond || got[0].Err != nil {
		t.Fatalf("tenant signals %+v", got)
	}
	if !errors.Is(got[1].Err, ErrNoTransactions) {
		t.Fatalf("empty window err = %v, want ErrNoTransactions", got[1].Err)
	}
	p = &ProxyLatency{Proxy: fakeProxy{err: errors.New("refused")}, Servers: []string{"src:1"}}
	got = p.Signals(context.Background())
	if len(got) != 1 || got[0].Err == nil {
		t.Fatalf("failed read gave %+v, want one signal with an error", got)
	}
}
