package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
	"github.com/sluicedb/sluice/router"
	"github.com/sluicedb/sluice/router/analyze"
)

// A keyspace's live reconfiguration (package reshard) as the proxy serves
// it. Its driver, the agent holding the keyspace, switches the plan in
// three calls:
//
//	POST /v1/keyspaces/{name}/hold     {"deadline_ms"}: new transactions wait, the call returns when none is open
//	POST /v1/keyspaces/{name}/switch   {"keyspace", "reshard"}: the new plan and its moving chunks; the hold ends
//	POST /v1/keyspaces/{name}/release  the hold ends, nothing changed
//
// From the switch on, a statement naming a key of a chunk not yet
// Complete waits while the driver pulls that chunk (POST
// /v1/keyspaces/{name}/reshard/pull on the driver): only the transactions on
// that chunk wait. A proxy that missed the switch (restarted, or started
// later) learns the reconfiguration from its catalog poll: the keyspace's
// new epoch is installed only together with the reshard status of that
// epoch, so no transaction routes by the new plan without waiting for
// the keys still moving.

// maxKeyspaceHold bounds a keyspace's hold: its driver switches or
// releases well within it (a switch takes tens of milliseconds), or it
// has died.
const maxKeyspaceHold = 30 * time.Second

// pullWait bounds how long a statement waits for its keys' pull.
const pullWait = 60 * time.Second

// ksGate admits a keyspace's transactions and holds them while its plan
// switches.
type ksGate struct {
	mu     sync.Mutex
	held   chan struct{} // closed when the hold ends; nil: not held
	active int           // admitted transactions not yet ended
	idle   chan struct{} // closed when active drops to 0 during a hold
}

func (p *Proxy) gate(name string) *ksGate {
	p.ksMu.Lock()
	defer p.ksMu.Unlock()
	g := p.gates[name]
	if g == nil {
		g = &ksGate{}
		p.gates[name] = g
	}
	return g
}

// admitKeyspace waits while keyspace name (gate g) is held and admits a
// transaction on its current version (router.Config.Admit); g.done ends
// it, once (the router calls its release once per admitted transaction).
func (p *Proxy) admitKeyspace(ctx context.Context, g *ksGate, name string) (*router.Keyspace, error) {
	g.mu.Lock()
	for g.held != nil {
		held := g.held
		g.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		g.mu.Lock()
	}
	g.active++
	g.mu.Unlock()
	k := p.keyspace(name)
	if k == nil {
		g.done()
		return nil, fmt.Errorf("keyspace %s is gone", name)
	}
	return k, nil
}

// done ends an admitted transaction.
func (g *ksGate) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active--
	if g.active == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// HoldKeyspace stops admitting keyspace name's transactions and waits for
// the open ones to end; at the deadline it releases the hold again and
// fails, naming how many were still open.
func (p *Proxy) HoldKeyspace(ctx context.Context, name string, deadline time.Duration) error {
	if p.keyspace(name) == nil {
		return fmt.Errorf("%w: keyspace %s", ErrUnknownTenant, name)
	}
	g := p.gate(name)
	g.mu.Lock()
	if g.held == nil {
		held := make(chan struct{})
		g.held = held
		// A driver that dies between hold and switch must not leave the
		// keyspace held: the hold ends by itself after maxKeyspaceHold.
		time.AfterFunc(maxKeyspaceHold, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.held == held {
				close(held)
				g.held = nil
				p.cfg.Logf("proxy: keyspace %s: hold released after %v without a switch", name, maxKeyspaceHold)
			}
		})
	}
	var idle chan struct{}
	if g.active > 0 {
		if g.idle == nil {
			g.idle = make(chan struct{})
		}
		idle = g.idle
	}
	g.mu.Unlock()
	if idle == nil {
		return nil
	}
	t := time.NewTimer(deadline)
	defer t.Stop()
	select {
	case <-idle:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	n := g.active
	g.mu.Unlock()
	p.ReleaseKeyspace(name)
	return fmt.Errorf("keyspace %s: %d transactions still open after %v; hold released", name, n, deadline)
}

// ReleaseKeyspace ends keyspace name's hold.
func (p *Proxy) ReleaseKeyspace(name string) {
	g := p.gate(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
}

// reshardView is what the proxy reads of a reconfiguration: the driver's
// GET /v1/keyspaces/{name}/reshard?chunks=1 (agent/client.ReshardStatus).
type reshardView struct {
	ID      string `json:"id"`
	Phase   string `json:"phase"`
	ToEpoch uint64 `json:"to_epoch"`
	Chunks  []struct {
		Chunk reshard.Chunk `json:"chunk"`
		State string        `json:"state"`
	} `json:"chunks"`
}

// moving reports whether v is a reconfiguration whose chunks still move.
func (v *reshardView) moving() bool { return v != nil && v.Phase == "moving" }

// mover is a router.Mover over a replica of the driver's tracker.
type mover struct {
	id       string
	ks       string
	driver   string // the driver agent's base URL
	hc       *http.Client
	mu       sync.Mutex
	tr       *reshard.Tracker
	inflight map[int]chan struct{} // pulls this proxy waits for, by chunk
	pulls    func()                // counts a reactive pull
}

func newMover(ks, driver string, hc *http.Client, v *reshardView) (*mover, error) {
	chunks := make([]reshard.Chunk, len(v.Chunks))
	done := map[int]bool{}
	for i, c := range v.Chunks {
		chunks[i] = c.Chunk
		done[c.Chunk.ID] = c.State == reshard.Complete.String()
	}
	tr, err := reshard.NewTracker(chunks, func(id int) bool { return done[id] }, nil)
	if err != nil {
		return nil, err
	}
	return &mover{id: v.ID, ks: ks, driver: driver, hc: hc, tr: tr, inflight: map[int]chan struct{}{}}, nil
}

// learn records the completions of a newer view of the same reconfiguration.
func (m *mover) learn(v *reshardView) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range v.Chunks {
		if c.State == reshard.Complete.String() && c.Chunk.ID < len(m.tr.Chunks()) {
			m.tr.Done(c.Chunk.ID)
		}
	}
}

// Await pulls every chunk of root overlapping [lo, hi) that is not
// Complete, each at most once at a time from this proxy.
func (m *mover) Await(ctx context.Context, root string, lo, hi keyspace.Bound) error {
	m.mu.Lock()
	ids := m.tr.Moving(root, lo, hi)
	m.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pullWait)
	defer cancel()
	for _, id := range ids {
		if err := m.pull(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// pull waits for chunk id: it asks the driver, or waits for this proxy's
// request already in flight.
func (m *mover) pull(ctx context.Context, id int) error {
	for {
		m.mu.Lock()
		if m.tr.State(id) == reshard.Complete {
			m.mu.Unlock()
			return nil
		}
		if ch, ok := m.inflight[id]; ok {
			m.mu.Unlock()
			select {
			case <-ch:
				continue // done or failed: look again
			case <-ctx.Done():
				return fmt.Errorf("waiting for the pull of %s: %w", m.tr.Chunks()[id], ctx.Err())
			}
		}
		ch := make(chan struct{})
		m.inflight[id] = ch
		m.mu.Unlock()
		if m.pulls != nil {
			m.pulls()
		}
		err := m.ask(ctx, id)
		m.mu.Lock()
		if err == nil {
			m.tr.Done(id)
		}
		delete(m.inflight, id)
		close(ch)
		m.mu.Unlock()
		if err != nil {
			return fmt.Errorf("pull of %s: %w", m.tr.Chunks()[id], err)
		}
		return nil
	}
}

// ask is POST /v1/keyspaces/{name}/reshard/pull on the driver.
func (m *mover) ask(ctx context.Context, id int) error {
	body, _ := json.Marshal(map[string]any{"chunk": id, "reshard": m.id})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.driver+"/v1/keyspaces/"+url.PathEscape(m.ks)+"/reshard/pull", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := *m.hc
	hc.Timeout = 0 // a pull takes as long as the chunk's copy; ctx bounds it
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.Join(strings.Fields(string(b)), " ")
		}
		return fmt.Errorf("driver %s: %s: %s", m.driver, resp.Status, e.Error)
	}
	return nil
}

// installKeyspace sets keyspace ks (from the config, or a catalog) with
// reconfiguration view v (nil or not moving: none) learnt from driver: a
// new epoch, or a view of the current one. A keyspace new to the proxy
// after Start has its in-doubt transactions resolved now.
func (p *Proxy) installKeyspace(ks *keyspace.Keyspace, v *reshardView, driver string) error {
	newEpoch, err := p.putKeyspace(ks, v, driver)
	if newEpoch {
		// A new epoch ends a hold: the driver switched the plan even if
		// its own switch call did not reach this proxy.
		p.ReleaseKeyspace(ks.Name)
	}
	return err
}

// putKeyspace is installKeyspace under p.ksMu; newEpoch reports a
// keyspace that had an older epoch.
func (p *Proxy) putKeyspace(ks *keyspace.Keyspace, v *reshardView, driver string) (newEpoch bool, err error) {
	p.ksMu.Lock()
	defer p.ksMu.Unlock()
	old := p.keyspaces[ks.Name]
	if old != nil && ks.Epoch < old.KS.Epoch && v != nil && v.ToEpoch >= old.KS.Epoch {
		// A stale answer: the catalog's keyspace was read before a switch
		// this proxy already has (its reconfiguration, read after, names
		// that epoch). Installing it would route moved keys to their old
		// owners, whose fences refuse them. A keyspace deleted and created
		// again starts over at epoch 1 without such a reconfiguration.
		return false, nil
	}
	var mv *mover
	if v.moving() && v.ToEpoch == ks.Epoch {
		if old != nil && old.KS.Epoch == ks.Epoch {
			if m, ok := old.Moving.(*mover); ok && m.id == v.ID {
				m.learn(v)
				return false, nil
			}
		}
		if mv, err = newMover(ks.Name, driver, p.catalogClient(driver), v); err != nil {
			return false, err
		}
		mv.pulls = func() { p.reactivePulls.Add(1) }
	} else if old != nil && old.KS.Epoch == ks.Epoch && old.Moving == nil {
		return false, nil
	}
	k := &router.Keyspace{KS: ks, Moving: nil}
	if mv != nil {
		k.Moving = mv
	}
	if old != nil && old.KS.Epoch == ks.Epoch {
		k.Cache = old.Cache
	} else {
		k.Cache = analyze.NewCache(ks, analysisCacheSize)
	}
	p.keyspaces[ks.Name] = k
	if old == nil && p.ctx != nil && p.coord != nil {
		go p.recoverAll(p.ctx)
	}
	if old == nil || old.KS.Epoch != ks.Epoch {
		p.cfg.Logf("proxy: keyspace %s (epoch %d, %d partitions%s)", ks.Name, ks.Epoch, len(ks.Partitions), movingNote(mv))
	}
	return old != nil && old.KS.Epoch < ks.Epoch, nil
}

func movingNote(m *mover) string {
	if m == nil {
		return ""
	}
	pr := m.tr.Progress()
	return fmt.Sprintf("; reconfiguration %s: %d of %d chunks arrived", m.id, pr.Complete, pr.Chunks)
}

// switchRequest is the body of POST /v1/keyspaces/{name}/switch.
type switchRequest struct {
	Keyspace json.RawMessage `json:"keyspace"`
	Reshard  json.RawMessage `json:"reshard"` // a reshardView: the driver's whole status, read leniently
	Driver   string          `json:"driver"`  // the driver agent's base URL
}

// keyspaceRoutes registers the reconfiguration endpoints.
func (p *Proxy) keyspaceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/keyspaces/{name}/hold", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			DeadlineMS float64 `json:"deadline_ms"`
		}
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		if !(in.DeadlineMS > 0 && in.DeadlineMS <= 60000) {
			apiError(w, http.StatusBadRequest, fmt.Errorf("deadline_ms %v: want above 0, at most 60000", in.DeadlineMS))
			return
		}
		start := time.Now()
		if err := p.HoldKeyspace(r.Context(), r.PathValue("name"), time.Duration(in.DeadlineMS*float64(time.Millisecond))); err != nil {
			apiError(w, holdStatus(err), err)
			return
		}
		writeAPI(w, http.StatusOK, map[string]float64{"waited_ms": float64(time.Since(start).Microseconds()) / 1000})
	})
	mux.HandleFunc("POST /v1/keyspaces/{name}/release", func(w http.ResponseWriter, r *http.Request) {
		p.ReleaseKeyspace(r.PathValue("name"))
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /v1/keyspaces/{name}/switch", func(w http.ResponseWriter, r *http.Request) {
		var in switchRequest
		if err := readAPI(r, &in); err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		ks, err := keyspace.Decode(in.Keyspace)
		if err == nil && ks.Name != r.PathValue("name") {
			err = fmt.Errorf("keyspace %s posted to %s", ks.Name, r.PathValue("name"))
		}
		var v *reshardView
		if err == nil && len(in.Reshard) > 0 {
			err = json.Unmarshal(in.Reshard, &v)
		}
		if err == nil {
			err = p.installKeyspace(ks, v, strings.TrimRight(in.Driver, "/"))
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		p.ReleaseKeyspace(ks.Name)
		writeAPI(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

func holdStatus(err error) int {
	if s := statusOf(err); s == http.StatusNotFound {
		return s
	}
	return http.StatusConflict
}
