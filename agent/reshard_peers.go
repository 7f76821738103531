package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
	"github.com/sluicedb/sluice/reshard/pgreshard"
)

// A reconfiguration's partitions may be tenants of the driving agent or
// of its peers. Every pgreshard operation on a partition goes through one
// dispatch (onReshard): here, over the tenant's superuser socket, or on
// the agent running the tenant through
//
//	POST /v1/internal/reshard/{op}     reshardOpRequest → reshardAnswer
//	POST /v1/internal/reshard/copyout  reshardOpRequest → a chunk stream (pgreshard.CopyOut)
//
// guarded like /v1/internal/partitions/{op} (the agent's token) and
// following a migrated tenant the same way (410 Gone, relocate). The peer
// validates the keyspace and the op's arguments again and runs only the
// fixed ops below.
//
// A pull runs at the destination partition's agent. It reads the chunk
// from the source partition over its own socket when that tenant is its
// own too, else from the source's agent's copyout endpoint: one
// REPEATABLE READ READ ONLY snapshot streamed as binary COPY in one HTTP
// answer, loaded by pgreshard.Load, which rolls back a stream cut short or
// corrupt. The driver names the source's agent as it knows it (name and
// URL); the destination's agent must know it too — as itself or as one of
// its peers — and StartReshard asks it (op reach) before anything changes.

// reshardOp is one operation of a reconfiguration on a partition.
type reshardOp string

const (
	rsInstall   reshardOp = "install"   // pgreshard.Install
	rsUninstall reshardOp = "uninstall" // pgreshard.Uninstall
	rsFenceIn   reshardOp = "fence-in"  // pgreshard.FenceIn of Chunks (destined here)
	rsFenceOut  reshardOp = "fence-out" // pgreshard.FenceOut of Chunks (leaving here), within TimeoutMs
	rsUnfence   reshardOp = "unfence"   // pgreshard.Unfence of Side
	rsArrived   reshardOp = "arrived"   // pgreshard.Arrived of Chunks → Arrived
	rsStats     reshardOp = "stats"     // pgreshard.Stats of Root (ANALYZE first if never analysed) → Stats
	rsClean     reshardOp = "clean"     // pgreshard.Clean of Chunks[0], Limit rows per table → Cleaned
	rsPull      reshardOp = "pull"      // Chunks[0] from Source into this partition → Pulled
	rsReach     reshardOp = "reach"     // can this agent read from Source's agent?
	rsCopyOut   reshardOp = "copyout"   // Chunks[0]'s stream (its own endpoint, handleCopyOut)
)

// reshardOpRequest is the body of POST /v1/internal/reshard/{op} and of
// copyout (Chunks[0] of Partition, its source).
type reshardOpRequest struct {
	Keyspace  keyspace.Keyspace `json:"keyspace"`
	Partition string            `json:"partition"`
	Reshard   string            `json:"reshard"`
	Chunks    []reshard.Chunk   `json:"chunks,omitempty"`
	Side      string            `json:"side,omitempty"`
	Root      string            `json:"root,omitempty"`
	Limit     int               `json:"limit,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"` // fence-out's lock wait; under 1 s counts as 1 s
	// Source is the agent running the pulled chunk's source partition (or
	// reach's), as the driver knows it.
	Source *reshardSource `json:"source,omitempty"`
}

// reshardSource names an agent: its name and API URL as the driver
// knows them.
type reshardSource struct {
	Agent string `json:"agent"`
	URL   string `json:"url"`
}

// reshardAnswer is an op's result; only its op's field is set.
type reshardAnswer struct {
	Arrived map[int]bool      `json:"arrived,omitempty"`
	Stats   *statsWire        `json:"stats,omitempty"`
	Cleaned int64             `json:"cleaned,omitempty"`
	Pulled  *pgreshard.Pulled `json:"pulled,omitempty"`
}

// statsWire is reshard.Stats with its bounds as text (keyspace.ParseKey).
type statsWire struct {
	Rows   float64  `json:"rows"`
	Bytes  int64    `json:"bytes"`
	Bounds []string `json:"bounds,omitempty"`
}

func toStatsWire(st reshard.Stats) *statsWire {
	w := &statsWire{Rows: st.Rows, Bytes: st.Bytes}
	for _, k := range st.Bounds {
		if k.Type == keyspace.Text {
			w.Bounds = append(w.Bounds, k.S)
		} else {
			w.Bounds = append(w.Bounds, fmt.Sprint(k.I))
		}
	}
	return w
}

func (w *statsWire) stats(t keyspace.KeyType) (reshard.Stats, error) {
	st := reshard.Stats{Rows: w.Rows, Bytes: w.Bytes}
	for _, b := range w.Bounds {
		k, err := keyspace.ParseKey(t, b)
		if err != nil {
			return st, err
		}
		st.Bounds = append(st.Bounds, k)
	}
	return st, nil
}

// reshardIDRE is the form of newReshardID's ids.
var reshardIDRE = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$`)

// reshardPeerRoutes registers the internal reconfiguration endpoints.
func (a *Agent) reshardPeerRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/internal/reshard/copyout", a.handleCopyOut)
	mux.HandleFunc("POST /v1/internal/reshard/{op}", func(w http.ResponseWriter, r *http.Request) {
		var req reshardOpRequest
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.runReshardOp(r.Context(), reshardOp(r.PathValue("op")), &req)
		answer(w, http.StatusOK, v, err)
	})
}

// handleCopyOut streams a chunk from its source partition, here.
func (a *Agent) handleCopyOut(w http.ResponseWriter, r *http.Request) {
	var req reshardOpRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := a.checkReshardOp(rsCopyOut, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	conn, _, err := a.partitionConn(r.Context(), p, false)
	if err != nil {
		writeError(w, err)
		return
	}
	defer conn.Close(context.WithoutCancel(r.Context()))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if err := pgreshard.CopyOut(r.Context(), conn, req.Chunks[0], &req.Keyspace, w); err != nil {
		a.log.Warn("reshard: streaming a chunk failed", "keyspace", req.Keyspace.Name, "chunk", req.Chunks[0].String(), "err", err)
	}
}

// checkReshardOp validates req for op (the keyspace, the partition, the
// reconfiguration's id, the chunks' direction) and returns the partition.
func (a *Agent) checkReshardOp(op reshardOp, req *reshardOpRequest) (keyspace.Partition, error) {
	if err := req.Keyspace.Validate(); err != nil {
		return keyspace.Partition{}, errf(http.StatusBadRequest, "%v", err)
	}
	ks := &req.Keyspace
	p, ok := ks.Partition(req.Partition)
	if !ok {
		return p, errf(http.StatusBadRequest, "keyspace %s has no partition %q", ks.Name, req.Partition)
	}
	if op != rsReach && op != rsStats && !reshardIDRE.MatchString(req.Reshard) { // those two run before the id exists
		return p, errf(http.StatusBadRequest, "bad reconfiguration id %q", req.Reshard)
	}
	for _, c := range req.Chunks {
		_, okFrom := ks.Partition(c.From)
		_, okTo := ks.Partition(c.To)
		if !okFrom || !okTo {
			return p, errf(http.StatusBadRequest, "%s: not partitions of keyspace %s", c, ks.Name)
		}
	}
	var into bool // the op's chunks must arrive here (else leave here)
	switch op {
	case rsFenceIn, rsArrived:
		into = true
	case rsFenceOut:
		if req.TimeoutMs < 0 || req.TimeoutMs > 60000 {
			return p, errf(http.StatusBadRequest, "fence-out: timeout_ms %d: want 0 to 60000", req.TimeoutMs)
		}
	case rsClean, rsPull, rsCopyOut:
		if len(req.Chunks) != 1 {
			return p, errf(http.StatusBadRequest, "%s takes one chunk, not %d", op, len(req.Chunks))
		}
		into = op == rsPull
		if op == rsClean && (req.Limit <= 0 || req.Limit > 1e6) {
			return p, errf(http.StatusBadRequest, "clean: limit %d: want 1 to 1000000", req.Limit)
		}
		if op == rsPull && req.Source == nil {
			return p, errf(http.StatusBadRequest, "pull: no source agent")
		}
	case rsReach:
		if req.Source == nil {
			return p, errf(http.StatusBadRequest, "reach: no source agent")
		}
		return p, nil
	case rsInstall, rsUninstall, rsUnfence, rsStats:
		return p, nil
	default:
		return p, errf(http.StatusNotFound, "no such reconfiguration operation %q", op)
	}
	for _, c := range req.Chunks {
		if (into && c.To != p.Name) || (!into && c.From != p.Name) {
			return p, errf(http.StatusBadRequest, "%s: op %s on partition %s: wrong direction", c, op, p.Name)
		}
	}
	return p, nil
}

// runReshardOp runs op on partition req.Partition, which this agent runs.
func (a *Agent) runReshardOp(ctx context.Context, op reshardOp, req *reshardOpRequest) (reshardAnswer, error) {
	var ans reshardAnswer
	p, err := a.checkReshardOp(op, req)
	if err != nil {
		return ans, err
	}
	ks := &req.Keyspace
	switch op {
	case rsReach:
		return ans, a.reach(ctx, req.Source)
	case rsCopyOut:
		return ans, errf(http.StatusBadRequest, "copyout streams: it is not an operation with an answer")
	}
	conn, _, err := a.partitionConn(ctx, p, false)
	if err != nil {
		return ans, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	switch op {
	case rsInstall:
		err = pgreshard.Install(ctx, conn, ks)
	case rsUninstall:
		err = pgreshard.Uninstall(ctx, conn, ks)
	case rsFenceIn:
		err = pgreshard.FenceIn(ctx, conn, req.Reshard, req.Chunks)
	case rsFenceOut:
		fctx, cancel := context.WithTimeout(ctx, max(time.Duration(req.TimeoutMs)*time.Millisecond, time.Second))
		err = pgreshard.FenceOut(fctx, conn, req.Reshard, req.Chunks)
		cancel()
		if err != nil {
			err = fmt.Errorf("%w%s", err, a.lockHolders(ctx, p, ks))
		}
	case rsUnfence:
		err = pgreshard.Unfence(ctx, conn, req.Reshard, req.Side)
	case rsArrived:
		ans.Arrived, err = pgreshard.Arrived(ctx, conn, req.Reshard, req.Chunks)
	case rsStats:
		var st reshard.Stats
		st, err = pgreshard.Stats(ctx, conn, ks, req.Root)
		if err == nil && st.Rows < 0 {
			if _, err = conn.Exec(ctx, "ANALYZE "+quoteIdent(req.Root)); err == nil {
				st, err = pgreshard.Stats(ctx, conn, ks, req.Root)
			}
		}
		ans.Stats = toStatsWire(st)
	case rsClean:
		ans.Cleaned, err = pgreshard.Clean(ctx, conn, req.Chunks[0], ks, req.Limit)
	case rsPull:
		var pulled pgreshard.Pulled
		pulled, err = a.pullHere(ctx, conn, req)
		ans.Pulled = &pulled
	}
	return ans, err
}

// pullHere pulls req.Chunks[0] into dst from its source partition: over
// this agent's socket when it runs the source's tenant, else from the
// source's agent (copyout).
func (a *Agent) pullHere(ctx context.Context, dst *pgx.Conn, req *reshardOpRequest) (pgreshard.Pulled, error) {
	c := req.Chunks[0]
	src, err := a.resolveSource(req.Source)
	if err != nil {
		return pgreshard.Pulled{}, err
	}
	src.Partition, _ = req.Keyspace.Partition(c.From)
	return pgreshard.Load(ctx, dst, req.Reshard, c, &req.Keyspace, a.chunkSource(&src, req))
}

// resolveSource finds the agent s names among this agent and its peers:
// by URL first, then by name. Another agent is refused: a tenant's rows
// are read from configured peers only.
func (a *Agent) resolveSource(s *reshardSource) (member, error) {
	u, err := parsePeerURL(s.URL)
	switch {
	case err == nil && u == a.url:
		return member{agent: a.cfg.Name}, nil
	case err == nil:
		if name, ok := a.peerName(u); ok {
			return member{agent: name, url: u}, nil
		}
	}
	if pu, ok := a.cfg.Peers[s.Agent]; ok {
		if u, err := parsePeerURL(pu); err == nil {
			return member{agent: s.Agent, url: u}, nil
		}
	}
	if s.Agent == a.cfg.Name {
		return member{agent: a.cfg.Name}, nil
	}
	return member{}, errf(http.StatusBadRequest, "agent %s cannot reach agent %s (%s): it is not one of its peers", a.cfg.Name, s.Agent, s.URL)
}

// reach checks that this agent can read chunks from s's agent.
func (a *Agent) reach(ctx context.Context, s *reshardSource) error {
	m, err := a.resolveSource(s)
	if err != nil || m.url == "" {
		return err
	}
	c, err := a.reshardPeer(m.url)
	if err == nil {
		_, err = c.Info(ctx)
	}
	if err != nil {
		return errf(http.StatusBadGateway, "agent %s cannot reach agent %s at %s: %v", a.cfg.Name, m.agent, m.url, err)
	}
	return nil
}

// chunkSource opens the stream of req's chunk from its source partition,
// m: here, or on m's agent; a tenant that has migrated away (410) is
// followed (relocate).
func (a *Agent) chunkSource(m *member, req *reshardOpRequest) pgreshard.Source {
	return func(ctx context.Context) (io.ReadCloser, error) {
		rc, err := a.openChunk(ctx, *m, req)
		if statusOf(err) == http.StatusGone && a.relocate(ctx, m) {
			rc, err = a.openChunk(ctx, *m, req)
		}
		return rc, err
	}
}

func (a *Agent) openChunk(ctx context.Context, m member, req *reshardOpRequest) (io.ReadCloser, error) {
	c := req.Chunks[0]
	if m.url == "" {
		conn, _, err := a.partitionConn(ctx, m.Partition, false)
		if err != nil {
			return nil, err
		}
		rc, err := pgreshard.ConnSource(conn, c, &req.Keyspace)(ctx)
		if err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return &connCloser{ReadCloser: rc, conn: conn}, nil
	}
	pc, err := a.reshardPeer(m.url)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "%s: %v", m, err)
	}
	out := *req
	out.Partition, out.Source = c.From, nil
	rc, err := pc.PostStream(ctx, "/v1/internal/reshard/copyout", out)
	if code := client.StatusOf(err); code != 0 {
		return nil, errf(code, "%s: %v", m, err)
	} else if err != nil {
		return nil, errf(http.StatusBadGateway, "%s: agent %s is unreachable: %v", m, m.agent, err)
	}
	return rc, nil
}

// connCloser closes a stream, then the connection it reads.
type connCloser struct {
	io.ReadCloser
	conn *pgx.Conn
}

func (c *connCloser) Close() error {
	err := c.ReadCloser.Close()
	c.conn.Close(context.Background())
	return err
}

// lockHolders names the sessions holding locks on partition p's keyspace
// tables (what an outgoing fence waited for), for its error.
func (a *Agent) lockHolders(ctx context.Context, p keyspace.Partition, ks *keyspace.Keyspace) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	conn, _, err := a.partitionConn(ctx, p, false)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT DISTINCT a.pid, coalesce(a.backend_type, ''), coalesce(a.state, ''), l.mode, left(coalesce(a.query, ''), 60)
FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.granted AND l.relation IN (SELECT oid FROM pg_class WHERE relname = ANY($1)) AND a.pid <> pg_backend_pid()`, tableNames(ks))
	if err != nil {
		return ""
	}
	var out []string
	for rows.Next() {
		var pid int
		var typ, state, mode, q string
		if rows.Scan(&pid, &typ, &state, &mode, &q) == nil {
			out = append(out, fmt.Sprintf("pid %d (%s, %s, %s: %q)", pid, typ, state, mode, q))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; locks held by " + strings.Join(out, ", ")
}

func tableNames(ks *keyspace.Keyspace) []string {
	var out []string
	for _, t := range ks.Tables {
		out = append(out, t.Name)
	}
	return out
}

// onReshard runs op on partition m of ks, here or on its agent, and
// returns the answer. Errors name the partition; a peer's refusal keeps
// its status, a peer that cannot be reached is 502. A tenant that has
// migrated away (410) is followed (relocate) and m updated: callers keep
// m for their next ops.
func (a *Agent) onReshard(ctx context.Context, m *member, ks *keyspace.Keyspace, op reshardOp, req reshardOpRequest) (reshardAnswer, error) {
	v, err := a.onReshardOnce(ctx, *m, ks, op, req)
	if statusOf(err) != http.StatusGone || !a.relocate(ctx, m) {
		return v, err
	}
	return a.onReshardOnce(ctx, *m, ks, op, req)
}

func (a *Agent) onReshardOnce(ctx context.Context, m member, ks *keyspace.Keyspace, op reshardOp, req reshardOpRequest) (reshardAnswer, error) {
	req.Keyspace, req.Partition = *ks, m.Name
	if m.url == "" {
		v, err := a.runReshardOp(ctx, op, &req)
		if err != nil {
			return v, errf(statusOf(err), "%s: %v", m, err)
		}
		return v, nil
	}
	var v reshardAnswer
	c, err := a.reshardPeer(m.url)
	if err != nil {
		return v, errf(http.StatusBadRequest, "%s: %v", m, err)
	}
	err = c.Do(ctx, http.MethodPost, "/v1/internal/reshard/"+string(op), req, &v)
	if code := client.StatusOf(err); code != 0 {
		return v, errf(code, "%s: %v", m, err)
	} else if err != nil {
		return v, errf(http.StatusBadGateway, "%s: agent %s is unreachable: %v", m, m.agent, err)
	}
	return v, nil
}

// sourceOf is how an agent other than this one names member m's agent.
func (a *Agent) sourceOf(m member) *reshardSource {
	if m.url == "" {
		return &reshardSource{Agent: a.cfg.Name, URL: a.url}
	}
	return &reshardSource{Agent: m.agent, URL: m.url}
}

// checkReach refuses (400, before anything changes) a reconfiguration
// whose chunks a destination's agent could not read from their source's
// agent: each pair of agents is asked once (op reach).
func (a *Agent) checkReach(ctx context.Context, ks *keyspace.Keyspace, ms []member, chunks []reshard.Chunk) error {
	byName := map[string]member{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	asked := map[[2]string]bool{}
	for _, c := range chunks {
		from, to := byName[c.From], byName[c.To]
		pair := [2]string{from.url, to.url}
		if to.url == "" || from.url == to.url || asked[pair] {
			continue // this agent reads every peer's partitions (members resolved them)
		}
		asked[pair] = true
		_, err := a.onReshard(ctx, &to, ks, rsReach, reshardOpRequest{Source: a.sourceOf(from)})
		if err != nil {
			return errf(http.StatusBadRequest, "%s cannot be pulled into %s: %v", c, to, firstLine(err))
		}
	}
	return nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
