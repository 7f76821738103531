package router

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/sluicedb/sluice/router/analyze"
)

// The extended protocol. The client's Parse, Bind, Describe, Execute and
// Close messages are kept until Sync (or Flush) and then sent, as one
// pipeline, to the partition their Bind's key names. A prepared statement
// lives on every server session it was used on: the router parses it where
// a Bind needs it (a hidden Parse, its ParseComplete not passed on) and
// closes a stale version first, so a statement prepared once by the client
// runs on any partition. One pipeline goes to one partition, or — one Bind
// whose keys span partitions — to each of them as a scatter.

// bind is a decoded Bind message.
type bind struct {
	portal, stmt  string
	formats       []int16
	params        [][]byte
	resultFormats []int16
}

func decodeBind(body []byte) (bind, error) {
	var b bind
	var err error
	if b.portal, body, err = cstr(body); err != nil {
		return b, err
	}
	if b.stmt, body, err = cstr(body); err != nil {
		return b, err
	}
	if b.formats, body, err = int16s(body); err != nil {
		return b, err
	}
	if len(body) < 2 {
		return b, errMalformed
	}
	n := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	b.params = make([][]byte, n)
	for i := 0; i < n; i++ {
		if len(body) < 4 {
			return b, errMalformed
		}
		l := int32(binary.BigEndian.Uint32(body))
		body = body[4:]
		if l < 0 {
			continue
		}
		if int(l) > len(body) {
			return b, errMalformed
		}
		b.params[i], body = body[:l], body[l:]
	}
	b.resultFormats, _, err = int16s(body)
	return b, err
}

func int16s(body []byte) ([]int16, []byte, error) {
	if len(body) < 2 {
		return nil, nil, errMalformed
	}
	n := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	if len(body) < 2*n {
		return nil, nil, errMalformed
	}
	out := make([]int16, n)
	for i := range out {
		out[i] = int16(binary.BigEndian.Uint16(body[2*i:]))
	}
	return out, body[2*n:], nil
}

// decodeParse reads a Parse message.
func (s *Session) decodeParse(body []byte) (*stmt, error) {
	name, rest, err := cstr(body)
	if err != nil {
		return nil, err
	}
	query, rest, err := cstr(rest)
	if err != nil {
		return nil, err
	}
	if len(rest) < 2 {
		return nil, errMalformed
	}
	n := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) < 4*n {
		return nil, errMalformed
	}
	st := &stmt{name: name, parse: msg{typ: 'P', body: body}, oids: make([]uint32, n)}
	for i := range st.oids {
		st.oids[i] = binary.BigEndian.Uint32(rest[4*i:])
	}
	stmts, err := s.ks.Cache.Statements(query)
	switch {
	case err != nil:
		st.err = err
	case len(stmts) == 1:
		st.an = stmts[0]
	default:
		st.err = errorf("42601", "cannot insert multiple commands into a prepared statement")
	}
	return st, nil
}

// pipeline is a batch's plan: the statements it defines, where it runs.
type pipeline struct {
	parsed   map[string]*stmt // Parse in this batch, by name
	closed   []string         // statements the batch closes
	parts    []string         // partitions it runs on
	an       *analyze.Statement
	st       *stmt  // the statement bound
	desc     string // the statement described by name in the batch (its RowDescription is kept)
	results  []int16
	readOnly bool
}

// runBatch sends the batch kept since the last Sync; sync says whether it
// ends with Sync (else Flush).
func (s *Session) runBatch(ctx context.Context, sync bool) error {
	batch := s.batch
	s.batch = nil
	if len(batch) == 0 { // a lone Sync or Flush: nothing to send
		if sync {
			return s.endIfIdle()
		}
		return nil
	}
	if n := s.controlPrefix(batch); n > 0 {
		if err := s.runControl(ctx, batch[:n]); err != nil {
			return err
		}
		if batch = batch[n:]; len(batch) == 0 {
			return nil
		}
	}
	if !s.tx.block {
		s.startTx()
	}
	if s.tx.failed {
		if len(batch) > 0 {
			return writeMsg(s.cw, 'E', errorf(codeInFailedTx, "current transaction is aborted, commands ignored until end of transaction block").body())
		}
		return nil
	}
	pl, at, err := s.plan(ctx, batch)
	if pe, ok := err.(*pgError); ok && pe.Severity == "FATAL" {
		return pe // a malformed message ends the session, as PostgreSQL does
	}
	if err != nil {
		return s.refuse(ctx, batch[:at], asPgError(err), sync)
	}
	return s.runPipeline(ctx, batch, pl, sync, nil)
}

// runPipeline sends batch, planned as pl, to its partitions and passes
// the answers on. With refusal set, batch is the prefix of a batch the
// router refuses (see refuse): it runs up to a hidden message that fails
// on the server, so the server skips to Sync as it would at an error of
// its own, and the client gets the prefix's answers, then refusal (or the
// server's own error, when the prefix failed there first).
func (s *Session) runPipeline(ctx context.Context, batch []msg, pl *pipeline, sync bool, refusal *pgError) error {
	implicit, bs, xs, err := s.reach(ctx, pl.parts, pl.readOnly)
	if err != nil {
		return s.abandon(err, implicit)
	}
	for i, b := range bs { // after every join: join may add to any of xs
		s.fillExchange(b, xs[i], batch, pl, sync, refusal != nil)
	}
	var res result
	rec := &descSink{inner: toClient{s.cw}}
	cut := &prefixSink{inner: rec.inner, n: len(batch)}
	if refusal != nil {
		rec.inner = cut
	}
	if len(bs) == 1 {
		res, err = bs[0].run(xs[0], rec)
	} else {
		var desc []byte
		if pl.st != nil {
			desc = pl.st.rowDesc
		}
		res, err = s.scatter(bs, xs, pl.an, desc, pl.results...)
	}
	if err != nil {
		return s.abandon(err, implicit)
	}
	for name, st := range pl.parsed {
		s.stmts[name] = st
	}
	if st := s.stmts[pl.desc]; st != nil && rec.desc != nil {
		st.rowDesc = rec.desc
	}
	for _, name := range pl.closed {
		delete(s.stmts, name)
	}
	if refusal != nil && !cut.passedErr {
		if err := writeMsg(s.cw, 'E', refusal.body()); err != nil {
			return err
		}
	}
	if res.err != nil {
		for _, b := range bs {
			clear(b.stmts) // what the server skipped after the error is unknown: parse again
		}
		if s.tx.block {
			s.tx.failed = true
		}
	}
	switch {
	case implicit && res.err != nil:
		s.rollback()
	case implicit:
		return s.commitQuiet(ctx)
	case sync && !s.tx.block:
		s.endTx()
	}
	return nil
}

// plan decodes a batch and finds the partitions it runs on. On an error,
// at is the index of the message refused (the batch's last Bind for a
// refusal of the whole), and the batch before it plans without error.
func (s *Session) plan(ctx context.Context, batch []msg) (pl *pipeline, at int, err error) {
	pl = &pipeline{parsed: map[string]*stmt{}, readOnly: true}
	lastBind := 0
	lookup := func(name string) (*stmt, error) {
		if st, ok := pl.parsed[name]; ok {
			return st, nil
		}
		if st, ok := s.stmts[name]; ok {
			return st, nil
		}
		return nil, errorf(codeUndefinedPStmt, "prepared statement %q does not exist", name)
	}
	for i, m := range batch {
		switch m.typ {
		case 'P':
			st, err := s.decodeParse(m.body)
			if err != nil {
				return nil, i, fatalf("malformed Parse message")
			}
			pl.parsed[st.name] = st
		case 'B':
			bd, err := decodeBind(m.body)
			if err != nil {
				return nil, i, fatalf("malformed Bind message")
			}
			st, err := lookup(bd.stmt)
			if err != nil {
				return nil, i, err
			}
			lastBind = i
			parts := []string{s.homePart()}
			if isControl(st.an) {
				return nil, i, errorf(codeFeatureNotSupported, "%s after other statements in one pipeline: the keyspace router takes transaction control and SET at the head of a pipeline, or alone", st.an.Text)
			}
			if st.an != nil {
				if st.an.Class == analyze.TwoPhase {
					return nil, i, errorf(codeFeatureNotSupported, "two-phase commit commands are not accepted through the keyspace router")
				}
				if parts, err = s.owners(ctx, st.an, s.tx.hint, bd.params, bd.formats, st.oids); err != nil {
					return nil, i, err
				}
				if err := s.checkStatement(st.an, parts); err != nil {
					return nil, i, err
				}
				s.noteCursor(st.an, parts)
				pl.readOnly = pl.readOnly && st.an.ReadOnly
			} else {
				pl.readOnly = false
			}
			if pl.parts != nil && !slices.Equal(pl.parts, parts) {
				return nil, i, errorf(codeFeatureNotSupported, "one pipeline (up to Sync) reaches partitions %s and %s: send each partition's statements in a pipeline of its own", strings.Join(pl.parts, ", "), strings.Join(parts, ", "))
			}
			pl.parts, pl.an, pl.results, pl.st = parts, st.an, bd.resultFormats, st
		case 'D', 'E':
			if m.typ == 'D' && len(m.body) > 0 && m.body[0] == 'S' {
				pl.desc = cstrOr(m.body[1:])
				continue
			}
			portal, err := portalName(m.body, m.typ)
			if err != nil {
				return nil, i, fatalf("malformed %c message", m.typ)
			}
			if b, ok := s.portals[portal]; ok && pl.parts == nil {
				pl.parts = []string{b.part.Name}
			}
		case 'C':
			if len(m.body) > 1 && m.body[0] == 'S' {
				name, _, err := cstr(m.body[1:])
				if err != nil {
					return nil, i, fatalf("malformed Close message")
				}
				pl.closed = append(pl.closed, name)
			}
		}
	}
	if pl.parts == nil {
		pl.parts = []string{s.homePart()}
	}
	if len(pl.parts) > 1 && len(pl.parsed) == 0 && !pl.readOnly {
		if err := s.checkSpan(pl.parts, false); err != nil {
			return nil, lastBind, err
		}
	}
	return pl, 0, nil
}

func portalName(body []byte, typ byte) (string, error) {
	if typ == 'D' {
		if len(body) < 1 {
			return "", errMalformed
		}
		body = body[1:]
	}
	name, _, err := cstr(body)
	return name, err
}

// fillExchange adds to x (which holds what join put there: the block's
// BEGIN if b joins it now) what b is sent for the batch: hidden Close and
// Parse of statements b lacks, then the client's messages.
//
// abort ends x with a hidden Parse that fails on the server and a Sync
// (hidden unless sync), for runPipeline's refusal.
func (s *Session) fillExchange(b *backend, x *exchange, batch []msg, pl *pipeline, sync, abort bool) {
	current := map[string]*stmt{}
	ensure := func(name string) {
		st := current[name]
		if st == nil {
			st = s.stmts[name]
		}
		if st == nil || b.stmts[name] == st {
			return
		}
		if name != "" {
			x.add('C', msg{typ: 'C', body: append([]byte{'S'}, append([]byte(name), 0)...)}, true)
		}
		x.add('P', st.parse, true)
		b.stmts[name] = st
	}
	for _, m := range batch {
		switch m.typ {
		case 'P':
			st := pl.parsed[cstrOr(m.body)]
			if st.name != "" {
				x.add('C', msg{typ: 'C', body: append([]byte{'S'}, append([]byte(st.name), 0)...)}, true)
			}
			current[st.name] = st
			b.stmts[st.name] = st
		case 'B':
			bd, _ := decodeBind(m.body)
			ensure(bd.stmt)
			s.portals[bd.portal] = b
			if !pl.readOnly {
				b.wrote = true
			}
		case 'D':
			if len(m.body) > 1 && m.body[0] == 'S' {
				ensure(cstrOr(m.body[1:]))
			}
		case 'C':
			if len(m.body) > 1 && m.body[0] == 'S' {
				name := cstrOr(m.body[1:])
				delete(b.stmts, name)
				delete(current, name)
			}
		}
		x.add(m.typ, m, false)
	}
	switch {
	case abort:
		x.add('P', abortParse, true)
		x.add('S', msg{typ: 'S'}, !sync)
	case sync:
		x.add('S', msg{typ: 'S'}, false)
	default:
		x.out = append(x.out, msg{typ: 'H'})
	}
}

func cstrOr(b []byte) string {
	s, _, _ := cstr(b)
	return s
}

// descSink passes answers on and keeps the last RowDescription.
type descSink struct {
	inner sink
	desc  []byte
}

func (d *descSink) put(i int, m msg) error {
	if m.typ == 'T' {
		d.desc = m.body
	}
	return d.inner.put(i, m)
}
