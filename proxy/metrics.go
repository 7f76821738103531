package proxy

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sluicedb/sluice/proxy/timing"
)

// serveMetrics writes the Prometheus text exposition format (0.0.4):
// per (tenant, server) a summary of transaction latency over the window
// (quantiles 0.5/0.95/0.99 from the window; _sum and _count cumulative),
// the window's mean and count as gauges, and session counters.
func (p *Proxy) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	now := time.Now()
	type row struct {
		k       timing.Key
		st      timing.Stats
		n       uint64
		sumSecs float64
	}
	var rows []row
	p.reg.Each(func(k timing.Key, win *timing.Window) {
		n, sum := win.Totals()
		rows = append(rows, row{k, win.SnapshotAt(now), n, sum})
	})
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].k.Tenant != rows[j].k.Tenant {
			return rows[i].k.Tenant < rows[j].k.Tenant
		}
		return rows[i].k.Server < rows[j].k.Server
	})
	var b strings.Builder
	b.WriteString("# HELP sluice_proxy_transaction_seconds Client-visible transaction latency (first message after ReadyForQuery 'I' to the next 'I'); quantiles over the sliding window.\n")
	b.WriteString("# TYPE sluice_proxy_transaction_seconds summary\n")
	for _, r := range rows {
		l := fmt.Sprintf(`tenant="%s",server="%s"`, promEscape(r.k.Tenant), promEscape(r.k.Server))
		for _, q := range []struct {
			q string
			v float64
		}{{"0.5", r.st.P50MS}, {"0.95", r.st.P95MS}, {"0.99", r.st.P99MS}} {
			v := q.v / 1000
			if r.st.Count == 0 {
				v = math.NaN()
			}
			fmt.Fprintf(&b, "sluice_proxy_transaction_seconds{%s,quantile=\"%s\"} %g\n", l, q.q, v)
		}
		fmt.Fprintf(&b, "sluice_proxy_transaction_seconds_sum{%s} %g\n", l, r.sumSecs)
		fmt.Fprintf(&b, "sluice_proxy_transaction_seconds_count{%s} %d\n", l, r.n)
	}
	b.WriteString("# HELP sluice_proxy_window_mean_seconds Mean transaction latency over the sliding window.\n")
	b.WriteString("# TYPE sluice_proxy_window_mean_seconds gauge\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "sluice_proxy_window_mean_seconds{tenant=\"%s\",server=\"%s\"} %g\n", promEscape(r.k.Tenant), promEscape(r.k.Server), r.st.MeanMS/1000)
	}
	b.WriteString("# HELP sluice_proxy_window_queue_mean_seconds Mean time a transaction waited at the proxy (handover hold) over the sliding window.\n")
	b.WriteString("# TYPE sluice_proxy_window_queue_mean_seconds gauge\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "sluice_proxy_window_queue_mean_seconds{tenant=\"%s\",server=\"%s\"} %g\n", promEscape(r.k.Tenant), promEscape(r.k.Server), r.st.QueueMeanMS/1000)
	}
	b.WriteString("# HELP sluice_proxy_window_transactions Transactions ended within the sliding window.\n")
	b.WriteString("# TYPE sluice_proxy_window_transactions gauge\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "sluice_proxy_window_transactions{tenant=\"%s\",server=\"%s\"} %d\n", promEscape(r.k.Tenant), promEscape(r.k.Server), r.st.Count)
	}
	fmt.Fprintf(&b, "# HELP sluice_proxy_sessions Client sessions open.\n# TYPE sluice_proxy_sessions gauge\nsluice_proxy_sessions %d\n", p.sessionsOpen.Load())
	fmt.Fprintf(&b, "# HELP sluice_proxy_sessions_total Client connections accepted.\n# TYPE sluice_proxy_sessions_total counter\nsluice_proxy_sessions_total %d\n", p.sessionsTotal.Load())
	fmt.Fprintf(&b, "# HELP sluice_proxy_session_moves_total Sessions moved to another server at handover.\n# TYPE sluice_proxy_session_moves_total counter\nsluice_proxy_session_moves_total %d\n", p.moves.Load())
	fmt.Fprintf(&b, "# HELP sluice_proxy_cancels_total CancelRequests sent to servers.\n# TYPE sluice_proxy_cancels_total counter\nsluice_proxy_cancels_total %d\n", p.cancels.Load())
	io.WriteString(w, b.String())
}

func promEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
