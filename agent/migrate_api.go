package agent

import (
	"net/http"

	"github.com/sluicedb/sluice/agent/client"
)

// migrationRoutes registers the migration endpoints (public and target-side).
func (a *Agent) migrationRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/migrations", func(w http.ResponseWriter, r *http.Request) {
		var req client.StartMigration
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.StartMigration(r.Context(), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusCreated, v)
	})
	mux.HandleFunc("GET /v1/migrations", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.Migrations()
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	})
	mux.HandleFunc("GET /v1/migrations/{id}", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.Migration(r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	})
	mux.HandleFunc("POST /v1/migrations/{id}/rate", func(w http.ResponseWriter, r *http.Request) {
		var req client.SetRate
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.SetMigrationRate(r.PathValue("id"), req.Rate)
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	})
	mux.HandleFunc("POST /v1/migrations/{id}/abort", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.AbortMigration(r.PathValue("id"), "operator request")
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, v)
	})
	a.targetRoutes(mux)
}
