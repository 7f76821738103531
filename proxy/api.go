package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicedb/sluice/migration"
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
		deadline := migration.DefaultHoldDeadline
		if in.DeadlineMS != nil {
			if !(*in.DeadlineMS >= 0 && *in.DeadlineMS <= float64(migration.MaxHoldDeadline/time.Millisecond)) {
				apiError(w, http.StatusBadRequest, fmt.Errorf("deadline_ms %v: want 0 to %d", *in.DeadlineMS, migration.MaxHoldDeadline/time.Millisecond))
				return
			}
			deadline = time.Duration(*in.DeadlineMS * float64(time.Millisecond))
		}
		res, err := p.Hold(r.Context(), r.PathValue("tenant"), deadline)
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /v1/tenants/{tenant}/prepare", func(w http.ResponseWriter, r *http.Request) {
		var in routeTarget
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		res, err := p.Prepare(r.Context(), r.PathValue("tenant"), in.Addr, in.Database)
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /v1/tenants/{tenant}/backends", func(w http.ResponseWriter, r *http.Request) {
		res, err := p.Backends(r.PathValue("tenant"))
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /v1/tenants/{tenant}/switch", func(w http.ResponseWriter, r *http.Request) {
		var in routeTarget
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		var err error
		if in.Epoch > 0 && p.watchesEtcd() {
			err = p.awaitPlacement(r.Context(), r.PathValue("tenant"), in.Epoch)
		} else {
			err = p.Switch(r.PathValue("tenant"), in.Addr, in.Database)
		}
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /v1/tenants/{tenant}/release", func(w http.ResponseWriter, r *http.Request) {
		at, err := p.ReleaseAt(r.PathValue("tenant"))
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok", "released_at": at.UTC().Format(time.RFC3339Nano)})
	})
	mux.HandleFunc("GET /v1/latency", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		series := p.Latency(q.Get("tenant"), q.Get("server"))
		writeAPI(w, http.StatusOK, p.windows(series))
	})
	mux.HandleFunc("GET /v1/handovers", func(w http.ResponseWriter, r *http.Request) {
		writeAPI(w, http.StatusOK, p.ho.list(r.URL.Query().Get("tenant")))
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		writeAPI(w, http.StatusOK, map[string]int64{
			"sessions_open":  p.sessionsOpen.Load(),
			"sessions_total": p.sessionsTotal.Load(),
			"moves":          p.moves.Load(),
			"moves_prepared": p.preparedUsed.Load(),
			"cancels":        p.cancels.Load(),
			"reactive_pulls": p.reactivePulls.Load(),
		})
	})
	mux.HandleFunc("GET /metrics", p.serveMetrics)
	p.keyspaceRoutes(mux)
	return mux
}

// routeTarget is the body of prepare and switch: a server and, optionally,
// a database ("" = the tenant's current one).
type routeTarget struct {
	Addr     string `json:"addr"`
	Database string `json:"database"`
	// Epoch (switch only), if > 0, is the tenant's placement epoch that
	// the driver wrote to an etcd catalog: a proxy watching one answers
	// once its watch routes the tenant by that epoch or a later one,
	// without taking Addr from the call (watch.go); a proxy that watches
	// none switches to Addr as told.
	Epoch int64 `json:"epoch,omitempty"`
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
