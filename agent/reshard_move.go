package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/reshard"
	"github.com/sluicedb/sluice/throttle"
)

// move pulls every chunk not yet Complete in sub-plan order at the
// method's pace, while transactions pull the chunks they need, and
// deletes each Complete chunk's rows at its source. It returns when every
// chunk is Complete and cleaned, or with ctx's end (the agent is closing:
// a restart resumes).
func (r *reshardRun) move(ctx context.Context) error {
	if err := r.recover(ctx); err != nil {
		return err
	}
	stop := func() {}
	defer func() { stop() }()
	ctlOn := false
	sub := -1
	var sincePause int64 // bytes pulled since the fixed pace's last pause
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.mu.Lock()
		method := r.req.Method
		finished := r.tr.Finished()
		cur, _ := r.tr.SubPlan()
		next, pullable := r.tr.Next()
		dirty, cleanable := r.tr.NextClean()
		r.mu.Unlock()
		if on := method == client.MethodControlled; on != ctlOn {
			stop()
			stop, ctlOn = func() {}, on
			if on {
				stop = r.startControl(ctx)
			}
		}
		if method == client.MethodPaced {
			r.setPaced(true)
		} else if !ctlOn {
			r.setPaced(false) // only paced and controlled pace the pulls
		}
		switch {
		case finished:
			return nil
		case cleanable:
			r.clean(ctx, dirty)
			continue
		case pullable && method != client.MethodReactive:
			if sub >= 0 && cur != sub {
				sleepCtx(ctx, msDur(r.request().SubPlanPauseMs))
			}
			sub = cur
			start := time.Now()
			before := r.copied.Load()
			if err := r.await(ctx, next, false); err != nil {
				sleepCtx(ctx, pullRetry)
				continue
			}
			moved := r.copied.Load() - before
			sincePause += moved
			if r.paceAfter(ctx, moved, time.Since(start), sincePause) {
				sincePause = 0
			}
			continue
		}
		select {
		case <-r.wake:
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// paceAfter waits the method's pace after an asynchronous pull that
// copied moved bytes in took: the fixed pace pauses once sincePause (the
// bytes pulled since its last pause) reaches a chunk, and reports it.
func (r *reshardRun) paceAfter(ctx context.Context, moved int64, took time.Duration, sincePause int64) (paused bool) {
	req := r.request()
	switch req.Method {
	case client.MethodSquall, client.MethodZephyr:
		if req.Method == client.MethodZephyr || sincePause >= req.ChunkBytes { // Zephyr+'s chunks are whole moves
			sleepCtx(ctx, msDur(req.PaceDelayMs))
			return true
		}
	case client.MethodControlled, client.MethodPaced:
		r.mu.Lock()
		pace := r.pace
		r.mu.Unlock()
		if pace != nil {
			pace.Wait(ctx, moved, took)
		}
	}
	return false
}

// setPaced keeps the pulls' pacer at method paced's rate while on, and
// drops it once off.
func (r *reshardRun) setPaced(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !on {
		r.pace = nil
		return
	}
	rate := r.req.Rate
	if rate < 0 {
		rate = math.Inf(1)
	}
	if r.pace == nil {
		r.pace = throttle.NewPacer(rate)
	} else if r.pace.Rate() != rate {
		r.pace.SetRate(rate)
	}
}

// clean deletes one batch of chunk id's rows at its source; a batch that
// finds none marks the chunk cleaned.
func (r *reshardRun) clean(ctx context.Context, id int) {
	c := r.rec.Chunks[id]
	var n int64
	start := time.Now()
	ans, err := r.on(ctx, r.next, c.From, rsClean, reshardOpRequest{Chunks: []reshard.Chunk{c}, Limit: cleanBatch})
	n = ans.Cleaned
	if err != nil {
		r.a.log.Warn("reshard: deleting a pulled chunk at its source failed; retried", "keyspace", r.ks.Name, "chunk", c.String(), "err", err)
		sleepCtx(ctx, pullRetry)
		return
	}
	if n == 0 {
		r.mu.Lock()
		r.tr.Clean(id)
		r.mu.Unlock()
		return
	}
	if r.request().Method == client.MethodControlled && r.pace != nil && c.Bytes > 0 {
		// A deletion costs the source about what a pull of the same rows
		// does: charge the pace a batch's share of the chunk.
		r.pace.Wait(ctx, min(c.Bytes, c.Bytes*n/max(n, cleanBatch)), time.Since(start))
	}
}

// recover builds the tracker of a reconfiguration resumed after a restart
// from the destinations' fences: a chunk whose incoming fence is gone
// arrived.
func (r *reshardRun) recover(ctx context.Context) error {
	r.mu.Lock()
	have := r.tr != nil
	r.mu.Unlock()
	if have {
		return nil
	}
	arrived := map[int]bool{}
	_, dests := partsOf(r.rec.Chunks)
	for _, d := range dests {
		for {
			ans, err := r.on(ctx, r.next, d, rsArrived, reshardOpRequest{Chunks: chunksTo(r.rec.Chunks, d, false)})
			if err == nil {
				for id, ok := range ans.Arrived {
					arrived[id] = arrived[id] || ok
				}
				break
			}
			r.a.log.Warn("reshard: resuming: destination not readable; retrying", "partition", d, "err", err)
			if !sleepCtx(ctx, pullRetry) {
				return ctx.Err()
			}
		}
	}
	tr, err := reshard.NewTracker(r.rec.Chunks, func(id int) bool { return arrived[id] }, nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.tr = tr
	r.mu.Unlock()
	r.a.log.Info("reshard: resumed", "keyspace", r.ks.Name, "id", r.rec.ID, "arrived", len(arrived), "chunks", len(r.rec.Chunks))
	return nil
}

// finish ends a reconfiguration whose chunks all arrived and left their
// sources: its fence rows removed (the triggers stay, idle over an empty
// fence: arming them again would lock every table), the record done, the
// proxy told.
func (r *reshardRun) finish(ctx context.Context) {
	for _, p := range r.next.Partitions {
		for {
			_, err := r.on(ctx, r.next, p.Name, rsUnfence, reshardOpRequest{})
			if err == nil {
				break
			}
			r.a.log.Warn("reshard: removing fences failed; retrying", "partition", p.Name, "err", err)
			if !sleepCtx(ctx, pullRetry) {
				return
			}
		}
	}
	r.mu.Lock()
	r.rec.Phase, r.rec.Finished = client.PhaseDone, time.Now()
	r.rec.ReactivePulls, r.rec.AsyncPulls, r.rec.BytesCopied = r.reactive.Load(), r.async.Load(), r.copied.Load()
	rec := r.rec
	r.mu.Unlock()
	if err := r.putRecord(rec); err != nil {
		r.a.log.Error("reshard: catalog", "err", err)
	}
	r.a.announceKeyspace(ctx, r.next)
	r.a.log.Info("reshard: done", "keyspace", r.ks.Name, "id", rec.ID, "seconds", rec.Finished.Sub(rec.Started).Seconds(),
		"reactive_pulls", rec.ReactivePulls, "async_pulls", rec.AsyncPulls, "bytes", rec.BytesCopied)
}

// startControl runs the control loop of method controlled: a PID (or the
// controller Control names) on the proxy's latency windows of the
// partitions' servers sets the asynchronous pulls' pace.
func (r *reshardRun) startControl(ctx context.Context) (stop func()) {
	req := r.request()
	if req.Control == nil {
		return func() {}
	}
	cp, err := resolveControl(*req.Control)
	var ctrl control.Controller
	if err == nil {
		ctrl, err = cp.controller(0)
	}
	if err != nil {
		r.a.log.Error("reshard: control loop: bad spec; pulls run unpaced", "err", err)
		return func() {}
	}
	floor := cp.spec.MaxRate * reshardFloor
	pace := throttle.NewPacer(max(ctrl.Initial(), floor))
	r.mu.Lock()
	r.pace = pace
	r.mu.Unlock()
	obs := r.a.observer(cp)
	servers := r.serverAddrs(ctx)
	l := &loop.Loop{
		Controller: control.NewGovernor(ctrl, cp.profile.Governor(cp.setpoint, cp.spec.MaxRate, cp.byLatency())),
		Send:       floored{pace, floor},
		Period:     cp.profile.Step(),
		Setpoint:   cp.setpoint,
		Observe: func(ctx context.Context, at time.Time) control.Observation {
			if obs.lat != nil {
				obs.lat.Servers = servers
			}
			return obs.Observe(ctx, at)
		},
		Status: r.loopStatus,
	}
	lctx, cancel := context.WithCancel(ctx)
	go l.Run(lctx, func(p loop.Point) { r.lastPoint.Store(&p) })
	return func() {
		cancel()
		r.mu.Lock()
		r.pace = nil
		r.mu.Unlock()
	}
}

// reshardFloor is the least pace of a controlled reconfiguration, as a
// fraction of the control's top speed: unlike a tenant's migration, which
// may wait for slack, a reconfiguration that stops keeps its moving keys'
// transactions waiting for reactive pulls and never ends.
const reshardFloor = 0.05

// floored sets a pacer's rate, never below floor.
type floored struct {
	p     *throttle.Pacer
	floor float64
}

func (f floored) SetRate(r float64) { f.p.SetRate(max(r, f.floor)) }

// request is the run's request as last changed (SetReshardMethod).
func (r *reshardRun) request() client.ReshardRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.req
}

// serverAddrs are host:port of the partitions' servers, this agent's and
// its peers' (from their tenant lists, as Agent.serverAddrs for
// migrations): the clients the pulls may slow down. A peer that does not
// answer leaves its partitions out.
func (r *reshardRun) serverAddrs(ctx context.Context) []string {
	r.mu.Lock()
	ms := slices.Collect(maps.Values(r.members))
	r.mu.Unlock()
	slices.SortFunc(ms, func(x, y member) int { return strings.Compare(x.Name, y.Name) })
	var out []string
	peers := map[string][]client.Tenant{}
	for _, m := range ms {
		if m.url == "" {
			if tn, err := r.a.partitionTenant(m.Partition); err == nil {
				out = append(out, net.JoinHostPort(r.a.cfg.Tenant.AdvertiseHost, strconv.Itoa(tn.Port)))
			}
			continue
		}
		ts, ok := peers[m.url]
		if !ok {
			c, err := r.a.reshardPeer(m.url)
			if err == nil {
				ts, err = c.Tenants(ctx, false)
			}
			if err != nil {
				r.a.log.Warn("reshard: control loop: a peer's partitions are not watched", "peer", m.agent, "err", err)
			}
			peers[m.url] = ts
		}
		for _, t := range ts {
			if namesTenant(m.Tenant, t.ID, t.Name) && owns(catalog.State(t.State)) {
				out = append(out, net.JoinHostPort(t.Host, strconv.Itoa(t.Port)))
				break
			}
		}
	}
	return out
}

// loopStatus is the reconfiguration's progress as the control loop sees it.
func (r *reshardRun) loopStatus() loop.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.tr.Progress()
	st := loop.Status{Phase: client.PhaseMoving, Stage: control.StageCopy, Bytes: p.BytesDone, Lag: -1}
	if r.pace == nil {
		return st
	}
	if rate := r.pace.Rate(); rate > 0 && p.Bytes > p.BytesDone {
		st.Remaining = time.Duration(float64(p.Bytes-p.BytesDone) / rate * float64(time.Second))
	}
	return st
}

// resumeReshards rolls back the reconfigurations a restart interrupted
// before their switch and resumes those that switched, each once this
// agent holds the keyspace's driver lock (reshardLock; a previous
// process's lock is waited for in the background, as resumeMigrations
// does, and the record read again once held).
func (a *Agent) resumeReshards(ctx context.Context) {
	var recs []catalog.Reshard
	if err := a.cat.View(func(tx *catalog.Tx) (err error) { recs, err = tx.Reshards(); return err }); err != nil {
		a.log.Error("reshard: reading the catalog", "err", err)
		return
	}
	for _, rec := range recs {
		if !activePhase(rec.Phase) {
			continue
		}
		name := rec.Keyspace
		lk, err := a.cat.TryLock(ctx, reshardLock(name))
		if err == nil {
			a.resumeReshard(lk, name)
			continue
		}
		if !errors.Is(err, catalog.ErrLocked) {
			a.log.Error("reshard: cannot resume: lock", "keyspace", name, "err", err)
			continue
		}
		a.log.Warn("reshard: the keyspace's driver lock is held (a previous driver's lease has not ended); waiting for it", "keyspace", name)
		a.bg.Add(1)
		go func() {
			defer a.bg.Done()
			lk, err := a.cat.Lock(ctx, reshardLock(name))
			if err != nil {
				if ctx.Err() == nil {
					a.log.Error("reshard: cannot resume: lock", "keyspace", name, "err", err)
				}
				return
			}
			a.resumeReshard(lk, name)
		}()
	}
}

// resumeReshard resumes keyspace name's reconfiguration under its lock lk
// (released by the run, or here when there is nothing to run).
func (a *Agent) resumeReshard(lk *catalog.Lock, name string) {
	rec, err := a.cat.Reshard(name)
	if err != nil || !activePhase(rec.Phase) {
		if err != nil {
			a.log.Error("reshard: cannot resume", "keyspace", name, "err", err)
		}
		lk.Unlock(context.Background())
		return
	}
	r, err := a.reshardFromRecord(lk, rec)
	if err != nil {
		a.log.Error("reshard: cannot resume", "keyspace", rec.Keyspace, "id", rec.ID, "err", err)
		lk.Unlock(context.Background())
		return
	}
	a.rs.put(rec.Keyspace, r)
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		if rec.Phase != client.PhaseMoving {
			r.rollback(fmt.Errorf("the agent restarted during %s", rec.Phase))
			a.rs.put(rec.Keyspace, nil)
			lk.Unlock(context.Background())
			return
		}
		r.drive(a.bgCtx)
	}()
}

// reshardFromRecord rebuilds a run from its catalog record: the keyspace
// before and after (the catalog's is the new one once moving).
func (a *Agent) reshardFromRecord(lk *catalog.Lock, rec catalog.Reshard) (*reshardRun, error) {
	cur, err := a.cat.Keyspace(rec.Keyspace)
	if err != nil {
		return nil, err
	}
	var req client.ReshardRequest
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		return nil, err
	}
	old, next := cur, cur
	if rec.Phase == client.PhaseMoving {
		if old, err = cur.WithPlan(rec.FromPlan); err != nil {
			return nil, err
		}
		old.Epoch = rec.FromEpoch
	} else if next, err = cur.WithPlan(rec.ToPlan); err != nil {
		return nil, err
	}
	ms, err := a.members(next)
	if err != nil {
		return nil, err
	}
	return newReshardRun(a, lk, rec, req, old, next, ms), nil
}

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// sleepCtx sleeps d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
