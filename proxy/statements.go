package proxy

import (
	"bytes"
	"fmt"
	"strings"
)

// Prepared statements. The client loop records the named prepared statements
// a client creates with the extended protocol, and its last unnamed one, from
// the Parse, Close and Query messages it relays (inspect); a move re-creates
// them on the new server session (replayParses).

// inspect records what a handover must restore: named prepared statements.
func (s *session) inspect(typ byte, body []byte) {
	switch typ {
	case 'P':
		name, _, ok := cstringBytes(body)
		if !ok {
			return
		}
		raw := make([]byte, 5+len(body))
		copy(raw, s.hdr[:])
		copy(raw[5:], body)
		if len(name) == 0 {
			s.unnamed = raw
			return
		}
		s.parseMu.Lock()
		defer s.parseMu.Unlock()
		if s.parses == nil {
			s.parses = map[string][]byte{}
		}
		s.parses[string(name)] = raw
	case 'C':
		if len(body) < 2 || body[0] != 'S' {
			return
		}
		name, _, ok := cstringBytes(body[1:])
		if !ok {
			return
		}
		if len(name) == 0 {
			s.unnamed = nil
			return
		}
		s.parseMu.Lock()
		defer s.parseMu.Unlock()
		delete(s.parses, string(name))
	case 'Q':
		q := bytes.TrimLeft(body, " \t\r\n")
		if len(q) > 6 && (hasPrefixFold(q, "DISCARD ALL") || hasPrefixFold(q, "DEALLOCATE ALL")) {
			s.parseMu.Lock()
			defer s.parseMu.Unlock()
			clear(s.parses)
			s.unnamed = nil
		}
	}
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// replayParses re-creates the session's prepared statements on sc, the
// server session it is moving to: each recorded Parse that sc does not
// already hold (Prepare warmed it with the statements of that moment,
// sc.stmts) is sent again, and statements sc holds that the client has since
// closed or redefined are closed first. Statements the server refuses (they
// failed on the old server too) are forgotten. Runs in the client loop.
func (s *session) replayParses(sc *serverConn) error {
	var msgs [][]byte
	var names []string // per message: the statement a Parse defines; "\x00" for a Close
	for name, raw := range sc.stmts {
		if cur, ok := s.parses[name]; !ok || !bytes.Equal(cur, raw) {
			msgs = append(msgs, closeStatement(name))
			names = append(names, "\x00")
		}
	}
	for name, raw := range s.parses {
		if have, ok := sc.stmts[name]; ok && bytes.Equal(have, raw) {
			continue
		}
		msgs = append(msgs, raw)
		names = append(names, name)
	}
	if s.unnamed != nil {
		msgs = append(msgs, s.unnamed)
		names = append(names, "")
	}
	sc.stmts = nil
	if len(msgs) == 0 {
		return nil
	}
	failed, err := sc.pipeline(msgs, s.p.cfg.DialTimeout)
	if err != nil {
		return fmt.Errorf("replay prepared statements: %w", err)
	}
	s.parseMu.Lock()
	defer s.parseMu.Unlock()
	for i, bad := range failed {
		switch {
		case !bad || names[i] == "\x00":
		case names[i] == "":
			s.unnamed = nil
		default:
			delete(s.parses, names[i])
		}
	}
	return nil
}

// closeStatement encodes Close of the named prepared statement.
func closeStatement(name string) []byte {
	n := 4 + 1 + len(name) + 1
	b := make([]byte, 0, 1+n)
	b = append(b, 'C', byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 'S')
	b = append(b, name...)
	return append(b, 0)
}
