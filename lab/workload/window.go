package workload

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/sluicedb/sluice/internal/stats"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// DefaultWindow is the span of the latency window the workload serves
// (Handler): the proxy's, and Slacker's 3 s.
const DefaultWindow = 3 * time.Second

// Window is the latency the workload's clients saw — queue wait plus
// execution, Slacker's transaction latency — over the transactions that
// were acknowledged within a span of time. Failed transactions are not in
// it (as the proxy's windows hold only completed ones).
type Window struct {
	Count          int
	Mean, P95, P99 time.Duration
	Queue          time.Duration // mean part of Mean spent in the arrival queue
}

// Window returns the window of the transactions acknowledged in
// (at − span, at]. Before Run has opened its connections it is empty.
func (r *Runner) Window(at time.Time, span time.Duration) Window {
	r.mu.Lock()
	if r.mu.start.IsZero() {
		r.mu.Unlock()
		return Window{}
	}
	to := at.Sub(r.mu.start)
	from := to - span
	var lat []float64
	var queue float64
	// Transactions are appended as they end, from MPL connections, so End
	// is sorted but for overlaps of at most one transaction per connection:
	// scanning back past the window's start by a margin finds them all.
	const margin = 10 * time.Second
	for i := len(r.mu.txs) - 1; i >= 0; i-- {
		tx := r.mu.txs[i]
		if tx.End <= from-margin {
			break
		}
		if tx.Failed || tx.End <= from || tx.End > to {
			continue
		}
		lat = append(lat, float64(tx.End-tx.Arrival))
		queue += float64(tx.Begin - tx.Arrival)
	}
	r.mu.Unlock()
	w := Window{Count: len(lat)}
	if len(lat) == 0 {
		return w
	}
	sort.Float64s(lat)
	w.Mean = time.Duration(stats.Mean(lat))
	w.P95, w.P99 = time.Duration(Quantile(lat, 0.95)), time.Duration(Quantile(lat, 0.99))
	w.Queue = time.Duration(queue / float64(len(lat)))
	return w
}

// Handler serves the workload's latency window at GET, in the shape of the
// proxy's GET /v1/latency (a JSON array of proxy/client.Window; one
// element, Tenant as given, Server ""), so a migration's control loop can
// steer by what the clients see (agent/client.Control.ClientLatencyURL).
// span <= 0 means DefaultWindow; now is the clock (nil: time.Now).
func (r *Runner) Handler(tenant string, span time.Duration, now func() time.Time) http.Handler {
	if span <= 0 {
		span = DefaultWindow
	}
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, `{"error":"method not allowed: GET only"}`, http.StatusMethodNotAllowed)
			return
		}
		win := r.Window(now(), span)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		out := []proxyclient.Window{{
			Tenant: tenant, WindowS: span.Seconds(), Count: win.Count,
			MeanMS: ms(win.Mean), QueueMS: ms(win.Queue), P95MS: ms(win.P95), P99MS: ms(win.P99),
		}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// ServeWindow serves r's Handler (tenant, DefaultWindow, the wall clock) on
// addr (host:port; port 0 picks one) until stop is called, and returns the
// URL a control loop reads it from (agent/client.Control.ClientLatencyURL).
func (r *Runner) ServeWindow(addr, tenant string) (u string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("workload: serving the clients' latency on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: r.Handler(tenant, DefaultWindow, nil), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/", func() { srv.Close() }, nil
}
