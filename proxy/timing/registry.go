package timing

import (
	"sort"
	"sync"
	"time"
)

// Key names one latency series: a tenant on a server (host:port).
type Key struct {
	Tenant string
	Server string
}

// Registry holds one Window per Key, created on first use. Safe for
// concurrent use; callers keep the *Window they get so the per-transaction
// path does not touch the registry.
type Registry struct {
	length time.Duration // as configured
	slots  int
	eff    time.Duration // effective window length (slot length × slots)
	mu     struct {
		sync.Mutex
		m map[Key]*Window
	}
}

// NewRegistry returns a registry whose windows are of length w with n slots.
func NewRegistry(w time.Duration, n int) *Registry {
	r := &Registry{length: w, slots: n, eff: NewWindow(w, n).Length()}
	r.mu.m = make(map[Key]*Window)
	return r
}

// Length returns the window length of the registry's windows.
func (r *Registry) Length() time.Duration { return r.eff }

// Slot returns the length of one of the windows' slots: a window as seen at
// time t holds the transactions ended from the start of the slot t is in,
// back Length − Slot before it.
func (r *Registry) Slot() time.Duration { return r.eff / time.Duration(r.slots) }

// Get returns the window of k, creating it if needed.
func (r *Registry) Get(k Key) *Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.mu.m[k]
	if w == nil {
		w = NewWindow(r.length, r.slots)
		r.mu.m[k] = w
	}
	return w
}

// Series is the statistics of one key, or of an aggregate when Tenant or
// Server is "" (all tenants / all servers).
type Series struct {
	Key
	Stats
}

// Filter selects the series Query returns.
type Filter struct {
	Tenant string // only this tenant ("" = any)
	Server string // only this server ("" = any)
}

// QueryAt returns, as seen at time t: every (tenant, server) series matching
// f, then the aggregates — per tenant over its servers (Server ""), per server
// over its tenants (Tenant ""), and the grand total (both "") — restricted to
// those consistent with f. Series are sorted by tenant, then server.
// Series with no key ever recorded are omitted; keys with an empty window are
// reported with Count 0.
func (r *Registry) QueryAt(t time.Time, f Filter) []Series {
	r.mu.Lock()
	keys := make([]Key, 0, len(r.mu.m))
	wins := make([]*Window, 0, len(r.mu.m))
	for k, w := range r.mu.m {
		if (f.Tenant == "" || k.Tenant == f.Tenant) && (f.Server == "" || k.Server == f.Server) {
			keys = append(keys, k)
			wins = append(wins, w)
		}
	}
	r.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	byTenant := map[string]*Hist{}
	byServer := map[string]*Hist{}
	var all Hist
	out := make([]Series, 0, len(keys)+4)
	for i, k := range keys {
		var h Hist
		wins[i].MergeAt(t, &h)
		out = append(out, Series{Key: k, Stats: h.Stats()})
		if byTenant[k.Tenant] == nil {
			byTenant[k.Tenant] = &Hist{}
		}
		byTenant[k.Tenant].Merge(&h)
		if byServer[k.Server] == nil {
			byServer[k.Server] = &Hist{}
		}
		byServer[k.Server].Merge(&h)
		all.Merge(&h)
	}
	if f.Server == "" {
		for tn, h := range byTenant {
			out = append(out, Series{Key: Key{Tenant: tn}, Stats: h.Stats()})
		}
	}
	if f.Tenant == "" {
		for s, h := range byServer {
			out = append(out, Series{Key: Key{Server: s}, Stats: h.Stats()})
		}
	}
	if f.Tenant == "" && f.Server == "" {
		out = append(out, Series{Stats: all.Stats()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Server < out[j].Server
	})
	return out
}

// Each calls fn for every key and its window (for Prometheus totals).
func (r *Registry) Each(fn func(Key, *Window)) {
	r.mu.Lock()
	keys := make([]Key, 0, len(r.mu.m))
	wins := make([]*Window, 0, len(r.mu.m))
	for k, w := range r.mu.m {
		keys = append(keys, k)
		wins = append(wins, w)
	}
	r.mu.Unlock()
	for i := range keys {
		fn(keys[i], wins[i])
	}
}
