package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/reshard"
	"github.com/sluicedb/sluice/reshard/pgreshard"
	"github.com/sluicedb/sluice/throttle"
)

// cleanBatch is how many rows of each table one source deletion removes.
const cleanBatch = 2000

// pullRetry is the pause before a failed pull is tried again.
const pullRetry = time.Second

// reshardRun drives one reconfiguration (reshard.go has the steps).
type reshardRun struct {
	a        *Agent
	lock     *catalog.Lock // the driver's lock on the keyspace (reshardLock): guards its catalog writes
	req      client.ReshardRequest
	ks, next *keyspace.Keyspace

	mu      sync.Mutex
	members map[string]member // by partition; updated when a tenant is found elsewhere (relocate)
	rec     catalog.Reshard
	tr      *reshard.Tracker      // from the switch on
	waiting map[int]chan struct{} // pulls in flight, closed when each ends
	failed  map[int]error         // the last failure of a chunk's pull
	wake    chan struct{}         // a reactive pull or a completion: the mover looks again

	pace      *throttle.Pacer // controlled: the control loop's rate
	reactive  atomic.Int64
	async     atomic.Int64
	copied    atomic.Int64
	lastPoint atomic.Pointer[loop.Point]
}

// newReshardRun makes the run of rec under the keyspace's driver lock lk;
// ms are the keyspace's partitions (a.members).
func newReshardRun(a *Agent, lk *catalog.Lock, rec catalog.Reshard, req client.ReshardRequest, ks, next *keyspace.Keyspace, ms []member) *reshardRun {
	r := &reshardRun{a: a, lock: lk, rec: rec, req: req, ks: ks, next: next, members: map[string]member{}, waiting: map[int]chan struct{}{},
		failed: map[int]error{}, wake: make(chan struct{}, 1)}
	for _, m := range ms {
		r.members[m.Name] = m
	}
	return r
}

// on runs op on partition part (onReshard), with ks as the keyspace.
func (r *reshardRun) on(ctx context.Context, ks *keyspace.Keyspace, part string, op reshardOp, req reshardOpRequest) (reshardAnswer, error) {
	r.mu.Lock()
	m, ok := r.members[part]
	r.mu.Unlock()
	if !ok {
		return reshardAnswer{}, fmt.Errorf("keyspace %s has no partition %s", ks.Name, part)
	}
	req.Reshard = r.rec.ID
	ans, err := r.a.onReshard(ctx, &m, ks, op, req)
	r.mu.Lock()
	r.members[part] = m
	r.mu.Unlock()
	return ans, err
}

// source is how a destination's agent names the agent of partition part.
func (r *reshardRun) source(part string) *reshardSource {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.a.sourceOf(r.members[part])
}

// reshardLock names the catalog lock a keyspace's reconfiguration driver
// holds (as driverLock for a migration).
func reshardLock(keyspace string) string { return "keyspace/" + keyspace }

// drive runs the reconfiguration from its recorded phase to its end, and
// releases its lock. A driver that loses the lock stops at once, touching
// neither the partitions nor the catalog again (no rollback: the next
// holder resumes or rolls back from the record).
func (r *reshardRun) drive(ctx context.Context) {
	defer r.lock.Unlock(context.Background())
	defer r.a.rs.put(r.ks.Name, nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.lock.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()
	lost := func(err error) bool {
		if !lockLost(r.lock, err) {
			return false
		}
		r.a.log.Error("reshard: this agent lost the keyspace's driver lock (another driver may hold it); it stops driving", "keyspace", r.ks.Name, "id", r.rec.ID, "err", err)
		return true
	}
	if r.rec.Phase == client.PhasePreparing || r.rec.Phase == client.PhaseSwitching {
		if err := r.prepareAndSwitch(ctx); err != nil {
			if !lost(err) {
				r.rollback(err)
			}
			return
		}
	}
	if err := r.move(ctx); err != nil {
		if !lost(err) {
			r.a.log.Warn("reshard: stopped; it resumes when the agent restarts", "keyspace", r.ks.Name, "id", r.rec.ID, "err", err)
		}
		return
	}
	r.finish(ctx)
}

// putRecord writes rec under the driver's lock.
func (r *reshardRun) putRecord(rec catalog.Reshard) error {
	return r.lock.Update(func(tx *catalog.Tx) error { return tx.PutReshard(rec) })
}

func (r *reshardRun) setPhase(phase string) error {
	r.mu.Lock()
	r.rec.Phase = phase
	rec := r.rec
	r.mu.Unlock()
	return r.putRecord(rec)
}

// prepareAndSwitch installs the fences and switches the plan (steps
// preparing and switching). An error leaves the old plan current.
func (r *reshardRun) prepareAndSwitch(ctx context.Context) error {
	chunks := r.rec.Chunks
	sources, dests := partsOf(chunks)
	for _, p := range r.ks.Partitions {
		if _, err := r.on(ctx, r.ks, p.Name, rsInstall, reshardOpRequest{}); err != nil {
			return fmt.Errorf("fence triggers: %w", err)
		}
	}
	for _, d := range dests {
		if _, err := r.on(ctx, r.ks, d, rsFenceIn, reshardOpRequest{Chunks: chunksTo(chunks, d, false)}); err != nil {
			return fmt.Errorf("incoming fence: %w", err)
		}
	}
	if err := r.setPhase(client.PhaseSwitching); err != nil {
		return err
	}
	start := time.Now()
	pc := r.a.proxyClient()
	if r.a.cfg.Proxy != "" {
		if err := pc.HoldKeyspace(ctx, r.ks.Name, reshardHoldDeadline); err != nil {
			return fmt.Errorf("proxy: hold: %w", err)
		}
	}
	release := func() {
		if r.a.cfg.Proxy != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			pc.ReleaseKeyspace(rctx, r.ks.Name)
		}
	}
	for _, s := range sources {
		// The fence's own timeout runs where the partition is; the call
		// waits a little longer for its answer.
		fctx, cancel := context.WithTimeout(ctx, reshardFenceTimeout+10*time.Second)
		_, err := r.on(fctx, r.ks, s, rsFenceOut, reshardOpRequest{Chunks: chunksTo(chunks, s, true), TimeoutMs: reshardFenceTimeout.Milliseconds()})
		cancel()
		if err != nil {
			release()
			return fmt.Errorf("outgoing fence: %w", err)
		}
	}
	tr, err := reshard.NewTracker(chunks, nil, nil)
	if err != nil {
		release()
		return err
	}
	r.mu.Lock()
	r.rec.Phase, r.rec.Switched = client.PhaseMoving, time.Now()
	r.rec.SwitchMs = float64(time.Since(start).Microseconds()) / 1000
	rec := r.rec
	r.tr = tr
	r.mu.Unlock()
	if err := r.lock.Update(func(tx *catalog.Tx) error {
		if err := tx.PutKeyspace(r.next); err != nil {
			return err
		}
		return tx.PutReshard(rec)
	}); err != nil {
		release()
		return fmt.Errorf("catalog: %w", err)
	}
	if r.a.cfg.Proxy != "" {
		// The plan is switched. The proxy stays held until it has the new
		// plan — from this call, or from its catalog poll (a new epoch ends
		// its hold) — never released onto the old one: a transaction routed
		// by the old plan after a chunk's rows left its source would update
		// nothing.
		ksJSON, _ := json.Marshal(r.next)
		for try := 0; ; try++ {
			err := pc.SwitchKeyspace(ctx, ksJSON, r.status(true), r.a.url)
			if err == nil {
				break
			}
			if try == 10 || ctx.Err() != nil {
				r.a.log.Error("reshard: the proxy did not take the switch; it stays held until its catalog poll brings the new plan",
					"keyspace", r.ks.Name, "err", err)
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	r.mu.Lock()
	r.rec.SwitchMs = float64(time.Since(start).Microseconds()) / 1000
	r.mu.Unlock()
	r.a.log.Info("reshard: switched", "keyspace", r.ks.Name, "id", r.rec.ID, "epoch", r.next.Epoch, "hold_ms", r.rec.SwitchMs)
	return nil
}

// rollback undoes a reconfiguration that did not switch: its fence rows
// removed (the triggers stay, idle), the record failed.
func (r *reshardRun) rollback(cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.a.log.Error("reshard: rolled back before the switch", "keyspace", r.ks.Name, "id", r.rec.ID, "err", cause)
	for _, p := range r.ks.Partitions {
		_, err := r.on(ctx, r.ks, p.Name, rsUnfence, reshardOpRequest{})
		if err != nil {
			r.a.log.Error("reshard: rollback: fences left on a partition", "partition", p.Name, "err", err)
		}
	}
	r.mu.Lock()
	r.rec.Phase, r.rec.Error, r.rec.Finished = client.PhaseFailed, cause.Error(), time.Now()
	rec := r.rec
	r.mu.Unlock()
	if err := r.putRecord(rec); err != nil {
		r.a.log.Error("reshard: rollback: catalog", "err", err)
	}
}

// status is the run's client.ReshardStatus.
func (r *reshardRun) status(chunks bool) client.ReshardStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := recordStatus(r.rec, false)
	st.ReactivePulls, st.AsyncPulls, st.BytesCopied = r.reactive.Load(), r.async.Load(), r.copied.Load()
	if r.tr != nil {
		st.Progress = r.tr.Progress()
		if chunks {
			st.Chunks = chunkStates(r.tr)
		}
	} else if chunks {
		st.Chunks = chunkStates(mustTracker(r.rec.Chunks))
	}
	st.Rate = r.rate()
	if p := r.lastPoint.Load(); p != nil {
		st.LatencyMs, st.SetpointMs = p.LatencyMs, p.SetpointMs
	}
	if st.Rate > 0 && st.Progress.Bytes > st.Progress.BytesDone {
		st.ETASeconds = float64(st.Progress.Bytes-st.Progress.BytesDone) / st.Rate
	}
	return st
}

func mustTracker(chunks []reshard.Chunk) *reshard.Tracker {
	tr, _ := reshard.NewTracker(chunks, nil, nil)
	return tr
}

// rate is the asynchronous pulls' pace, bytes/s: -1 unlimited, 0 none.
func (r *reshardRun) rate() float64 {
	switch r.req.Method {
	case client.MethodReactive:
		return 0
	case client.MethodStopAndCopy:
		return -1
	case client.MethodSquall, client.MethodZephyr:
		return float64(r.req.ChunkBytes) / (r.req.PaceDelayMs / 1000)
	}
	if r.pace == nil {
		return 0
	}
	if v := r.pace.Rate(); !math.IsInf(v, 1) {
		return v
	}
	return -1
}

// poke wakes the mover.
func (r *reshardRun) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// await makes chunk id Complete: it starts its pull unless one is in
// flight, and waits for it. reactive counts it as a transaction's.
func (r *reshardRun) await(ctx context.Context, id int, reactive bool) error {
	if c := r.rec.Chunks[id]; c.Sub != nil && c.Group != id {
		// A key's later sub-chunks load after its first, which holds the
		// root's row their rows may reference.
		if err := r.await(ctx, c.Group, reactive); err != nil {
			return err
		}
	}
	for {
		r.mu.Lock()
		if r.tr == nil {
			r.mu.Unlock()
			return errors.New("the reconfiguration has not switched yet")
		}
		if r.tr.State(id) == reshard.Complete {
			r.mu.Unlock()
			return nil
		}
		ch, ok := r.waiting[id]
		if !ok {
			r.tr.Begin(id)
			ch = make(chan struct{})
			r.waiting[id] = ch
			if reactive {
				r.reactive.Add(1)
			} else {
				r.async.Add(1)
			}
			go r.pull(id, ch)
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
		err, st := r.failed[id], r.tr.State(id)
		r.mu.Unlock()
		if st == reshard.Complete {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// pull has chunk id's destination agent pull it (op pull) and records
// the result; ch is closed when it is known.
func (r *reshardRun) pull(id int, ch chan struct{}) {
	ctx, cancel := context.WithTimeout(r.a.bgCtx, 10*time.Minute)
	defer cancel()
	c := r.rec.Chunks[id]
	var res pgreshard.Pulled
	ans, err := r.on(ctx, r.next, c.To, rsPull, reshardOpRequest{Chunks: []reshard.Chunk{c}, Source: r.source(c.From)})
	if err == nil && ans.Pulled != nil {
		res = *ans.Pulled
	}
	r.copied.Add(res.Bytes)
	r.mu.Lock()
	if err != nil {
		r.tr.Failed(id)
		r.failed[id] = err
	} else {
		r.tr.Done(id)
		delete(r.failed, id)
	}
	delete(r.waiting, id)
	close(ch)
	r.mu.Unlock()
	if err != nil {
		r.a.log.Warn("reshard: pull failed; it is retried", "keyspace", r.ks.Name, "chunk", c.String(), "err", err)
	}
	r.poke()
}
