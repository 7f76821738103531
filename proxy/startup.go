package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sluicedb/sluice/proxy/scram"
)

// A session's startup: SSL/GSS negotiation, cancel requests, the startup
// message, SCRAM-SHA-256 authentication of the client, and the first server
// session, opened as a transaction boundary would (waiting while the tenant
// is held). The session is ready for the relay when startupPhase returns ok.

// Protocol request codes of startup-phase packets.
const (
	codeProto30    = 196608
	codeProto32    = 196610
	codeSSLRequest = 80877103
	codeGSSENC     = 80877104
	codeCancel     = 80877102
)

// startupPhase handles SSL/GSS negotiation, cancel requests, the startup
// message, client authentication and the server connection. ok is true
// when the session is ready for the relay.
func (s *session) startupPhase(ctx context.Context) (ok bool, err error) {
	p := s.p
	var buf [512]byte
	tlsDone := false
	for {
		body, err := readStartup(s.cr, buf[:0])
		if err != nil {
			return false, err
		}
		code := binary.BigEndian.Uint32(body)
		switch code {
		case codeSSLRequest:
			if len(body) != 4 || tlsDone {
				return false, protoErrf(codeProtocolViolation, "unexpected SSLRequest")
			}
			if s.cr.Buffered() > 0 {
				return false, protoErrf(codeProtocolViolation, "received unencrypted data after SSL request")
			}
			if p.tlsCfg == nil {
				if _, err := s.conn.Write([]byte{'N'}); err != nil {
					return false, err
				}
				continue
			}
			if _, err := s.conn.Write([]byte{'S'}); err != nil {
				return false, err
			}
			tc := tls.Server(s.conn, p.tlsCfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				return false, fmt.Errorf("tls handshake: %w", err)
			}
			s.conn = tc
			s.cr = bufio.NewReaderSize(tc, 16<<10)
			s.cw = bufio.NewWriterSize(tc, 16<<10)
			tlsDone = true
		case codeGSSENC:
			if s.cr.Buffered() > 0 {
				return false, protoErrf(codeProtocolViolation, "received unencrypted data after GSSAPI encryption request")
			}
			if _, err := s.conn.Write([]byte{'N'}); err != nil {
				return false, err
			}
		case codeCancel:
			var cr pgproto3.CancelRequest
			if err := cr.Decode(body); err != nil {
				return false, nil // cancel requests get no answer
			}
			p.forwardCancel(ctx, cr.ProcessID, cr.SecretKey)
			return false, nil
		case codeProto30, codeProto32:
			var sm pgproto3.StartupMessage
			if err := sm.Decode(body); err != nil {
				return false, protoErrf(codeProtocolViolation, "invalid startup packet: %v", err)
			}
			return s.startup(ctx, &sm)
		default:
			if code>>16 != 3 {
				return false, protoErrf(codeFeatureNotSupported, "unsupported frontend protocol %d.%d: server supports 3.0", code>>16, code&0xffff)
			}
			// 3.x with x > 2: negotiate down like PostgreSQL does.
			var sm pgproto3.StartupMessage
			binary.BigEndian.PutUint32(body, codeProto32)
			if err := sm.Decode(body); err != nil {
				return false, protoErrf(codeProtocolViolation, "invalid startup packet: %v", err)
			}
			return s.startup(ctx, &sm)
		}
	}
}

func (s *session) startup(ctx context.Context, sm *pgproto3.StartupMessage) (bool, error) {
	p := s.p
	s.user = sm.Parameters["user"]
	if s.user == "" {
		return false, protoErrf(codeInvalidAuthSpec, "no PostgreSQL user name specified in startup packet")
	}
	s.alias = sm.Parameters["database"]
	if s.alias == "" {
		s.alias = s.user
	}
	if _, ok := sm.Parameters["replication"]; ok {
		return false, protoErrf(codeFeatureNotSupported, "sluice proxy does not relay replication connections")
	}
	s.startupParams = map[string]string{}
	var unknownOpts []string
	for k, v := range sm.Parameters {
		switch {
		case k == "user" || k == "database":
		case strings.HasPrefix(k, "_pq_."):
			unknownOpts = append(unknownOpts, k)
		default:
			s.startupParams[k] = v
		}
	}
	if sm.ProtocolVersion != codeProto30 || len(unknownOpts) > 0 {
		b := encodeMsg(nil, &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: unknownOpts})
		if _, err := s.cw.Write(b); err != nil {
			return false, err
		}
	}
	t := p.tenantByAlias(s.alias)
	if t == nil {
		if k := p.keyspace(s.alias); k != nil {
			if err := s.authenticate(); err != nil {
				return false, err
			}
			s.ks = k
			return true, nil
		}
		return false, protoErrf(codeInvalidCatalogName, "database %q does not exist", s.alias)
	}
	if err := s.authenticate(); err != nil {
		return false, err
	}
	s.tenant = t
	// Connect to the server as the first transaction boundary would: wait
	// while held, so a session opened during a handover lands on the new server.
	r, gen, err := t.enter(ctx)
	if err != nil {
		return false, err
	}
	sc, err := p.dialServer(ctx, r, s.user, s.startupParams)
	t.leave()
	if err != nil {
		s.cw.Write(encodeMsg(nil, pgErrorResponse(err)))
		s.cw.Flush()
		return false, fmt.Errorf("connect %s: %w", r.Addr, err)
	}
	s.srvGen.Store(gen)
	s.mu.params = map[string]string{}
	out := make([]byte, 0, 1024)
	out = encodeMsg(out, &pgproto3.AuthenticationOk{})
	for k, v := range sc.params {
		s.mu.params[k] = v
		out = encodeMsg(out, &pgproto3.ParameterStatus{Name: k, Value: v})
	}
	p.registerSession(s)
	out = encodeMsg(out, &pgproto3.BackendKeyData{ProcessID: s.key, SecretKey: s.secret[:]})
	out = encodeMsg(out, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if _, err := s.cw.Write(out); err != nil {
		sc.close()
		p.unregisterSession(s)
		return false, err
	}
	if err := s.cw.Flush(); err != nil {
		sc.close()
		p.unregisterSession(s)
		return false, err
	}
	t.addSession(s)
	p.sessionsOpen.Add(1)
	s.attach(sc)
	return true, nil
}

// authenticate runs SCRAM-SHA-256 with the client (or nothing when trusted).
func (s *session) authenticate() error {
	p := s.p
	if p.cfg.Trust {
		return nil
	}
	secret, known := p.secrets[s.user]
	if !known {
		secret = p.dummySecret // mock authentication: fail at the proof, not before
	}
	if _, err := s.cw.Write(encodeMsg(nil, &pgproto3.AuthenticationSASL{AuthMechanisms: []string{scram.Mechanism}})); err != nil {
		return err
	}
	if err := s.cw.Flush(); err != nil {
		return err
	}
	body, err := s.readAuthMessage()
	if err != nil {
		return err
	}
	var init pgproto3.SASLInitialResponse
	if err := init.Decode(body); err != nil {
		return protoErrf(codeProtocolViolation, "malformed SASLInitialResponse: %v", err)
	}
	if init.AuthMechanism != scram.Mechanism {
		return protoErrf(codeInvalidAuthSpec, "client selected an invalid SASL authentication mechanism %q", init.AuthMechanism)
	}
	var nonce [18]byte
	rand.Read(nonce[:])
	conv := scram.NewConversation(secret, base64.StdEncoding.EncodeToString(nonce[:]))
	first, err := conv.First(init.Data)
	if err != nil {
		return protoErrf(codeProtocolViolation, "%v", err)
	}
	if _, err := s.cw.Write(encodeMsg(nil, &pgproto3.AuthenticationSASLContinue{Data: first})); err != nil {
		return err
	}
	if err := s.cw.Flush(); err != nil {
		return err
	}
	body, err = s.readAuthMessage()
	if err != nil {
		return err
	}
	final, err := conv.Final(body)
	if err != nil || !known {
		if err == nil || errors.Is(err, scram.ErrAuthFailed) {
			return protoErrf(codeInvalidPassword, "password authentication failed for user %q", s.user)
		}
		return protoErrf(codeProtocolViolation, "%v", err)
	}
	_, err = s.cw.Write(encodeMsg(nil, &pgproto3.AuthenticationSASLFinal{Data: final}))
	return err
}

// readAuthMessage reads one 'p' message during authentication.
func (s *session) readAuthMessage() ([]byte, error) {
	typ, n, err := readHeader(s.cr, &s.hdr)
	if err != nil {
		return nil, err
	}
	if typ != 'p' {
		return nil, protoErrf(codeProtocolViolation, "expected SASL response, got message type %q", typ)
	}
	if n > maxStartupPacket {
		return nil, protoErrf(codeProtocolViolation, "invalid SASL response length %d", n)
	}
	return readBody(s.cr, nil, n)
}
