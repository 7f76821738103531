package proxy

import (
	"sync"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
	"github.com/sluicedb/sluice/proxy/timing"
)

// MaxHandovers is how many handovers the proxy remembers (GET /v1/handovers).
const MaxHandovers = 64

// handovers is the proxy's record of what handovers cost their clients
// (client.Handover): a hold notes the tenant's window on its server; a
// release that follows a switch measures the window on the new server one
// window length later, when the held transactions and the new server's
// first ones are all in it.
type handovers struct {
	mu      sync.Mutex
	pending map[string]heldWindow // by tenant: held, not yet released
	done    []client.Handover     // oldest first
}

// heldWindow is a tenant's window on its server at the start of a hold.
type heldWindow struct {
	from string
	at   time.Time
	timing.Stats
}

// held notes a hold of tenant on server from; a hold already noted (a
// repeated Hold) keeps its first note.
func (h *handovers) held(tenant, from string, at time.Time, st timing.Stats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending == nil {
		h.pending = map[string]heldWindow{}
	}
	if _, ok := h.pending[tenant]; !ok {
		h.pending[tenant] = heldWindow{from: from, at: at, Stats: st}
	}
}

// released takes tenant's hold note; ok is false if there was none.
func (h *handovers) released(tenant string) (heldWindow, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.pending[tenant]
	delete(h.pending, tenant)
	return w, ok
}

// add records a measured handover, forgetting the oldest beyond MaxHandovers.
func (h *handovers) add(ho client.Handover) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = append(h.done, ho)
	if len(h.done) > MaxHandovers {
		h.done = append([]client.Handover(nil), h.done[len(h.done)-MaxHandovers:]...)
	}
}

// list returns the recorded handovers of tenant ("" = all), oldest first.
func (h *handovers) list(tenant string) []client.Handover {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []client.Handover{}
	for _, ho := range h.done {
		if tenant == "" || ho.Tenant == tenant {
			out = append(out, ho)
		}
	}
	return out
}

// handoverCost fills ho's excess from its two windows (client.Handover's
// ExcessMSS).
func handoverCost(ho client.Handover) client.Handover {
	rate := float64(ho.BeforeCount) / ho.WindowS
	if ho.BeforeCount == 0 {
		rate = float64(ho.AfterCount) / ho.WindowS
	}
	if rate > 0 {
		ho.ExcessMSS = (ho.AfterMS - ho.BeforeMS) * float64(ho.AfterCount) / rate
	}
	return ho
}

// windowOf returns the statistics of tenant's window on server as of at
// (zero if it has none).
func (p *Proxy) windowOf(tenant, server string, at time.Time) timing.Stats {
	for _, s := range p.reg.QueryAt(at, timing.Filter{Tenant: tenant, Server: server}) {
		if s.Tenant == tenant && s.Server == server {
			return s.Stats
		}
	}
	return timing.Stats{}
}

// measureHandover is called at a release of tenant at time at: if a hold was
// noted and the tenant now routes elsewhere, the handover's cost is recorded
// when the window on the new server is the first that starts with the
// release (from the start of the slot the release is in: one window length
// less one slot later).
func (p *Proxy) measureHandover(tenant, to string, at time.Time) {
	w, ok := p.ho.released(tenant)
	if !ok || to == w.from {
		return
	}
	win := p.reg.Length()
	due := at.Add(win - p.reg.Slot())
	time.AfterFunc(time.Until(due), func() {
		after := p.windowOf(tenant, to, due)
		p.ho.add(handoverCost(client.Handover{
			Tenant: tenant, From: w.from, To: to, HeldAt: w.at, ReleasedAt: at, WindowS: win.Seconds(),
			BeforeMS: w.MeanMS, BeforeCount: w.Count, AfterMS: after.MeanMS, AfterCount: after.Count,
		}))
	})
}
