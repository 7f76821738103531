package router

import "context"

// A batch the router refuses (plan fails at one of its messages: a Bind
// whose key is of the wrong type, names no partition, or reaches another
// partition than the batch's earlier Binds) is answered as PostgreSQL
// answers a batch whose message fails: every message before the failing
// one has done its work and been answered, then comes the error, and the
// rest up to Sync is skipped. What PostgreSQL answers before the error is
// ParseComplete for a Parse (the statement exists from then on, whatever
// follows), CloseComplete for a Close, ParameterDescription and
// RowDescription for a Describe, BindComplete for a Bind, the rows of an
// Execute; and the error rolls back the implicit transaction of a batch
// outside a block (so an Execute before it is undone), or fails the block.
//
// The router mirrors it two ways:
//
//   - A prefix of Parses (each analysed without error) and Closes of
//     statements needs no server: the router answers ParseComplete and
//     CloseComplete itself, records the statements (a later Bind parses
//     them where it runs, as for any statement: fillExchange's ensure)
//     and sends the error.
//   - Any other prefix (a Describe, Bind, Execute, a Close of a portal, a
//     Parse the analyzer refused) is sent to the partition it plans to (a
//     Describe alone: the transaction's first partition or the home one),
//     followed by a hidden Parse that fails on the server, so the server
//     skips to Sync and rolls back or fails the block exactly as for an
//     error of its own; its answers to the prefix reach the client, then
//     the router's error (or the server's, if the prefix failed first).
//
// A prefix that reaches several partitions (a Bind over several before the
// refused message) is not run: the client gets the error alone; the
// prefix's Parses are still recorded (a client that parses again is served
// either way), its Closes are not.

// abortParse is the hidden Parse that ends a refused batch's prefix on a
// server: its text is no SQL, so the server fails it with 42601 and skips
// to Sync; the failure is before the statement name is looked at, so the
// name creates or replaces nothing.
var abortParse = msg{typ: 'P', body: []byte("sluice_refused\x00sluice: the router refused the pipeline here\x00\x00\x00")}

// refuse answers a batch that plan refused with pe at the message after
// prefix, as the comment above says; sync says whether the batch ended
// with Sync (else Flush).
func (s *Session) refuse(ctx context.Context, prefix []msg, pe *pgError, sync bool) error {
	local := s.localPrefix(prefix)
	if !local {
		if pl, _, err := s.plan(ctx, prefix); err == nil && len(pl.parts) == 1 {
			return s.runPipeline(ctx, prefix, pl, sync, pe)
		}
	}
	for _, m := range prefix { // answered when local; else (a prefix over several partitions) only recorded
		var answer byte
		switch {
		case m.typ == 'P':
			st, err := s.decodeParse(m.body)
			if err != nil || st.err != nil {
				continue
			}
			s.stmts[st.name] = st
			answer = '1'
		case m.typ == 'C' && len(m.body) > 1 && m.body[0] == 'S' && local:
			delete(s.stmts, cstrOr(m.body[1:]))
			answer = '3'
		}
		if local && answer != 0 {
			if err := writeMsg(s.cw, answer, nil); err != nil {
				return err
			}
		}
	}
	e := s.clientError(pe, false)
	if sync {
		s.endIfIdle()
	}
	return e
}

// localPrefix reports whether the router answers prefix itself: it holds
// only Parses the analyzer read without error and Closes of statements.
func (s *Session) localPrefix(prefix []msg) bool {
	for _, m := range prefix {
		switch {
		case m.typ == 'P':
			st, err := s.decodeParse(m.body)
			if err != nil || st.err != nil {
				return false
			}
		case m.typ == 'C' && len(m.body) > 1 && m.body[0] == 'S':
		default:
			return false
		}
	}
	return true
}

// prefixSink passes on the answers to an exchange's first n client
// messages and drops the rest (the hidden abortParse's error, answered as
// the n-th); passedErr says an ErrorResponse was passed on.
type prefixSink struct {
	inner     sink
	n         int
	passedErr bool
}

func (p *prefixSink) put(i int, m msg) error {
	if i >= p.n {
		return nil
	}
	if m.typ == 'E' {
		p.passedErr = true
	}
	return p.inner.put(i, m)
}
