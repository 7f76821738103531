package proxy

import (
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicedb/sluice/proxy/timing"
)

// The proxy's Prometheus metrics (GET /metrics, open: Prometheus scrapes
// it without a token). Per (tenant, server) pair: a summary of transaction
// latency whose quantiles are the sliding window's and whose _sum and
// _count are cumulative, and the window's mean, queue time and count as
// gauges; then session counters. Figures are read when scraped. The label
// set is bounded by the tenants and servers the proxy routes to.

var (
	mTxn = prometheus.NewDesc("sluice_proxy_transaction_seconds",
		"Client-visible transaction latency (first message after ReadyForQuery 'I' to the next 'I'); quantiles over the sliding window.",
		[]string{"tenant", "server"}, nil)
	mWinMean = prometheus.NewDesc("sluice_proxy_window_mean_seconds",
		"Mean transaction latency over the sliding window.", []string{"tenant", "server"}, nil)
	mWinQueue = prometheus.NewDesc("sluice_proxy_window_queue_mean_seconds",
		"Mean time a transaction waited at the proxy (handover hold) over the sliding window.", []string{"tenant", "server"}, nil)
	mWinCount = prometheus.NewDesc("sluice_proxy_window_transactions",
		"Transactions ended within the sliding window.", []string{"tenant", "server"}, nil)
	mWinLen = prometheus.NewDesc("sluice_proxy_window_length_seconds",
		"Length of the sliding window the window figures cover.", nil, nil)
	mSessions = prometheus.NewDesc("sluice_proxy_sessions", "Client sessions open.", nil, nil)
	mCounters = []struct {
		d    *prometheus.Desc
		load func(p *Proxy) int64
	}{
		{prometheus.NewDesc("sluice_proxy_sessions_total", "Client connections accepted.", nil, nil), func(p *Proxy) int64 { return p.sessionsTotal.Load() }},
		{prometheus.NewDesc("sluice_proxy_session_moves_total", "Sessions moved to another server at handover.", nil, nil), func(p *Proxy) int64 { return p.moves.Load() }},
		{prometheus.NewDesc("sluice_proxy_session_moves_prepared_total", "Session moves that used a server session opened before the hold.", nil, nil), func(p *Proxy) int64 { return p.preparedUsed.Load() }},
		{prometheus.NewDesc("sluice_proxy_cancels_total", "CancelRequests sent to servers.", nil, nil), func(p *Proxy) int64 { return p.cancels.Load() }},
		{prometheus.NewDesc("sluice_proxy_reactive_pulls_total", "Reactive pulls asked of a keyspace's coordinator for a key a transaction needed.", nil, nil), func(p *Proxy) int64 { return p.reactivePulls.Load() }},
	}
)

// proxyCollector reads the proxy's windows and counters at scrape time.
type proxyCollector struct{ p *Proxy }

func (c proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mTxn, mWinMean, mWinQueue, mWinCount, mWinLen, mSessions} {
		ch <- d
	}
	for _, m := range mCounters {
		ch <- m.d
	}
}

func (c proxyCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	now := time.Now()
	ch <- prometheus.MustNewConstMetric(mWinLen, prometheus.GaugeValue, p.cfg.Window.Seconds())
	p.reg.Each(func(k timing.Key, win *timing.Window) {
		n, sum := win.Totals()
		st := win.SnapshotAt(now)
		q := func(ms float64) float64 {
			if st.Count == 0 {
				return math.NaN()
			}
			return ms / 1000
		}
		ch <- prometheus.MustNewConstSummary(mTxn, n, sum,
			map[float64]float64{0.5: q(st.P50MS), 0.95: q(st.P95MS), 0.99: q(st.P99MS)}, k.Tenant, k.Server)
		ch <- prometheus.MustNewConstMetric(mWinMean, prometheus.GaugeValue, st.MeanMS/1000, k.Tenant, k.Server)
		ch <- prometheus.MustNewConstMetric(mWinQueue, prometheus.GaugeValue, st.QueueMeanMS/1000, k.Tenant, k.Server)
		ch <- prometheus.MustNewConstMetric(mWinCount, prometheus.GaugeValue, float64(st.Count), k.Tenant, k.Server)
	})
	ch <- prometheus.MustNewConstMetric(mSessions, prometheus.GaugeValue, float64(p.sessionsOpen.Load()))
	for _, m := range mCounters {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.load(p)))
	}
}

// Metrics returns the proxy's Prometheus registry (its collector, Go's and
// the process's), made at the first call.
func (p *Proxy) Metrics() *prometheus.Registry {
	p.metricsOnce.Do(func() {
		p.metricsReg = prometheus.NewRegistry()
		p.metricsReg.MustRegister(proxyCollector{p}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	})
	return p.metricsReg
}

// serveMetrics is GET /metrics.
func (p *Proxy) serveMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(p.Metrics(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
