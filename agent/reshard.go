package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// A keyspace's live reconfiguration (package reshard; the Squall paper) is
// driven by the agent holding the keyspace:
//
//	POST /v1/keyspaces/{name}/reshard       client.ReshardRequest → 202 client.ReshardStatus
//	GET  /v1/keyspaces/{name}/reshard       the one in progress or the last (?chunks=1: with its chunks)
//	POST /v1/keyspaces/{name}/reshard/pull  {"chunk": id}: pull it now (reactive), answer once Complete
//	POST /v1/keyspaces/{name}/reshard/pace  client.ReshardPace: change the method (and control) of the one moving
//
// Steps (reshard's doc has the ownership argument): preparing — fence
// triggers on every partition, incoming fences at the destinations;
// switching — the proxy holds the keyspace's new transactions until the
// open ones end, the sources fence what they give away, and the catalog
// makes the new plan current in the same transaction that records the
// reconfiguration as moving; the proxy gets the new plan with its moving
// chunks and lets transactions go; moving — chunks are pulled, reactively
// when a transaction needs them and asynchronously at the method's pace,
// then deleted at their sources; done — fences and triggers removed. A
// failure before the catalog's switch rolls back (the old plan stays
// current, nothing fenced); after it, the driver retries until every chunk
// has arrived, and a restarted agent resumes from the destinations' fences.
//
// A partition may be a tenant of this agent or of a peer: every operation
// on a partition goes through onReshard, and a chunk is pulled by its
// destination's agent (reshard_peers.go).

// reshardHoldDeadline bounds the switch's hold: the wait for the
// keyspace's open transactions to end.
const reshardHoldDeadline = 2 * time.Second

// reshardFenceTimeout bounds each source's outgoing fence (its SHARE locks
// wait for writers that bypass the proxy).
const reshardFenceTimeout = 5 * time.Second

// reshardRuns are the reconfigurations this agent drives now, and the
// clients of the peers their operations go to.
type reshardRuns struct {
	registry[reshardRun] // by keyspace
	peersMu              sync.Mutex
	// peers are clients by URL and token, kept: each client has its own
	// connection pool, and a reconfiguration calls its peers per chunk.
	peers map[[2]string]*client.Client
}

// reshardPeer is a.peerClient(url), one per URL and token.
func (a *Agent) reshardPeer(url string) (*client.Client, error) {
	key := [2]string{url, a.peerToken(url)}
	a.rs.peersMu.Lock()
	defer a.rs.peersMu.Unlock()
	if c, ok := a.rs.peers[key]; ok {
		return c, nil
	}
	c, err := a.peerClient(url)
	if err != nil {
		return nil, err
	}
	if a.rs.peers == nil {
		a.rs.peers = map[[2]string]*client.Client{}
	}
	a.rs.peers[key] = c
	return c, nil
}

func (a *Agent) reshardRoutes(mux *http.ServeMux) {
	a.reshardPeerRoutes(mux)
	mux.HandleFunc("POST /v1/keyspaces/{name}/reshard", func(w http.ResponseWriter, r *http.Request) {
		var req client.ReshardRequest
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.StartReshard(r.Context(), r.PathValue("name"), req)
		answer(w, http.StatusAccepted, v, err)
	})
	mux.HandleFunc("GET /v1/keyspaces/{name}/reshard", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.ReshardStatus(r.PathValue("name"), r.URL.Query().Get("chunks") != "")
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("POST /v1/keyspaces/{name}/reshard/pace", func(w http.ResponseWriter, r *http.Request) {
		var in client.ReshardPace
		if err := readJSON(r, &in); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.SetReshardPace(r.PathValue("name"), in)
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("POST /v1/keyspaces/{name}/reshard/pull", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Chunk   int    `json:"chunk"`
			Reshard string `json:"reshard"`
		}
		if err := readJSON(r, &in); err != nil {
			writeError(w, err)
			return
		}
		answer(w, http.StatusOK, struct{}{}, a.ReactivePull(r.Context(), r.PathValue("name"), in.Reshard, in.Chunk))
	})
}

// reshardOptions are a method's chunking and pacing.
func reshardOptions(req client.ReshardRequest) reshard.Options {
	o := reshard.Options{ChunkBytes: req.ChunkBytes, Split: true, Merge: true, SubPlans: req.SubPlans,
		PieceBytes: max(req.ChunkBytes/piecesPerChunk, minPieceBytes)}
	switch req.Method {
	case client.MethodZephyr, client.MethodStopAndCopy:
		o.Split, o.Merge, o.SubPlans, o.PieceBytes = false, false, 1, 0
	}
	return o
}

// A chunk is tracked in pieces of a sixteenth (at least minPieceBytes): a
// transaction waits for the pull of the piece around its key (Squall pulls
// single keys reactively), while the asynchronous pulls' fixed pace still
// pauses once a chunk's worth of pieces has moved.
const (
	piecesPerChunk = 16
	minPieceBytes  = 64 << 10
)

// checkReshardRequest fills req's defaults and refuses what is out of range.
func checkReshardRequest(req *client.ReshardRequest) error {
	req.Method = cmp.Or(req.Method, client.MethodControlled)
	switch req.Method {
	case client.MethodControlled:
		if req.Control == nil || req.Control.SetpointMs <= 0 {
			return errf(http.StatusBadRequest, "method controlled paces by the clients' latency: give a setpoint (--setpoint), or --method squall for Squall's fixed pace")
		}
		cp, err := resolveControl(*req.Control)
		if err == nil {
			_, err = cp.controller(0)
		}
		if err != nil {
			return err
		}
	case client.MethodPaced:
		if req.Control != nil {
			return errf(http.StatusBadRequest, "method paced has no control loop: control (--setpoint) is for method controlled")
		}
		if req.Rate != -1 && (math.IsNaN(req.Rate) || math.IsInf(req.Rate, 0) || req.Rate < client.MinRate) {
			return errf(http.StatusBadRequest, "method paced: rate %v: want at least %d bytes/s, or -1 (unlimited)", req.Rate, client.MinRate)
		}
	case client.MethodSquall, client.MethodReactive, client.MethodZephyr, client.MethodStopAndCopy:
		if req.Control != nil {
			return errf(http.StatusBadRequest, "method %s has no control loop: control (--setpoint) is for method controlled", req.Method)
		}
	default:
		return errf(http.StatusBadRequest, "unknown method %q (controlled, squall, reactive, zephyr, stop-and-copy, paced)", req.Method)
	}
	if req.Rate != 0 && req.Method != client.MethodPaced {
		return errf(http.StatusBadRequest, "rate is method paced's pace; method %s has its own", req.Method)
	}
	if req.ChunkBytes == 0 {
		req.ChunkBytes = reshard.DefaultChunkBytes
	}
	if req.ChunkBytes < 64<<10 || req.ChunkBytes > 1<<30 {
		return errf(http.StatusBadRequest, "chunk_bytes %d: want 64 KiB to 1 GiB", req.ChunkBytes)
	}
	if req.SubPlans == 0 {
		req.SubPlans = 5
	}
	if req.SubPlans < 1 || req.SubPlans > 20 {
		return errf(http.StatusBadRequest, "sub_plans %d: want 1 to 20", req.SubPlans)
	}
	if req.PaceDelayMs == 0 {
		req.PaceDelayMs = 200
	}
	if req.SubPlanPauseMs == 0 {
		req.SubPlanPauseMs = 100
	}
	if req.PaceDelayMs < 0 || req.PaceDelayMs > 60000 || req.SubPlanPauseMs < 0 || req.SubPlanPauseMs > 60000 {
		return errf(http.StatusBadRequest, "pace_delay_ms and sub_plan_pause_ms: want 0 to 60000")
	}
	return nil
}

// active reports whether phase is a reconfiguration still running.
func activePhase(phase string) bool {
	return phase == client.PhasePreparing || phase == client.PhaseSwitching || phase == client.PhaseMoving
}

// StartReshard checks a reconfiguration of keyspace name to req.Plan, cuts
// it into chunks and starts driving it. Everything refused here is refused
// before anything changes.
func (a *Agent) StartReshard(ctx context.Context, name string, req client.ReshardRequest) (client.ReshardStatus, error) {
	a.ksMu.Lock()
	defer a.ksMu.Unlock()
	ks, err := a.keyspace(name)
	if err != nil {
		return client.ReshardStatus{}, err
	}
	if prev, err := a.cat.Reshard(name); err == nil && activePhase(prev.Phase) {
		return client.ReshardStatus{}, errf(http.StatusConflict, "keyspace %s: reconfiguration %s is %s (started %s): one at a time",
			name, prev.ID, prev.Phase, prev.Started.Format(time.RFC3339))
	}
	if err := checkReshardRequest(&req); err != nil {
		return client.ReshardStatus{}, err
	}
	next, err := ks.WithPlan(req.Plan)
	if err != nil {
		return client.ReshardStatus{}, errf(http.StatusBadRequest, "%v", err)
	}
	moves, err := keyspace.Diff(ks, next)
	if err != nil {
		return client.ReshardStatus{}, errf(http.StatusBadRequest, "%v", err)
	}
	if len(moves) == 0 {
		return client.ReshardStatus{}, errf(http.StatusBadRequest, "keyspace %s: the plan moves no key: nothing to reconfigure", name)
	}
	ms, err := a.members(ks)
	if err != nil {
		return client.ReshardStatus{}, err
	}
	stats, err := a.reshardStats(ctx, ks, ms, moves)
	if err != nil {
		return client.ReshardStatus{}, err
	}
	chunks := reshard.Plan(ks, moves, func(root, part string) reshard.Stats { return stats[root+"\x00"+part] }, reshardOptions(req))
	if err := a.checkReach(ctx, ks, ms, chunks); err != nil {
		return client.ReshardStatus{}, err
	}
	body, _ := json.Marshal(req)
	rec := catalog.Reshard{ID: newReshardID(), Keyspace: name, Phase: client.PhasePreparing, Method: req.Method, Request: body,
		FromPlan: ks.Plan, ToPlan: next.Plan, FromEpoch: ks.Epoch, ToEpoch: next.Epoch, Chunks: chunks, Started: time.Now()}
	lk, err := a.cat.TryLock(ctx, reshardLock(name))
	if err != nil {
		if errors.Is(err, catalog.ErrLocked) {
			return client.ReshardStatus{}, errf(http.StatusConflict, "keyspace %s is being reconfigured by another driver (%v)", name, err)
		}
		return client.ReshardStatus{}, err
	}
	if err := lk.Update(func(tx *catalog.Tx) error { return tx.PutReshard(rec) }); err != nil {
		lk.Unlock(context.Background())
		return client.ReshardStatus{}, err
	}
	r := newReshardRun(a, lk, rec, req, ks, next, ms)
	a.rs.put(name, r)
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		r.drive(a.bgCtx)
	}()
	a.log.Info("reshard: started", "keyspace", name, "id", rec.ID, "method", req.Method, "chunks", len(chunks), "epoch", next.Epoch)
	return r.status(false), nil
}

func newReshardID() string {
	var b [4]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// reshardStats reads the planner's statistics of every moving root on
// every source (ANALYZE first where it never ran), on the agent running it.
func (a *Agent) reshardStats(ctx context.Context, ks *keyspace.Keyspace, ms []member, moves []keyspace.Move) (map[string]reshard.Stats, error) {
	out := map[string]reshard.Stats{}
	for _, mv := range moves {
		key := mv.Root + "\x00" + mv.From
		if _, ok := out[key]; ok {
			continue
		}
		i := slices.IndexFunc(ms, func(m member) bool { return m.Name == mv.From })
		t, _ := ks.Table(mv.Root)
		ans, err := a.onReshard(ctx, &ms[i], ks, rsStats, reshardOpRequest{Root: mv.Root})
		var st reshard.Stats
		if err == nil && ans.Stats == nil {
			err = errors.New("no statistics in the answer")
		}
		if err == nil {
			st, err = ans.Stats.stats(t.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("partition %s: statistics of %s: %w", mv.From, mv.Root, err)
		}
		out[key] = st
	}
	return out, nil
}

// ReshardStatus returns keyspace name's reconfiguration in progress, or
// its last one.
func (a *Agent) ReshardStatus(name string, chunks bool) (client.ReshardStatus, error) {
	if r := a.rs.get(name); r != nil {
		return r.status(chunks), nil
	}
	rec, err := a.cat.Reshard(name)
	if errors.Is(err, catalog.ErrNotFound) {
		return client.ReshardStatus{}, errf(http.StatusNotFound, "keyspace %s has had no reconfiguration on agent %s", name, a.cfg.Name)
	}
	if err != nil {
		return client.ReshardStatus{}, err
	}
	return recordStatus(rec, chunks), nil
}

// recordStatus is a finished (or not yet resumed) reconfiguration's status.
func recordStatus(rec catalog.Reshard, chunks bool) client.ReshardStatus {
	st := client.ReshardStatus{ID: rec.ID, Keyspace: rec.Keyspace, Method: rec.Method, Phase: rec.Phase, FromEpoch: rec.FromEpoch,
		ToEpoch: rec.ToEpoch, Started: rec.Started, Switched: rec.Switched, Finished: rec.Finished, SwitchMs: rec.SwitchMs,
		ReactivePulls: rec.ReactivePulls, AsyncPulls: rec.AsyncPulls, BytesCopied: rec.BytesCopied, Error: rec.Error}
	done := rec.Phase == client.PhaseDone
	tr, _ := reshard.NewTracker(rec.Chunks, func(int) bool { return done }, func(int) bool { return done })
	if tr != nil {
		st.Progress = tr.Progress()
		if chunks {
			st.Chunks = chunkStates(tr)
		}
	}
	return st
}

func chunkStates(tr *reshard.Tracker) []client.ReshardChunk {
	out := make([]client.ReshardChunk, len(tr.Chunks()))
	for i, c := range tr.Chunks() {
		out[i] = client.ReshardChunk{Chunk: c, State: tr.State(i).String(), Cleaned: tr.Cleaned(i)}
	}
	return out
}

// ReactivePull pulls chunk id of keyspace name's reconfiguration now and
// returns once it is Complete (at once if it is).
func (a *Agent) ReactivePull(ctx context.Context, name, id string, chunk int) error {
	r := a.rs.get(name)
	if r == nil {
		rec, err := a.cat.Reshard(name)
		if err == nil && rec.ID == id && rec.Phase == client.PhaseDone {
			return nil // finished: every chunk arrived
		}
		return errf(http.StatusConflict, "keyspace %s: no reconfiguration is moving on agent %s", name, a.cfg.Name)
	}
	if id != "" && id != r.rec.ID {
		return errf(http.StatusConflict, "keyspace %s: reconfiguration %s is not the one moving (%s)", name, id, r.rec.ID)
	}
	if chunk < 0 || chunk >= len(r.rec.Chunks) {
		return errf(http.StatusBadRequest, "keyspace %s: reconfiguration %s has no chunk %d", name, r.rec.ID, chunk)
	}
	return r.await(ctx, chunk, true)
}

// SetReshardPace changes how the moving reconfiguration of keyspace name
// pulls the rest: its method, control and fixed pace (chunking stays).
func (a *Agent) SetReshardPace(name string, in client.ReshardPace) (client.ReshardStatus, error) {
	r := a.rs.get(name)
	if r == nil {
		return client.ReshardStatus{}, errf(http.StatusConflict, "keyspace %s: no reconfiguration is running on agent %s", name, a.cfg.Name)
	}
	req := r.request()
	was := req.Method
	req.Method, req.Control, req.PaceDelayMs, req.Rate = in.Method, in.Control, in.PaceDelayMs, in.Rate
	if err := checkReshardRequest(&req); err != nil {
		return client.ReshardStatus{}, err
	}
	body, _ := json.Marshal(req)
	r.mu.Lock()
	r.req = req
	r.rec.Method, r.rec.Request = req.Method, body
	rec := r.rec
	r.mu.Unlock()
	if err := r.putRecord(rec); err != nil {
		return client.ReshardStatus{}, err
	}
	if req.Method == client.MethodPaced {
		r.setPaced(true) // now: a pull may be sleeping out its slot at the old rate
	}
	r.poke()
	lvl := slog.LevelDebug // a plan's driver repaces its moves every few steps
	if req.Method != was {
		lvl = slog.LevelInfo
	}
	a.log.Log(context.Background(), lvl, "reshard: pace changed", "keyspace", name, "id", rec.ID, "method", req.Method, "rate", req.Rate)
	return r.status(false), nil
}

// partsOf lists the sources and destinations of chunks, sorted.
func partsOf(chunks []reshard.Chunk) (sources, dests []string) {
	for _, c := range chunks {
		if !slices.Contains(sources, c.From) {
			sources = append(sources, c.From)
		}
		if !slices.Contains(dests, c.To) {
			dests = append(dests, c.To)
		}
	}
	slices.Sort(sources)
	slices.Sort(dests)
	return sources, dests
}

func chunksTo(chunks []reshard.Chunk, part string, from bool) []reshard.Chunk {
	var out []reshard.Chunk
	for _, c := range chunks {
		if (from && c.From == part) || (!from && c.To == part) {
			out = append(out, c)
		}
	}
	return out
}
