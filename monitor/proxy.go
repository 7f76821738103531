package monitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/proxy/client"
)

// latencyReader is the part of the proxy's API client the monitor uses.
type latencyReader interface {
	Latency(ctx context.Context, tenant string) ([]client.Window, error)
	ServerLatency(ctx context.Context, addr string) ([]client.Window, error)
}

var _ latencyReader = (*client.Client)(nil)

// ErrNoTransactions marks a window in which nothing completed: latency is
// unknown, not zero, so controllers hold.
var ErrNoTransactions = errors.New("monitor: no transactions in the window")

// ProxyLatency turns the proxy's sliding windows into control.Signals.
//
// Single-tenant mode (PerTenant false): one Signal per server in Servers, the
// server's aggregate window over every tenant the proxy routes there, so the
// PID sees max(source, target). Multitenant mode (PerTenant true): one Signal
// per (tenant, server) window on those servers, each with its contract from
// Contracts (Integral acts on the worst). A window with fewer than MinCount
// transactions (default 1) is a Signal with ErrNoTransactions. A server the
// proxy routes no transactions to at all (a fresh target before handover) has
// no window and so no Signal: it has no clients whose latency could suffer.
type ProxyLatency struct {
	Proxy     latencyReader
	Servers   []string                 // server addrs (host:port) to watch: source and target
	PerTenant bool                     // one signal per tenant on those servers
	Contracts map[string]time.Duration // tenant → latency contract (multitenant)
	MinCount  int
}

// NewProxyLatency returns a source reading from the proxy API at c.
func NewProxyLatency(c *client.Client, servers ...string) *ProxyLatency {
	return &ProxyLatency{Proxy: c, Servers: servers}
}

// Signals reads the windows now. A failed read yields Signals carrying the
// error (one per server), never an empty, silent result.
func (p *ProxyLatency) Signals(ctx context.Context) []control.Signal {
	min := p.MinCount
	if min < 1 {
		min = 1
	}
	var out []control.Signal
	for _, srv := range p.Servers {
		ws, err := p.Proxy.ServerLatency(ctx, srv)
		if err != nil {
			out = append(out, control.Signal{Name: srv, Err: fmt.Errorf("monitor: proxy latency of %s: %w", srv, err)})
			continue
		}
		for _, w := range ws {
			if w.Server != srv || (p.PerTenant != (w.Tenant != "")) {
				continue
			}
			name := srv
			if p.PerTenant {
				name = w.Tenant + "@" + srv
			}
			out = append(out, windowSignal(name, w, p.Contracts[w.Tenant], min))
		}
	}
	return out
}

func windowSignal(name string, w client.Window, contract time.Duration, min int) control.Signal {
	s := control.Signal{
		Name:     name,
		Mean:     ms(w.MeanMS),
		P95:      ms(w.P95MS),
		P99:      ms(w.P99MS),
		Count:    w.Count,
		Contract: contract,
	}
	if w.Count < min {
		s.Err = ErrNoTransactions
	}
	return s
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
