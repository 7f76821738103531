package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/transfer"
)

// Target-side internal endpoints. The source agent's driver calls them
// through RemoteTarget; the target agent serves them from its local
// migration.Target (target_api.go). Every body carries the migration Record
// as the source last persisted it; the snapshot stream carries it in the
// recordHeader header (base64 of its JSON) because its body is the stream.
const (
	targetPrefix = "/v1/internal/targets"
	recordHeader = "Sluice-Record"
)

// reserveRequest is the body of POST .../{mid}/reserve.
type reserveRequest struct {
	Record    migration.Record  `json:"record"`
	Source    string            `json:"source"`     // source agent name
	SourceURL string            `json:"source_url"` // source agent API
	TenantID  int64             `json:"tenant_id"`  // numeric tenant id
	Name      string            `json:"name"`       // tenant name
	Settings  map[string]string `json:"settings"`   // tenant's postgresql.conf settings on the source
}

type reserveResponse struct {
	Dir  string `json:"dir"`
	Port int    `json:"port"`
	Host string `json:"host"` // host clients use to reach the target's tenants
}

type recordRequest struct {
	Record migration.Record `json:"record"`
}

type standbyRequest struct {
	Record          migration.Record `json:"record"`
	PrimaryConnInfo string           `json:"primary_conninfo"`
	Slot            string           `json:"slot"`
	// PaceWAL: the target agent relays the standby's WAL stream itself, at
	// WALRate (encodeRate) until the source pushes another (pace-wal).
	PaceWAL bool    `json:"pace_wal,omitempty"`
	WALRate float64 `json:"wal_rate,omitempty"`
}

// paceWALRequest is the body of POST .../{mid}/pace-wal.
type paceWALRequest struct {
	Rate    float64 `json:"rate"`    // bytes/s, encodeRate's
	Unpaced bool    `json:"unpaced"` // full speed (HANDOVER)
}

type paceWALResponse struct {
	Relayed int64 `json:"relayed"` // bytes relayed to the standby so far, by this relay
	// Relay tells the target's relays apart: a restarted target agent's
	// new relay has another (and counts from 0).
	Relay int64 `json:"relay"`
}

// encodeRate writes a pace in bytes/s for JSON, which has no +Inf: an
// unlimited pace travels as -1.
func encodeRate(r float64) float64 {
	if math.IsInf(r, 1) {
		return -1
	}
	return r
}

// decodeRate reads encodeRate's pace: negative = unlimited.
func decodeRate(r float64) float64 {
	if r < 0 {
		return math.Inf(1)
	}
	return r
}

type replayRequest struct {
	Record migration.Record `json:"record"`
	LSN    migration.LSN    `json:"lsn"`
}

type replayResponse struct {
	LSN migration.LSN `json:"lsn"`
}

type prewarmRequest struct {
	Record migration.Record  `json:"record"`
	Blocks []migration.Block `json:"blocks"`
}

type positionResponse struct {
	Receive    migration.LSN `json:"receive"`
	Replay     migration.LSN `json:"replay"`
	InRecovery bool          `json:"in_recovery"`
}

type targetInfoResponse struct {
	Major     int    `json:"major"`
	FreeBytes int64  `json:"free_bytes"`
	Taken     string `json:"taken,omitempty"` // migration.TargetInfo.Taken
}

// RemoteTarget is a migration.Target on another agent, reached over its HTTP
// API. It is built by the source agent for one migration; safe for
// concurrent use.
type RemoteTarget struct {
	c        *client.Client
	source   string // this (source) agent's name
	srcURL   string
	tenantID int64
	name     string
	settings map[string]string

	mu   sync.Mutex
	host string // target's tenant host, learned from Reserve or Info

	stall time.Duration // snapshotStall when 0 (tests shorten it)

	// walRate, when set, makes the target agent relay the standby's WAL
	// stream (client.WALRelayTarget) for migration walMID, paced at walRate()
	// bytes/s as paceWAL pushes it.
	walRate func() float64
	walMID  string
	// walSource is the source's primary conninfo (migration.Source's
	// PrimaryConnInfo): with walRate set, the snapshot's request asks the
	// target to stream the WAL during the copy (pg.LocalTarget.StreamWAL).
	walSource  string
	walUnpaced atomic.Bool  // UnpaceWAL(true) in force
	walStarted atomic.Bool  // the target runs the relay (from the copy, for the early WAL, or the standby's start): pushes have one to reach
	walRelayed atomic.Int64 // the target relays' count, as last answered (walBase + the current relay's)
	walMu      sync.Mutex   // orders the updates of walRelayed, walBase and walRelay
	walBase    int64        // what the relays before the current one passed (target agent restarts)
	walRelay   int64        // paceWALResponse.Relay of the current relay
}

// walPushEvery is how often the source agent pushes the migration's rate to
// a target that relays its WAL (a control loop's step is 1 s or more).
const walPushEvery = 250 * time.Millisecond

var _ migration.Target = (*RemoteTarget)(nil)

// WALRelayed implements migration.WALRelayer: the bytes the target's relay
// had passed to the standby at its last answer; migration.ErrUnsupported
// when the target agent relays no WAL (walRate unset: the source's does).
func (t *RemoteTarget) WALRelayed() (int64, error) {
	if t.walRate == nil {
		return 0, migration.ErrUnsupported
	}
	return t.walRelayed.Load(), nil
}

// UnpaceWAL implements migration.WALRelayer: the target's relay runs at
// full speed (on) or at the pushed rate again (off), from this call's
// answer on (HANDOVER's hold: one round trip); a failed push is retried by
// the next. migration.ErrUnsupported when the target agent relays no WAL.
func (t *RemoteTarget) UnpaceWAL(on bool) error {
	if t.walRate == nil {
		return migration.ErrUnsupported
	}
	t.walUnpaced.Store(on)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t.pushWAL(ctx)
	return nil
}

// walPace is the pace to push, encodeRate's.
func (t *RemoteTarget) walPace() float64 {
	if t.walUnpaced.Load() {
		return encodeRate(math.Inf(1))
	}
	return encodeRate(t.walRate())
}

// pushWAL sends the current pace to the target's relay; an error (no relay
// yet: the standby has not started) is ignored — the next push retries.
func (t *RemoteTarget) pushWAL(ctx context.Context) {
	if t.walRate == nil || !t.walStarted.Load() {
		return
	}
	var v paceWALResponse
	err := t.c.Do(ctx, http.MethodPost, targetPrefix+"/"+url.PathEscape(t.walMID)+"/pace-wal", paceWALRequest{Rate: t.walPace(), Unpaced: t.walUnpaced.Load()}, &v)
	if err == nil {
		t.walMu.Lock()
		if v.Relay != t.walRelay {
			// A restarted target agent's new relay counts from 0.
			t.walBase, t.walRelay = t.walRelayed.Load(), v.Relay
		}
		if n := t.walBase + v.Relayed; n > t.walRelayed.Load() { // answers may cross
			t.walRelayed.Store(n)
		}
		t.walMu.Unlock()
	}
}

// paceWAL pushes the pace every period until ctx ends.
func (t *RemoteTarget) paceWAL(ctx context.Context, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.pushWAL(ctx)
		}
	}
}

func (t *RemoteTarget) path(m migration.Record, op string) string {
	return targetPrefix + "/" + url.PathEscape(m.ID) + "/" + op
}

// Info implements migration.Target.
func (t *RemoteTarget) Info(ctx context.Context, tenant string) (migration.TargetInfo, error) {
	var v targetInfoResponse
	if err := t.c.Do(ctx, http.MethodGet, targetPrefix+"/info?tenant="+url.QueryEscape(tenant), nil, &v); err != nil {
		return migration.TargetInfo{}, fmt.Errorf("remote target: info: %w", err)
	}
	return migration.TargetInfo{Major: v.Major, FreeBytes: v.FreeBytes, Taken: v.Taken}, nil
}

// Reserve implements migration.Target.
func (t *RemoteTarget) Reserve(ctx context.Context, m migration.Record) (string, int, error) {
	var v reserveResponse
	req := reserveRequest{Record: m, Source: t.source, SourceURL: t.srcURL, TenantID: t.tenantID, Name: t.name, Settings: t.settings}
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "reserve"), req, &v); err != nil {
		return "", 0, fmt.Errorf("remote target: reserve: %w", err)
	}
	t.mu.Lock()
	t.host = v.Host
	t.mu.Unlock()
	return v.Dir, v.Port, nil
}

// OpenSnapshot implements migration.Target: the stream is the body of one
// chunked POST; Close ends it and returns the target's verdict.
func (t *RemoteTarget) OpenSnapshot(ctx context.Context, m migration.Record) (io.WriteCloser, error) {
	rec, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("remote target: open snapshot: %w", err)
	}
	path := t.path(m, "snapshot")
	if t.walRate != nil && t.walSource != "" && m.Mode == migration.Live {
		path += "?wal_source=" + url.QueryEscape(t.walSource)
		t.walStarted.Store(true) // the target's relay starts with the copy
	}
	pr, pw := io.Pipe()
	sctx, cancel := context.WithCancelCause(ctx)
	stall := t.stall
	if stall <= 0 {
		stall = snapshotStall
	}
	w := &streamWriter{pw: pw, done: make(chan error, 1), stall: stall}
	w.dog = time.AfterFunc(time.Hour, func() { cancel(errStalled) })
	w.dog.Stop() // armed by each Write
	go func() {
		defer cancel(nil)
		err := t.c.StreamWithHeader(sctx, path, recordHeader, base64.StdEncoding.EncodeToString(rec), frameReader{pr}, nil)
		if err != nil {
			if c := context.Cause(sctx); errors.Is(c, errStalled) {
				err = c
			}
			err = fmt.Errorf("remote target: snapshot: %w", err)
		}
		pr.CloseWithError(err) // unblocks a writer if the request died early
		w.done <- err
	}()
	return w, nil
}

// snapshotStall is how long one write of the snapshot stream (a frame,
// 256 KiB) may wait for the connection before the stream is given up:
// the copy's pacing waits before a write, not in it, so a write blocked
// this long means the link or the target has stopped taking bytes (a cut
// link is otherwise noticed only at TCP's retransmission limit, ~15 min).
// The failed stream rolls the migration back, the source serving on.
const snapshotStall = time.Minute

// errStalled is the cause of a snapshot stream given up (snapshotStall).
var errStalled = errors.New("the stream stalled: no write went through for the stall limit (link down, or the target stopped reading)")

// frameReader is a snapshot request's body: the pipe's read end, passed on a
// frame at a time. net/http copies a request body through a 32 KiB buffer and
// flushes each chunk of a chunked body to the socket, so a 256 KiB frame of
// package transfer went out as 8 writes, each a hand-off between two
// goroutines; io.Copy prefers WriteTo, which copies with a buffer that holds
// a whole frame (one hand-off and one chunk per frame).
type frameReader struct{ r *io.PipeReader }

func (f frameReader) Read(p []byte) (int, error) { return f.r.Read(p) }

// WriteTo implements io.WriterTo.
func (f frameReader) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, transfer.DefaultChunkSize+64<<10) // a frame and its header
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{f.r}, buf)
}

// streamWriter feeds a pipe into a streaming request, which its watchdog
// cancels (cause errStalled) when one write blocks longer than stall. One
// timer per stream, re-armed by each write: nothing is allocated per chunk.
type streamWriter struct {
	pw    *io.PipeWriter
	done  chan error
	stall time.Duration
	dog   *time.Timer
	once  sync.Once
	err   error
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.dog.Reset(w.stall)
	defer w.dog.Stop()
	return w.pw.Write(p)
}

func (w *streamWriter) Close() error {
	w.once.Do(func() {
		w.pw.Close()
		w.err = <-w.done
	})
	return w.err
}

// StartStandby implements migration.Target.
func (t *RemoteTarget) StartStandby(ctx context.Context, m migration.Record, primaryConnInfo, slot string) error {
	req := standbyRequest{Record: m, PrimaryConnInfo: primaryConnInfo, Slot: slot}
	if t.walRate != nil && primaryConnInfo != "" {
		req.PaceWAL, req.WALRate = true, t.walPace()
	}
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "start-standby"), req, nil); err != nil {
		return fmt.Errorf("remote target: start standby: %w", err)
	}
	if req.PaceWAL {
		t.walStarted.Store(true)
	}
	return nil
}

// Position implements migration.Target.
func (t *RemoteTarget) Position(ctx context.Context, m migration.Record) (migration.Position, error) {
	var v positionResponse
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "position"), recordRequest{Record: m}, &v); err != nil {
		return migration.Position{}, fmt.Errorf("remote target: position: %w", unreachable(ctx, err))
	}
	return migration.Position{Receive: v.Receive, Replay: v.Replay, InRecovery: v.InRecovery}, nil
}

// unreachable marks err with migration.ErrUnreachable when the target's
// agent gave no answer at all (refused, reset or timed-out connection: it
// is down or restarting) or answered 503 (its standby is down or
// restarting) while ctx is still alive; another answer with an HTTP status,
// or a canceled ctx, is returned as is.
func unreachable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if client.StatusOf(err) == http.StatusServiceUnavailable {
		// The agent answered that its standby is down or restarting.
		return fmt.Errorf("%w: %w", migration.ErrUnreachable, err)
	}
	if client.StatusOf(err) != 0 {
		return err
	}
	var ne net.Error // a dial's or read's *net.OpError, a timeout, a bare syscall.Errno
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", migration.ErrUnreachable, err)
	}
	return err
}

// WaitReplay implements migration.Target.
func (t *RemoteTarget) WaitReplay(ctx context.Context, m migration.Record, lsn migration.LSN) (migration.LSN, error) {
	var v replayResponse
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "wait-replay"), replayRequest{Record: m, LSN: lsn}, &v); err != nil {
		return 0, fmt.Errorf("remote target: wait replay: %w", err)
	}
	return v.LSN, nil
}

// Prewarm implements migration.Target.
func (t *RemoteTarget) Prewarm(ctx context.Context, m migration.Record, blocks []migration.Block) error {
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "prewarm"), prewarmRequest{Record: m, Blocks: blocks}, nil); err != nil {
		return fmt.Errorf("remote target: prewarm: %w", err)
	}
	return nil
}

// PreparePromotion implements migration.Target.
func (t *RemoteTarget) PreparePromotion(ctx context.Context, m migration.Record) error {
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "prepare-promotion"), recordRequest{Record: m}, nil); err != nil {
		return fmt.Errorf("remote target: prepare promotion: %w", err)
	}
	return nil
}

// Promote implements migration.Target.
func (t *RemoteTarget) Promote(ctx context.Context, m migration.Record) error {
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "promote"), recordRequest{Record: m}, nil); err != nil {
		return fmt.Errorf("remote target: promote: %w", err)
	}
	return nil
}

// Addr implements migration.Target: the target agent's tenant host and the
// reserved port.
func (t *RemoteTarget) Addr(m migration.Record) string {
	t.mu.Lock()
	host := t.host
	t.mu.Unlock()
	if host == "" {
		// Not learned yet in this process (resumed after a restart): ask.
		var v reserveResponse
		if err := t.c.Do(context.Background(), http.MethodPost, t.path(m, "addr"), recordRequest{Record: m}, &v); err == nil {
			host = v.Host
			t.mu.Lock()
			t.host = host
			t.mu.Unlock()
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(m.TargetPort))
}

// Abort implements migration.Target. A target that never reserved the
// migration (it refused the reserve: the tenant's id is taken there) has
// nothing to discard: its 404 is a done abort, or the rollback would retry
// it forever.
func (t *RemoteTarget) Abort(ctx context.Context, m migration.Record) error {
	err := t.c.Do(ctx, http.MethodPost, t.path(m, "abort"), recordRequest{Record: m}, nil)
	if err != nil && client.StatusOf(err) != http.StatusNotFound {
		return fmt.Errorf("remote target: abort: %w", err)
	}
	return nil
}

// Commit implements migration.Target.
func (t *RemoteTarget) Commit(ctx context.Context, m migration.Record) error {
	if err := t.c.Do(ctx, http.MethodPost, t.path(m, "commit"), recordRequest{Record: m}, nil); err != nil {
		return fmt.Errorf("remote target: commit: %w", err)
	}
	return nil
}
