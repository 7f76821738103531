package agent

import (
	"context"
	"net/http"
	"sync"
)

// migrations tracks the migration goroutines this agent runs.
type migrations struct {
	wg sync.WaitGroup
}

func (m *migrations) init() {}

// wait blocks until every migration goroutine has returned.
func (m *migrations) wait() { m.wg.Wait() }

// migrationRoutes registers the migration endpoints.
func (a *Agent) migrationRoutes(mux *http.ServeMux) {}

// resumeMigrations restarts migrations left unfinished by a previous run.
func (a *Agent) resumeMigrations(ctx context.Context) {}
