package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/router/analyze"
)

// Keyspace is what a session routes by: a validated keyspace and the
// analysis cache of its statements. Swapped whole when the plan changes.
type Keyspace struct {
	KS    *keyspace.Keyspace
	Cache *analyze.Cache
	// Moving is the reconfiguration that brought KS's plan in, while its
	// data still moves (nil: none).
	Moving Mover
}

// Mover is a live reconfiguration as a router sees it (package reshard):
// a key may not have reached its owner under the new plan yet. A
// statement waits for the keys it names — only it, not the partition —
// while they are pulled.
type Mover interface {
	// Await returns once every key of root table root in [lo, hi) is at
	// its owner, pulling what is not (a reactive pull).
	Await(ctx context.Context, root string, lo, hi keyspace.Bound) error
}

// Config is one client session's setting.
type Config struct {
	User   string
	Params map[string]string // the client's startup parameters (user and database excluded)
	// Keyspace returns the keyspace's current version; a transaction uses
	// the version current at its start.
	Keyspace func() *Keyspace
	// Admit, when set, is called before a transaction's first statement is
	// routed: it may wait (the keyspace is held while its plan switches)
	// and returns the version the transaction routes by; release is
	// called once when the transaction ends.
	Admit    func(ctx context.Context) (k *Keyspace, release func(), err error)
	Backends Backends
	// Coordinator commits transactions that wrote on several partitions.
	Coordinator *Coordinator
	Logf        func(format string, args ...any)
}

// Session routes one client connection's transactions to partitions. It
// is driven by Serve in one goroutine.
type Session struct {
	cfg Config
	cr  *bufio.Reader
	cw  *bufio.Writer

	backends map[string]*backend // by partition name
	home     string              // partition for statements that name no key
	stmts    map[string]*stmt    // the client's prepared statements
	portals  map[string]*backend // open portals: where they were bound
	cursors  map[string]cursor   // SQL cursors (DECLARE): where each was declared
	session  []string            // SET statements to replay on new server sessions

	ks     *Keyspace // the keyspace version of the current transaction
	params [][]byte  // the current Query's literals, when its statements are its shape's (analyze.Cache.Query)
	tx     txState
	batch  []msg // extended-protocol messages since the last Sync

	busy busySet // server sessions running the client's messages: Busy
}

// txState is the client's transaction as the router sees it.
type txState struct {
	block    bool   // the client said BEGIN
	failed   bool   // an error in the block: everything but ROLLBACK refused
	beginSQL string // the client's BEGIN, replayed on each partition the block reaches
	hint     string // SET sluice.key: the block's (or next transaction's) key
	parts    []*backend
	start    time.Time
	queued   time.Duration
	awaited  time.Duration // waiting for moving keys' pulls (Mover)
	release  func()        // Config.Admit's, once the transaction is admitted
}

// cursor is a SQL cursor the client declared: it lives on one partition's
// server session, where FETCH, MOVE and CLOSE of it must go.
type cursor struct {
	part string
	hold bool // WITH HOLD: it outlives its transaction
}

// stmt is one of the client's prepared statements.
type stmt struct {
	name  string
	parse msg // the client's Parse message
	an    *analyze.Statement
	err   error // analysis failed: the statement routes by hint only
	oids  []uint32
	// rowDesc is the RowDescription a Describe of it returned, for a
	// scatter's merge in key order when the Bind's batch has none.
	rowDesc []byte
}

// New returns a session for a client whose startup and authentication are
// done; the caller has sent nothing after AuthenticationOk yet.
func New(cfg Config, cr *bufio.Reader, cw *bufio.Writer) *Session {
	return &Session{cfg: cfg, cr: cr, cw: cw, backends: map[string]*backend{},
		stmts: map[string]*stmt{}, portals: map[string]*backend{}, cursors: map[string]cursor{}}
}

// Start opens the session's first server session (on the keyspace's first
// partition) for the parameters the client must be told at startup.
func (s *Session) Start(ctx context.Context) (params map[string]string, err error) {
	s.ks = s.cfg.Keyspace()
	s.home = s.ks.KS.Partitions[0].Name
	b, err := s.backend(ctx, s.home)
	if err != nil {
		return nil, err
	}
	s.cfg.Backends.Leave(b.part, 0)
	b.entered = false
	return b.srv.Params, nil
}

// Busy returns the server sessions running the client's messages now (a
// statement, a pipeline, one partition's part of a scatter): where a
// client's CancelRequest is to be sent. Hidden work of the router's own
// (COMMIT, two-phase commit, replayed SETs) is not listed. Unlike the
// other methods it may be called from any goroutine; the answer may be
// stale by the time it is used, as a CancelRequest always races the
// statement it means (a server ignores one that arrives while it is idle).
func (s *Session) Busy() []*Server { return s.busy.list() }

// Close ends every server session.
func (s *Session) Close() {
	for _, b := range s.backends {
		if b.entered {
			s.cfg.Backends.Leave(b.part, 0)
		}
		b.srv.Close()
	}
	s.backends = map[string]*backend{}
}

// Serve reads the client's messages until Terminate or an error.
func (s *Session) Serve(ctx context.Context) error {
	for {
		m, err := readMsg(s.cr)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			var pe *pgError
			if errors.As(err, &pe) {
				s.fatal(pe)
			}
			return err
		}
		if err := s.handle(ctx, m); err != nil {
			var pe *pgError
			if errors.As(err, &pe) && pe.Severity == "FATAL" {
				s.fatal(pe)
			}
			return err
		}
		if s.cr.Buffered() == 0 {
			if err := s.cw.Flush(); err != nil {
				return err
			}
		}
	}
}

func (s *Session) fatal(pe *pgError) {
	pe.Severity = "FATAL"
	writeMsg(s.cw, 'E', pe.body())
	s.cw.Flush()
}

// handle acts on one client message.
func (s *Session) handle(ctx context.Context, m msg) error {
	switch m.typ {
	case 'Q':
		sql, _, err := cstr(m.body)
		if err != nil {
			return fatalf("malformed Query message")
		}
		if err := s.query(ctx, sql); err != nil {
			return err
		}
		return s.ready()
	case 'P', 'B', 'D', 'E', 'C':
		s.batch = append(s.batch, m)
		return nil
	case 'H':
		return s.runBatch(ctx, false)
	case 'S':
		if err := s.runBatch(ctx, true); err != nil {
			return err
		}
		return s.ready()
	case 'X':
		return io.EOF
	case 'F':
		return s.clientError(errorf(codeFeatureNotSupported, "function calls (fastpath) are not supported through the keyspace router"), true)
	case 'd', 'c', 'f':
		return nil // COPY data outside COPY: PostgreSQL ignores it too
	}
	return fatalf("invalid frontend message type %q", m.typ)
}

func fatalf(format string, args ...any) *pgError {
	e := errorf(codeProtocolViolation, format, args...)
	e.Severity = "FATAL"
	return e
}

// ready sends ReadyForQuery with the client's transaction status.
func (s *Session) ready() error {
	st := byte('I')
	if s.tx.block {
		st = 'T'
		if s.tx.failed {
			st = 'E'
		}
	}
	return writeMsg(s.cw, 'Z', []byte{st})
}

// clientError sends e; in a block it fails the block. query says whether
// the error answers a simple Query (else the rest of the batch is skipped
// by the caller).
func (s *Session) clientError(e *pgError, query bool) error {
	if s.tx.block {
		s.tx.failed = true
	}
	if err := writeMsg(s.cw, 'E', e.body()); err != nil {
		return err
	}
	if query && !s.tx.block {
		return nil
	}
	return nil
}

// backend returns the open server session for partition name, entering
// the partition's gate (waiting out a hold) if this transaction has not,
// and opening or reopening the session when there is none, it broke, or
// the partition's tenant moved.
func (s *Session) backend(ctx context.Context, name string) (*backend, error) {
	part, ok := s.ks.KS.Partition(name)
	if !ok {
		return nil, errorf(codeFeatureNotSupported, "keyspace %s has no partition %s", s.ks.KS.Name, name)
	}
	b := s.backends[name]
	if b != nil && b.entered && !b.broken {
		return b, nil
	}
	t0 := time.Now()
	gen, err := s.cfg.Backends.Enter(ctx, part)
	if err != nil {
		return nil, err
	}
	s.tx.queued += time.Since(t0)
	if b != nil && (b.broken || b.srv.Gen != gen) {
		b.srv.Close()
		delete(s.backends, name)
		s.dropPortals(b)
		b = nil
	}
	if b == nil {
		srv, err := s.cfg.Backends.Dial(ctx, part, s.cfg.User, s.cfg.Params)
		if err != nil {
			s.cfg.Backends.Leave(part, 0)
			return nil, errorf(codeConnectionFailure, "partition %s (tenant %s): %v", name, part.Tenant, err)
		}
		srv.Gen = gen
		b = &backend{part: part, srv: srv, stmts: map[string]*stmt{}, busy: &s.busy}
		for _, sql := range s.session {
			if pe, err := b.simple(sql); err != nil || pe != nil {
				srv.Close()
				s.cfg.Backends.Leave(part, 0)
				if err == nil {
					err = pe
				}
				return nil, errorf(codeConnectionFailure, "partition %s: replaying %q: %v", name, sql, err)
			}
		}
		s.backends[name] = b
	}
	b.entered = true
	return b, nil
}

// dropPortals forgets the portals and cursors of b, whose server session is closed.
func (s *Session) dropPortals(b *backend) {
	for k, pb := range s.portals {
		if pb == b {
			delete(s.portals, k)
		}
	}
	for k, c := range s.cursors {
		if c.part == b.part.Name {
			delete(s.cursors, k)
		}
	}
}

// join makes b a participant of the current transaction block, sending the
// block's BEGIN first (as a hidden part of x).
//
// When the block reaches its second partition, every participant gets
// spanLockTimeout: REQUIRES that x holds nothing yet but what join adds,
// and that the exchanges of participants joined earlier in this statement
// hold nothing else either (callers join all, then add the statement).
func (s *Session) join(b *backend, x *exchange) {
	if !s.tx.block || b.begun {
		return
	}
	x.add('Q', msg{typ: 'Q', body: append([]byte(s.tx.beginSQL), 0)}, true)
	b.begun, b.pending = true, x
	s.tx.parts = append(s.tx.parts, b)
	if len(s.tx.parts) < 2 {
		return
	}
	for _, p := range s.tx.parts {
		if p.lockTimeout {
			continue
		}
		p.lockTimeout = true
		if p.pending != nil {
			p.pending.add('Q', msg{typ: 'Q', body: []byte(setSpanLockTimeout)}, true)
		} else if _, err := p.simple(setSpanLockTimeout[:len(setSpanLockTimeout)-1]); err != nil {
			s.logf("router: partition %s: %v", p.part.Name, err)
		}
	}
}

// spanLockTimeout bounds every lock wait of a transaction that reaches
// more than one partition: each server sees only its part of a deadlock
// between two such transactions (no server detects the cycle), so one of
// them would wait for ever; with the timeout it fails with 55P03 and its
// client rolls back. A transaction on one partition keeps PostgreSQL's own
// deadlock detection and no timeout.
const spanLockTimeout = "2s"

var setSpanLockTimeout = "SET LOCAL lock_timeout = '" + spanLockTimeout + "'\x00"

// startTx marks the start of a transaction (a BEGIN, or a statement outside a block).
func (s *Session) startTx() {
	if s.tx.start.IsZero() {
		s.tx.start = time.Now()
		s.ks = s.cfg.Keyspace()
	}
}

// endTx closes the transaction's accounting: every entered partition is
// left, the latency recorded, the block's state cleared.
func (s *Session) endTx() {
	d := time.Since(s.tx.start)
	// A partition's server is charged the transaction's time but its waits
	// for moving keys: those are the missing data's, not the server's load
	// (the reconfiguration's control loop reads the servers' windows, and
	// pulling faster shortens them).
	served := d - s.tx.awaited
	var names []string
	for _, b := range s.backends {
		if b.entered {
			s.cfg.Backends.Leave(b.part, served)
			b.entered = false
			names = append(names, b.part.Name)
		}
		b.begun, b.wrote, b.lockTimeout, b.pending = false, false, false, nil
		if b.broken {
			b.srv.Close()
			delete(s.backends, b.part.Name)
			s.dropPortals(b)
		}
	}
	for k, c := range s.cursors {
		if !c.hold {
			delete(s.cursors, k)
		}
	}
	if len(names) > 0 && !s.tx.start.IsZero() {
		slices.Sort(names)
		s.cfg.Backends.Observe(s.ks.KS.Name, names, d, s.tx.queued+s.tx.awaited)
	}
	clear(s.portals)
	if s.tx.release != nil {
		s.tx.release()
	}
	s.tx = txState{}
}

// admit lets the transaction route (Config.Admit) before its first
// statement does, and takes the keyspace version it routes by.
func (s *Session) admit(ctx context.Context) error {
	if s.tx.release != nil || s.cfg.Admit == nil {
		return nil
	}
	k, release, err := s.cfg.Admit(ctx)
	if err != nil {
		return errorf(codeCannotConnect, "%v", err)
	}
	s.ks, s.tx.release = k, release
	return nil
}

// await waits until the keys of root in [lo, hi) have reached their owner
// when a reconfiguration moves them.
func (s *Session) await(ctx context.Context, root string, lo, hi keyspace.Bound) error {
	if s.ks.Moving == nil {
		return nil
	}
	t0 := time.Now()
	err := s.ks.Moving.Await(ctx, root, lo, hi)
	s.tx.awaited += time.Since(t0)
	if err != nil {
		return errorf(codeCannotConnect, "keyspace %s: %v", s.ks.KS.Name, err)
	}
	return nil
}

// owners maps an analysed statement with its parameters to the partitions
// it must run on, in key order (every element of a key = ANY(array)
// counts as a key). A statement that names no key of a
// sharded table uses the hint; one that names no sharded table runs on
// the transaction's first partition (or the home partition).
func (s *Session) owners(ctx context.Context, an *analyze.Statement, hint string, params [][]byte, formats []int16, oids []uint32) ([]string, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	ks := s.ks.KS
	if hint == "" {
		hint = an.Hint
	}
	var out []string
	add := func(p string) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	switch {
	case an.Class == analyze.CursorUse:
		return s.cursorParts(an.Cursor), nil
	case len(an.Keys) > 0:
		for _, k := range an.Keys {
			t, _ := ks.Table(k.Table)
			keys, err := analyze.KeysOf(t.Type, k.Value, params, formats, oids)
			if err != nil {
				return nil, keyError(err)
			}
			for _, key := range keys {
				p, err := ks.Owner(k.Table, key)
				if err != nil {
					return nil, keyError(err)
				}
				if err := s.await(ctx, t.Root, keyspace.Bound{Key: key}, keyspace.Successor(key)); err != nil {
					return nil, err
				}
				add(p)
			}
		}
		if len(out) == 0 { // only empty arrays (key = ANY('{}')): no row matches
			add(s.homePart())
		}
	case hint != "" && len(an.Sharded) > 0:
		t, _ := ks.Table(an.Sharded[0])
		key, err := keyspace.ParseKey(t.Type, hint)
		if err != nil {
			return nil, keyError(err)
		}
		p, err := ks.Owner(t.Name, key)
		if err != nil {
			return nil, keyError(err)
		}
		if err := s.await(ctx, t.Root, keyspace.Bound{Key: key}, keyspace.Successor(key)); err != nil {
			return nil, err
		}
		add(p)
	case an.Range != nil:
		ps, err := s.rangeOwners(ctx, an.Range, params, formats, oids)
		if err != nil {
			return nil, err
		}
		out = ps
	case an.Missing != "":
		return nil, errorf(codeFeatureNotSupported, "keyspace %s: the statement names no key of %s: add an equality on it, SET sluice.key, or a /* sluice.key=… */ comment", ks.Name, an.Missing)
	case len(an.Sharded) == 0 && len(an.Reference) > 0 && !an.ReadOnly:
		for _, p := range ks.Partitions { // a write to a reference table: every copy
			add(p.Name)
		}
	default:
		add(s.homePart())
	}
	return out, nil
}

// cursorParts is where FETCH, MOVE or CLOSE of cursor name runs: where it
// was declared; CLOSE ALL (name "") on every partition holding one. A
// cursor the router does not know goes to the home partition, whose
// server answers that it does not exist.
func (s *Session) cursorParts(name string) []string {
	if c, ok := s.cursors[name]; ok && name != "" {
		return []string{c.part}
	}
	var out []string
	if name == "" {
		for _, c := range s.cursors {
			if !slices.Contains(out, c.part) {
				out = append(out, c.part)
			}
		}
		slices.Sort(out)
	}
	if len(out) == 0 {
		out = []string{s.homePart()}
	}
	return out
}

// noteCursor keeps track of the cursors a statement about to run on parts
// declares or closes.
func (s *Session) noteCursor(an *analyze.Statement, parts []string) {
	switch {
	case an.Class == analyze.Plain && an.Cursor != "" && len(parts) == 1:
		s.cursors[an.Cursor] = cursor{part: parts[0], hold: an.CursorHold}
	case an.Class == analyze.CursorUse && an.CursorClose && an.Cursor == "":
		clear(s.cursors)
	case an.Class == analyze.CursorUse && an.CursorClose:
		delete(s.cursors, an.Cursor)
	}
}

// homePart is where a statement without keys runs: the transaction's first
// partition, else the session's home.
func (s *Session) homePart() string {
	if len(s.tx.parts) > 0 {
		return s.tx.parts[0].part.Name
	}
	return s.home
}

func (s *Session) rangeOwners(ctx context.Context, r *analyze.RangeRef, params [][]byte, formats []int16, oids []uint32) ([]string, error) {
	t, _ := s.ks.KS.Table(r.Table)
	var lo, hi keyspace.Bound
	lo.Inf, hi.Inf = r.Lo == nil, r.Hi == nil
	if r.Lo != nil {
		k, err := analyze.KeyOf(t.Type, *r.Lo, params, formats, oids)
		if err != nil {
			return nil, keyError(err)
		}
		lo.Key = k
	}
	if r.Hi != nil {
		k, err := analyze.KeyOf(t.Type, *r.Hi, params, formats, oids)
		if err != nil {
			return nil, keyError(err)
		}
		if r.HiIncl { // [lo, hi] ⊂ [lo, hi+1) for integers; text: the owners of hi itself are added below
			if k.Type == keyspace.Int && k.I < 1<<63-1 {
				k.I++
			} else {
				hi.Inf = true
			}
		}
		hi.Key = k
	}
	if err := s.await(ctx, t.Root, lo, hi); err != nil {
		return nil, err
	}
	return s.ks.KS.Owners(r.Table, lo, hi)
}

// keyError maps a key's failure to the client's error.
func keyError(err error) *pgError {
	switch {
	case errors.Is(err, keyspace.ErrKeyType):
		return errorf(codeInvalidTextRepr, "%v", err)
	case errors.Is(err, keyspace.ErrNoOwner):
		return errorf(codeNoOwner, "%v", err)
	}
	return errorf(codeFeatureNotSupported, "%v", err)
}

// checkSpan refuses a write reaching a second writing partition when the
// keyspace commits nothing across partitions.
func (s *Session) checkSpan(parts []string, readOnly bool) error {
	if readOnly || !s.ks.KS.NoTwoPC {
		return nil
	}
	writers := map[string]bool{}
	for _, b := range s.tx.parts {
		if b.wrote {
			writers[b.part.Name] = true
		}
	}
	for _, p := range parts {
		writers[p] = true
	}
	if len(writers) > 1 {
		names := make([]string, 0, len(writers))
		for n := range writers {
			names = append(names, n)
		}
		slices.Sort(names)
		return errorf(codeFeatureNotSupported, "the transaction writes on partitions %v and keyspace %s has two-phase commit off", names, s.ks.KS.Name)
	}
	return nil
}

func (s *Session) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

var _ = fmt.Sprintf
