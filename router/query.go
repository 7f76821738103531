package router

import (
	"context"
	"slices"
	"strings"

	"github.com/sluicedb/sluice/router/analyze"
)

// The simple Query protocol: one message, one or more statements, one
// ReadyForQuery (sent by the caller).

// query runs one Query message's SQL.
func (s *Session) query(ctx context.Context, sql string) error {
	if !s.tx.block {
		s.startTx()
	}
	stmts, params, err := s.ks.Cache.Query(sql)
	s.params = params
	switch {
	case err != nil: // the server says what is wrong with it
		return s.queryOn(ctx, sql, nil, []string{s.homePart()})
	case len(stmts) == 0:
		if err := writeMsg(s.cw, 'I', nil); err != nil {
			return err
		}
		return s.endIfIdle()
	case len(stmts) == 1:
		return s.statement(ctx, sql, stmts[0])
	}
	return s.multi(ctx, sql, stmts)
}

// endIfIdle ends the transaction's accounting outside a block.
func (s *Session) endIfIdle() error {
	if !s.tx.block {
		s.endTx()
	}
	return nil
}

// statement runs a Query message holding one statement.
func (s *Session) statement(ctx context.Context, sql string, an *analyze.Statement) error {
	if s.tx.failed && an.Class != analyze.Rollback && an.Class != analyze.Commit {
		return s.clientError(errorf(codeInFailedTx, "current transaction is aborted, commands ignored until end of transaction block"), true)
	}
	switch an.Class {
	case analyze.Begin:
		if s.tx.block {
			s.notice("25001", "there is already a transaction in progress")
		} else {
			s.tx.block, s.tx.beginSQL = true, an.Text
		}
		return writeMsg(s.cw, 'C', commandComplete("BEGIN").body)
	case analyze.Commit:
		if !s.tx.block {
			s.notice("25P01", "there is no transaction in progress")
			s.endTx()
			return writeMsg(s.cw, 'C', commandComplete("COMMIT").body)
		}
		return s.commit(ctx)
	case analyze.Rollback:
		if !s.tx.block {
			s.notice("25P01", "there is no transaction in progress")
		}
		s.rollback()
		return writeMsg(s.cw, 'C', commandComplete("ROLLBACK").body)
	case analyze.SetKey:
		s.tx.hint = an.SetValue
		return writeMsg(s.cw, 'C', commandComplete("SET").body)
	case analyze.TwoPhase:
		err := s.clientError(errorf(codeFeatureNotSupported, "two-phase commit commands are not accepted through the keyspace router: it coordinates transactions across partitions itself"), true)
		s.endIfIdle()
		return err
	case analyze.Session:
		return s.sessionStatement(ctx, sql)
	case analyze.Savepoint:
		return s.onParticipants(ctx, sql)
	}
	hint := s.tx.hint
	parts, err := s.owners(ctx, an, hint, s.params, nil, nil)
	if err == nil {
		err = s.checkStatement(an, parts)
	}
	if err != nil {
		e := s.clientError(asPgError(err), true)
		s.endIfIdle()
		return e
	}
	s.noteCursor(an, parts)
	return s.queryOn(ctx, sql, an, parts)
}

// checkStatement refuses what cannot run on parts: an INSERT of rows for
// several partitions, a write across partitions without 2PC, an
// aggregate read over several partitions.
func (s *Session) checkStatement(an *analyze.Statement, parts []string) error {
	switch {
	case an.UpdatesKey:
		return errorf(codeFeatureNotSupported, "the UPDATE assigns the key column of %s, which may move the row to another partition: delete and insert it instead", strings.Join(an.Sharded, ", "))
	case len(parts) < 2:
	case an.Cursor != "" && an.Class == analyze.Plain:
		return errorf(codeFeatureNotSupported, "the cursor's query reads rows of partitions %s: the router keeps a cursor on one partition; declare one per partition's keys", strings.Join(parts, ", "))
	case an.Kind == analyze.Insert && len(an.Sharded) > 0:
		return errorf(codeFeatureNotSupported, "the INSERT has rows for partitions %s: insert each partition's rows in a statement of its own", strings.Join(parts, ", "))
	case an.Aggregate:
		return errorf(codeFeatureNotSupported, "the statement aggregates rows of partitions %s: the router cannot combine aggregates; query each partition's keys apart", strings.Join(parts, ", "))
	}
	return s.checkSpan(parts, an.ReadOnly)
}

func asPgError(err error) *pgError {
	if pe, ok := err.(*pgError); ok {
		return pe
	}
	return errorf(codeConnectionFailure, "%v", err)
}

// queryOn runs sql on parts: one partition directly, several as a scatter
// whose answers are merged; a write on several outside a block runs in a
// transaction of the router's, committed with two-phase commit.
func (s *Session) queryOn(ctx context.Context, sql string, an *analyze.Statement, parts []string) error {
	readOnly := an != nil && an.ReadOnly
	implicit, bs, xs, err := s.reach(ctx, parts, readOnly)
	if err != nil {
		return s.abandon(err, implicit)
	}
	for i, b := range bs { // after every join: join may add to any of xs
		xs[i].add('Q', msg{typ: 'Q', body: append([]byte(sql), 0)}, false)
		if !readOnly {
			b.wrote = true
		}
	}
	var res result
	if len(bs) == 1 {
		res, err = bs[0].run(xs[0], toClient{s.cw})
	} else {
		res, err = s.scatter(bs, xs, an, nil)
	}
	if err != nil {
		return s.abandon(err, implicit)
	}
	if res.err != nil && s.tx.block {
		s.tx.failed = true
	}
	switch {
	case implicit && res.err != nil:
		s.rollback()
	case implicit:
		if err := s.commitQuiet(ctx); err != nil {
			return err
		}
	case !s.tx.block:
		s.endTx()
	}
	return nil
}

// reach opens the server sessions of parts for one statement and joins
// them to the block, returning an exchange for each holding what join put
// there. A write on several partitions outside a block (implicit) runs in
// a block of the router's own, begun here.
func (s *Session) reach(ctx context.Context, parts []string, readOnly bool) (implicit bool, bs []*backend, xs []*exchange, err error) {
	implicit = len(parts) > 1 && !readOnly && !s.tx.block
	if implicit {
		s.tx.block, s.tx.beginSQL = true, "BEGIN"
	}
	for _, p := range parts {
		b, err := s.backend(ctx, p)
		if err != nil {
			return implicit, nil, nil, err
		}
		x := &exchange{}
		s.join(b, x)
		bs, xs = append(bs, b), append(xs, x)
	}
	return implicit, bs, xs, nil
}

// abandon answers a failure to reach a partition: the client gets the
// error; a block fails; a router's own transaction rolls back.
func (s *Session) abandon(err error, implicit bool) error {
	pe := asPgError(err)
	if implicit {
		s.rollback()
	}
	if e := s.clientError(pe, true); e != nil {
		return e
	}
	return s.endIfIdle()
}

// multi runs a Query message of several statements. They must stay on one
// partition; the whole string is sent there, and the block's state
// follows the server's.
func (s *Session) multi(ctx context.Context, sql string, stmts []*analyze.Statement) error {
	var parts []string
	control := false
	for _, an := range stmts {
		switch an.Class {
		case analyze.Begin, analyze.Commit, analyze.Rollback, analyze.Savepoint:
			control = true
			continue
		case analyze.SetKey, analyze.TwoPhase:
			e := s.clientError(errorf(codeFeatureNotSupported, "SET sluice.key and two-phase commands must be sent as statements of their own through the keyspace router"), true)
			s.endIfIdle()
			return e
		case analyze.Session, analyze.Other:
			continue
		}
		ps, err := s.owners(ctx, an, s.tx.hint, s.params, nil, nil)
		if err != nil {
			e := s.clientError(asPgError(err), true)
			s.endIfIdle()
			return e
		}
		s.noteCursor(an, ps)
		for _, p := range ps {
			if !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	if len(parts) == 0 {
		parts = []string{s.homePart()}
	}
	others := len(s.tx.parts) > 1 || (len(s.tx.parts) == 1 && s.tx.parts[0].part.Name != parts[0])
	if len(parts) > 1 || (control && others) {
		e := s.clientError(errorf(codeFeatureNotSupported, "a query string of several statements must stay on one partition (this one reaches %s): send them one by one", strings.Join(parts, ", ")), true)
		s.endIfIdle()
		return e
	}
	b, err := s.backend(ctx, parts[0])
	if err != nil {
		return s.abandon(err, false)
	}
	x := &exchange{}
	s.join(b, x)
	x.add('Q', msg{typ: 'Q', body: append([]byte(sql), 0)}, false)
	b.wrote = true
	res, err := b.run(x, toClient{s.cw})
	if err != nil {
		return s.abandon(err, false)
	}
	if !control {
		if res.err != nil && s.tx.block {
			s.tx.failed = true
		}
		return s.endIfIdle()
	}
	// The string opened, ended or failed a block on b: follow the server.
	switch res.status {
	case 'I':
		b.begun = false
		s.endTx()
	case 'T', 'E':
		if !s.tx.block {
			s.tx.block, s.tx.beginSQL = true, "BEGIN"
		}
		if !b.begun {
			b.begun = true
			s.tx.parts = append(s.tx.parts, b)
		}
		s.tx.failed = res.status == 'E'
	}
	return nil
}

// sessionStatement runs SET/RESET on every open server session and keeps
// it for the ones opened later.
func (s *Session) sessionStatement(ctx context.Context, sql string) error {
	if len(s.backends) == 0 {
		if _, err := s.backend(ctx, s.homePart()); err != nil {
			return s.abandon(err, false)
		}
	}
	names := make([]string, 0, len(s.backends))
	for n := range s.backends {
		names = append(names, n)
	}
	slices.Sort(names)
	bs := make([]*backend, len(names))
	for i, n := range names {
		bs[i] = s.backends[n]
	}
	first, err := s.onEach(bs, sql)
	if err != nil {
		return s.abandon(err, false)
	}
	if first == nil && !s.tx.block {
		s.session = append(s.session, sql)
	}
	if first != nil && s.tx.block {
		s.tx.failed = true
	}
	return s.endIfIdle()
}

// onParticipants runs a savepoint command on every partition of the block
// (on the home partition when it has none yet), answering from the first.
func (s *Session) onParticipants(ctx context.Context, sql string) error {
	if !s.tx.block {
		return s.queryOn(ctx, sql, nil, []string{s.homePart()})
	}
	if len(s.tx.parts) == 0 {
		b, err := s.backend(ctx, s.homePart())
		if err != nil {
			return s.abandon(err, false)
		}
		x := &exchange{}
		s.join(b, x)
		if _, err := b.run(x, discard{}); err != nil {
			return s.abandon(err, false)
		}
	}
	first, err := s.onEach(s.tx.parts, sql)
	if err != nil {
		return s.abandon(err, false)
	}
	if first != nil {
		s.tx.failed = true
	}
	return nil
}

// onEach runs sql on every backend of bs in turn; the client gets the
// first one's answers (and errors from any). It returns the first error a
// server answered.
func (s *Session) onEach(bs []*backend, sql string) (first *pgError, err error) {
	for i, b := range bs {
		x := &exchange{}
		x.add('Q', msg{typ: 'Q', body: append([]byte(sql), 0)}, i > 0)
		var sk sink = discard{}
		if i == 0 {
			sk = toClient{s.cw}
		}
		res, err := b.run(x, sk)
		if err != nil {
			return first, err
		}
		if res.err != nil && first == nil {
			first = res.err
		}
	}
	return first, nil
}

// notice sends a WARNING NoticeResponse.
func (s *Session) notice(code, text string) {
	e := &pgError{Severity: "WARNING", Code: code, Message: text}
	writeMsg(s.cw, 'N', e.body())
}
