package router

import (
	"context"

	"github.com/sluicedb/sluice/router/analyze"
)

// Transaction control in the extended protocol. Drivers such as JDBC send
// BEGIN, COMMIT, ROLLBACK and SET as prepared statements, BEGIN often at
// the head of the first statement's pipeline. They are the router's, not
// a partition's: the leading control statements of a pipeline are answered
// here, as PostgreSQL would answer them (ParseComplete, BindComplete,
// ParameterDescription and NoData, the command's CommandComplete), and
// acted on as the same statement sent as a simple Query is; the rest of
// the pipeline goes on as usual. A control statement after other
// statements in one pipeline is refused (plan).

// isControl reports whether an analysed statement is the router's to answer.
func isControl(an *analyze.Statement) bool {
	if an == nil {
		return false
	}
	switch an.Class {
	case analyze.Begin, analyze.Commit, analyze.Rollback, analyze.SetKey, analyze.Savepoint, analyze.Session:
		return true
	}
	return false
}

// controlPrefix returns how many of the batch's first messages belong to
// control statements: their Parse, Bind, Describe and Execute.
func (s *Session) controlPrefix(batch []msg) int {
	parsed := map[string]*stmt{}
	portals := map[string]bool{}
	lookup := func(name string) *stmt {
		if st, ok := parsed[name]; ok {
			return st
		}
		return s.stmts[name]
	}
	for i, m := range batch {
		ok := false
		switch m.typ {
		case 'P':
			if st, err := s.decodeParse(m.body); err == nil && isControl(st.an) {
				parsed[st.name], ok = st, true
			}
		case 'B': // the names only: this runs before every pipeline
			portal, rest, err := cstr(m.body)
			if err == nil {
				name, _, err := cstr(rest)
				if st := lookup(name); err == nil && st != nil && isControl(st.an) {
					portals[portal], ok = true, true
				}
			}
		case 'D', 'E':
			if m.typ == 'D' && len(m.body) > 1 && m.body[0] == 'S' {
				st := lookup(cstrOr(m.body[1:]))
				ok = st != nil && isControl(st.an)
			} else if name, err := portalName(m.body, m.typ); err == nil {
				ok = portals[name]
			}
		}
		if !ok {
			return i
		}
	}
	return len(batch)
}

// runControl answers a batch's leading control messages and acts on them.
func (s *Session) runControl(ctx context.Context, msgs []msg) error {
	portals := map[string]*stmt{}
	for _, m := range msgs {
		var err error
		switch m.typ {
		case 'P':
			st, _ := s.decodeParse(m.body)
			s.stmts[st.name] = st
			err = writeMsg(s.cw, '1', nil)
		case 'B':
			bd, _ := decodeBind(m.body)
			portals[bd.portal] = s.stmts[bd.stmt]
			err = writeMsg(s.cw, '2', nil)
		case 'D':
			if m.body[0] == 'S' {
				err = writeMsg(s.cw, 't', []byte{0, 0})
			}
			if err == nil {
				err = writeMsg(s.cw, 'n', nil)
			}
		case 'E':
			name, _ := portalName(m.body, 'E')
			st := portals[name]
			if !s.tx.block {
				s.startTx()
			}
			err = s.statement(ctx, st.an.Text, st.an)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
