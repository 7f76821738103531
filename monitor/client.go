package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicedb/sluice/control"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// ClientLatency reads the latency the tenant's clients themselves measure —
// their wait for a connection plus execution, Slacker's transaction latency
// — from URL, which answers GET with a JSON array of windows in the proxy's
// shape (proxy/client.Window; `sluice workload --latency-listen` serves
// one). The proxy sees execution only: a client's queue in front of its
// connections is invisible to it (on the testbed 0.2–0.5 ms of a 7–9 ms
// mean, docs/control.md).
//
// Each window becomes one Signal named "client" (or "client:"+Tenant);
// a window with fewer than MinCount transactions (default 1) carries
// ErrNoTransactions. A failed read is one Signal with the error, so
// controllers hold rather than steer without the clients' view.
type ClientLatency struct {
	URL      string
	HTTP     *http.Client // nil: a client with a 1 s timeout
	MinCount int
}

// Signals reads the windows now.
func (c *ClientLatency) Signals(ctx context.Context) []control.Signal {
	ws, err := c.read(ctx)
	if err != nil {
		return []control.Signal{{Name: "client", Err: fmt.Errorf("monitor: client latency from %s: %w", c.URL, err)}}
	}
	min := max(c.MinCount, 1)
	out := make([]control.Signal, 0, len(ws))
	for _, w := range ws {
		name := "client"
		if w.Tenant != "" {
			name += ":" + w.Tenant
		}
		out = append(out, windowSignal(name, w, 0, min))
	}
	if len(out) == 0 {
		out = append(out, control.Signal{Name: "client", Err: ErrNoTransactions})
	}
	return out
}

func (c *ClientLatency) read(ctx context.Context) ([]proxyclient.Window, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var ws []proxyclient.Window
	if err := json.Unmarshal(data, &ws); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return ws, nil
}
