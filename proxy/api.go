package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
	"github.com/sluicedb/sluice/proxy/timing"
)

// apiHandler serves the HTTP API (see the package doc).
func (p *Proxy) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/routes", func(w http.ResponseWriter, r *http.Request) {
		writeAPI(w, http.StatusOK, p.routes())
	})
	mux.HandleFunc("PUT /v1/routes/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Addr     string   `json:"addr"`
			Database string   `json:"database"`
			Aliases  []string `json:"aliases"`
		}
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		rc := RouteConfig{Tenant: r.PathValue("tenant"), Addr: in.Addr, Database: in.Database, Aliases: in.Aliases}
		if t := p.tenantByName(rc.Tenant); t != nil && len(rc.Aliases) == 0 {
			cur, _ := t.routeNow()
			rc.Aliases = cur.Aliases
		}
		if err := p.setRoute(rc, true); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /v1/tenants/{tenant}/hold", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			DeadlineMS *float64 `json:"deadline_ms"`
		}
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		deadline := 2 * time.Second
		if in.DeadlineMS != nil {
			if *in.DeadlineMS < 0 || math.IsNaN(*in.DeadlineMS) {
				apiError(w, http.StatusBadRequest, errors.New("deadline_ms must be ≥ 0"))
				return
			}
			deadline = time.Duration(*in.DeadlineMS * float64(time.Millisecond))
		}
		t := p.tenantByName(r.PathValue("tenant"))
		if t == nil {
			apiError(w, http.StatusNotFound, fmt.Errorf("%w %q", ErrUnknownTenant, r.PathValue("tenant")))
			return
		}
		writeAPI(w, http.StatusOK, t.hold(r.Context(), deadline, p.cancelSession))
	})
	mux.HandleFunc("POST /v1/tenants/{tenant}/switch", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Addr     string `json:"addr"`
			Database string `json:"database"`
		}
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		if err := p.Switch(r.PathValue("tenant"), in.Addr, in.Database); err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /v1/tenants/{tenant}/release", func(w http.ResponseWriter, r *http.Request) {
		if err := p.Release(r.PathValue("tenant")); err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/latency", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		series := p.Latency(q.Get("tenant"), q.Get("server"))
		writeAPI(w, http.StatusOK, p.windows(series))
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		writeAPI(w, http.StatusOK, map[string]int64{
			"sessions_open":  p.sessionsOpen.Load(),
			"sessions_total": p.sessionsTotal.Load(),
			"moves":          p.moves.Load(),
			"cancels":        p.cancels.Load(),
		})
	})
	mux.HandleFunc("GET /metrics", p.serveMetrics)
	return mux
}

// windows converts series to the API's Window objects.
func (p *Proxy) windows(series []timing.Series) []client.Window {
	ws := p.reg.Length().Seconds()
	out := make([]client.Window, 0, len(series))
	for _, s := range series {
		out = append(out, client.Window{Tenant: s.Tenant, Server: s.Server, WindowS: ws, Count: s.Count,
			MeanMS: s.MeanMS, QueueMS: s.QueueMeanMS, P50MS: s.P50MS, P95MS: s.P95MS, P99MS: s.P99MS})
	}
	return out
}

func statusOf(err error) int {
	if errors.Is(err, ErrUnknownTenant) {
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

// readAPI decodes a JSON body (an empty body is allowed and leaves v as is).
func readAPI(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

func writeAPI(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, err error) {
	writeAPI(w, status, map[string]string{"error": err.Error()})
}

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

// followCatalog polls an agent's GET /v1/tenants and follows the route of
// every tenant in state "running" there, until ctx ends.
func (p *Proxy) followCatalog(ctx context.Context, base string) {
	base = strings.TrimRight(base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(p.cfg.CatalogPoll)
	defer tick.Stop()
	lastErr := ""
	for {
		if err := p.pollCatalog(ctx, hc, base); err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			p.cfg.Logf("proxy: catalog %s: %v", base, err)
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// catalogTenant is one entry of an agent's GET /v1/tenants.
type catalogTenant struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	State    string `json:"state"`
}

func (p *Proxy) pollCatalog(ctx context.Context, hc *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/tenants", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v1/tenants: %s", resp.Status)
	}
	var ts []catalogTenant
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&ts); err != nil {
		return fmt.Errorf("GET /v1/tenants: %w", err)
	}
	return p.applyCatalog(base, ts)
}

// applyCatalog routes every running tenant to where the catalog at base
// says. It is edge-triggered: a tenant's route changes only when that
// catalog reports a location different from the last one it reported, so a
// route switched through the API is not reverted by a catalog that has not
// caught up yet.
func (p *Proxy) applyCatalog(base string, ts []catalogTenant) error {
	var errs []error
	for _, ct := range ts {
		if ct.State != "running" || ct.Name == "" || ct.Port == 0 {
			continue
		}
		host := ct.Host
		if host == "" {
			host = "127.0.0.1"
		}
		addr := fmt.Sprintf("%s:%d", host, ct.Port)
		if strings.Contains(host, ":") {
			addr = fmt.Sprintf("[%s]:%d", host, ct.Port)
		}
		db := ct.Database
		if db == "" {
			db = "postgres"
		}
		seenKey, loc := base+"\x00"+ct.Name, addr+"/"+db
		p.catMu.Lock()
		last, seen := p.catSeen[seenKey]
		p.catSeen[seenKey] = loc
		p.catMu.Unlock()
		if seen && last == loc {
			continue
		}
		if t := p.tenantByName(ct.Name); t != nil {
			if t.setRoute(addr, db, false) {
				p.cfg.Logf("proxy: catalog: tenant %s now at %s/%s", ct.Name, addr, db)
			}
			continue
		}
		if err := p.setRoute(RouteConfig{Tenant: ct.Name, Addr: addr, Database: db}, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
