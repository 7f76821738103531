package agent

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
)

// maxBody bounds JSON request bodies (bytes).
const maxBody = 1 << 20

// Handler returns the agent's HTTP API (see the package doc for the routes).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", a.handleInfo)
	mux.HandleFunc("GET /v1/tenants", a.handleTenants)
	mux.HandleFunc("POST /v1/tenants", a.handleCreateTenant)
	mux.HandleFunc("GET /v1/tenants/{id}", a.tenantOp(func(r *http.Request, id int64) (any, error) { return a.Tenant(id) }))
	mux.HandleFunc("DELETE /v1/tenants/{id}", a.tenantOp(func(r *http.Request, id int64) (any, error) { return a.DeleteTenant(r.Context(), id) }))
	mux.HandleFunc("POST /v1/tenants/{id}/start", a.tenantOp(func(r *http.Request, id int64) (any, error) { return a.StartTenant(r.Context(), id) }))
	mux.HandleFunc("POST /v1/tenants/{id}/stop", a.tenantOp(func(r *http.Request, id int64) (any, error) { return a.StopTenant(r.Context(), id) }))
	a.migrationRoutes(mux)
	a.keyspaceRoutes(mux)
	a.seriesRoute(mux)
	a.planRoutes(mux)
	a.operatorRoutes(mux)
	if a.cfg.FaultHooks {
		a.faultRoutes(mux)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return a.secureHandler(mux)
}

func (a *Agent) handleInfo(w http.ResponseWriter, r *http.Request) {
	info, err := a.Info()
	if err != nil {
		writeError(w, err)
		return
	}
	writeOK(w, http.StatusOK, info)
}

func (a *Agent) handleTenants(w http.ResponseWriter, r *http.Request) {
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	ts, err := a.Tenants(all)
	if err != nil {
		writeError(w, err)
		return
	}
	writeOK(w, http.StatusOK, ts)
}

func (a *Agent) handleCreateTenant(w http.ResponseWriter, r *http.Request) {
	var req client.CreateTenant
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	tn, err := a.CreateTenant(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeOK(w, http.StatusCreated, tn)
}

// tenantOp adapts a handler of one tenant ID from the {id} path segment.
func (a *Agent) tenantOp(fn func(r *http.Request, id int64) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			writeError(w, errf(http.StatusBadRequest, "bad tenant id %q: want a positive integer", r.PathValue("id")))
			return
		}
		v, err := fn(r, id)
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	}
}

// Info reports what preflight checks need: name, PostgreSQL version, space.
func (a *Agent) Info() (client.Info, error) {
	info := client.Info{
		Name: a.cfg.Name, URL: a.url, PGVersion: a.pgVer, PGMajor: a.pgMajor,
		WalLevel: "replica", CapacityBytes: a.cfg.CapacityBytes, ContractMs: a.cfg.ContractMs, Peers: a.cfg.Peers,
	}
	if v, ok := a.cfg.Tenant.Settings["wal_level"]; ok {
		info.WalLevel = v
	}
	ts, err := a.cat.Tenants()
	if err != nil {
		return info, err
	}
	for _, tn := range ts {
		if tn.State != catalog.Deleted && tn.State != catalog.Moved {
			info.Tenants++
		}
	}
	info.UsedBytes = dirSize(filepath.Join(a.cfg.Root, "tenants"))
	var st syscall.Statfs_t
	if err := syscall.Statfs(a.cfg.Root, &st); err != nil {
		return info, errf(http.StatusInternalServerError, "statfs %s: %v", a.cfg.Root, err)
	}
	info.FreeBytes = int64(st.Bavail) * st.Bsize
	if c := a.cfg.CapacityBytes; c > 0 && c-info.UsedBytes < info.FreeBytes {
		info.FreeBytes = max(c-info.UsedBytes, 0)
	}
	return info, nil
}

// dirSize sums the sizes of regular files under dir (errors skip entries).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// readJSON decodes a bounded JSON body, rejecting unknown fields.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return errf(http.StatusBadRequest, "bad request body: %v", err)
	}
	return nil
}

func writeOK(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	writeOK(w, statusOf(err), client.Error{Error: err.Error()})
}
