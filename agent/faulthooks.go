package agent

import (
	"context"
	"net/http"
	"sync"
)

// Fault-injection hooks: with Config.FaultHooks set, a test can pause
// every migration driver of this agent at one named point of the run
// (migration.Env.Hook: "before:fence", "after:switch",
// "during:stream-snapshot", …), learn that a driver reached it, kill
// processes while it waits there, and let it go:
//
//	POST /v1/debug/pause  {"point":"before:fence"}  arm (one driver, once)
//	GET  /v1/debug/pause                            → {"point":…, "reached":bool}
//	POST /v1/debug/resume                           let the paused driver go, disarm
//
// An operator never needs these; they exist only when the config asks.

// faultHooks is the armed pause point, guarded by mu.
type faultHooks struct {
	mu      sync.Mutex
	point   string        // armed point; "" = none
	reached bool          // a driver is (or was) paused there
	release chan struct{} // closed by resume
}

// at blocks the calling driver if point is armed and not yet reached,
// until resume or ctx ends.
func (h *faultHooks) at(ctx context.Context, point string) {
	h.mu.Lock()
	if h.point == "" || h.point != point || h.reached {
		h.mu.Unlock()
		return
	}
	h.reached = true
	ch := h.release
	h.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

type pauseState struct {
	Point   string `json:"point"`
	Reached bool   `json:"reached"`
}

func (a *Agent) faultRoutes(mux *http.ServeMux) {
	h := &a.hooks
	mux.HandleFunc("POST /v1/debug/pause", func(w http.ResponseWriter, r *http.Request) {
		var req pauseState
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if req.Point == "" {
			writeError(w, errf(http.StatusBadRequest, "point is required, e.g. \"before:fence\""))
			return
		}
		h.mu.Lock()
		if h.release != nil {
			close(h.release)
		}
		h.point, h.reached, h.release = req.Point, false, make(chan struct{})
		h.mu.Unlock()
		writeOK(w, http.StatusOK, pauseState{Point: req.Point})
	})
	mux.HandleFunc("GET /v1/debug/pause", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		s := pauseState{Point: h.point, Reached: h.reached}
		h.mu.Unlock()
		writeOK(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST /v1/debug/resume", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		if h.release != nil {
			close(h.release)
		}
		h.point, h.reached, h.release = "", false, nil
		h.mu.Unlock()
		writeOK(w, http.StatusOK, pauseState{})
	})
}
