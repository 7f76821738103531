package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestAgentMutualTLS: an agent of mutual TLS refuses, in the handshake, a
// caller (the CLI's client, or another agent calling it as its peer) that
// presents no certificate, one of another CA, or an expired one of its own
// CA; a client-only certificate of its CA is answered.
func TestAgentMutualTLS(t *testing.T) {
	caDir := testCA(t)
	now := time.Now()
	srv := testLeaf(t, caDir, "a1", false, now)
	c1 := newTestConfig(t, "a1")
	c1.TLSCert, c1.TLSKey, c1.TLSCA, c1.InsecureLoopback = srv.Cert, srv.Key, srv.CA, false
	a1 := startAgent(t, c1)
	ctx := ctxT(t)
	if _, err := a1.c.Info(ctx); err != nil {
		t.Fatalf("with the agent's own certificate: %v", err)
	}
	otherCA := testCA(t)
	expired := testLeaf(t, caDir, "old", false, now.Add(-2*certs.LeafValidity))
	stranger := testLeaf(t, otherCA, "stranger", false, now)
	stranger.CA = srv.CA // it trusts a1, a1 does not trust it
	ops := testLeaf(t, caDir, "ops", true, now)
	call := func(f certs.Files) error {
		tc, err := f.Client()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New(a1.URL())
		_, err = c.WithToken(testToken).WithTLS(tc).Info(ctx)
		return err
	}
	if err := call(ops); err != nil {
		t.Errorf("a client certificate of the CA: %v", err)
	}
	for _, c := range []struct {
		name string
		f    certs.Files
		want string
	}{
		{"no certificate", certs.Files{CA: srv.CA}, "certificate required"},
		{"another CA's certificate", stranger, "unknown certificate authority"},
		{"expired certificate", expired, "expired certificate"},
	} {
		if err := call(c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CLI with %s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
	// Agents calling a1 as their peer: refused the same way.
	for _, c := range []struct {
		name string
		f    certs.Files
		want string
	}{
		{"another CA's certificate", stranger, "unknown certificate authority"},
		{"expired certificate", expired, "expired certificate"},
	} {
		cfg := newTestConfig(t, "p-"+strings.ReplaceAll(c.name, " ", "-")[:7])
		cfg.TLSCert, cfg.TLSKey, cfg.TLSCA, cfg.InsecureLoopback = c.f.Cert, c.f.Key, c.f.CA, false
		cfg.Peers = map[string]string{"a1": a1.URL()}
		peer := startAgent(t, cfg)
		pc, err := peer.peerClient(a1.URL())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Info(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("peer agent with %s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
	// A caller with a valid certificate still needs the token.
	tc, _ := ops.Client()
	c, _ := client.New(a1.URL())
	if _, err := c.WithToken("wrong").WithTLS(tc).Info(ctx); err == nil || !strings.Contains(err.Error(), "wrong token") {
		t.Errorf("a valid certificate with a wrong token: %v", err)
	}
}

// wireTap is a TCP relay in front of an agent that records every byte of
// every connection through it, each direction apart. Cut, it stops
// forwarding without closing anything, as a cut link does, until the test
// ends.
type wireTap struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	conns   []*tapConn
	cutOnce sync.Once
	cutCh   chan struct{} // closed by cut
	ended   chan struct{} // closed when the test ends
}

// cut stops the relay carrying bytes.
func (tap *wireTap) cut() { tap.cutOnce.Do(func() { close(tap.cutCh) }) }

// gate passes writes until the tap is cut, then holds the write (and so
// the copy that reads for it) until the test ends.
type gate struct{ tap *wireTap }

func (g gate) Write(p []byte) (int, error) {
	select {
	case <-g.tap.cutCh:
		<-g.tap.ended
		return 0, net.ErrClosed
	default:
		return len(p), nil
	}
}

type tapConn struct{ up, down bytes.Buffer } // up: caller to agent

// lockedWriter appends to a buffer under the tap's lock.
type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func startTap(t *testing.T, target string) *wireTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap := &wireTap{ln: ln, target: target, cutCh: make(chan struct{}), ended: make(chan struct{})}
	t.Cleanup(func() { close(tap.ended); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			tc := &tapConn{}
			tap.mu.Lock()
			tap.conns = append(tap.conns, tc)
			tap.mu.Unlock()
			go func() {
				io.Copy(io.MultiWriter(gate{tap}, s, lockedWriter{&tap.mu, &tc.up}), c)
				s.(*net.TCPConn).CloseWrite()
			}()
			go func() {
				io.Copy(io.MultiWriter(gate{tap}, c, lockedWriter{&tap.mu, &tc.down}), s)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return tap
}

// recorded returns a copy of what every connection carried, each direction.
func (tap *wireTap) recorded() (ups, downs [][]byte) {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for _, c := range tap.conns {
		ups = append(ups, bytes.Clone(c.up.Bytes()))
		downs = append(downs, bytes.Clone(c.down.Bytes()))
	}
	return ups, downs
}

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestStreamBetweenAgentsIsTLS reads the wire between two agents: a live
// migration's calls and snapshot stream from the source agent to the
// target's API pass through a recording relay. Between agents of plain
// HTTP (insecure_loopback, the control) the relay sees the HTTP request
// lines, the tenant's rows and the replication password; between agents of
// mutual TLS every connection starts with a TLS handshake record (0x16
// 0x03) both ways and none of them appears. The WAL stream, PostgreSQL's
// replication between the tenants, is checked at the tenant: with
// certificates it admits replication only over TLS with a client
// certificate of the CA (so the committed live migration streamed so).
// The same run checks that no password — a tenant user's, the replication
// role's — is in either agent's catalog file or log.
func TestStreamBetweenAgentsIsTLS(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "tls"}[secure]
		t.Run(name, func(t *testing.T) {
			c1, c2 := agentPair(t)
			scheme := "http://"
			if secure {
				withTLS(t, &c1, &c2)
				scheme = "https://"
			}
			tap := startTap(t, c2.Listen)
			c1.Peers["a2"] = scheme + tap.ln.Addr().String()
			var log1, log2 syncBuffer
			c1.Logger = slog.New(slog.NewTextHandler(&log1, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c2.Logger = slog.New(slog.NewTextHandler(&log2, &slog.HandlerOptions{Level: slog.LevelDebug}))
			a1, a2 := startAgent(t, c1), startAgent(t, c2)
			ctx := ctxT(t)

			userPW, marker := "pw-"+randomHex(t), "wire-marker-"+randomHex(t)
			tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Users: []client.User{{Name: "app", Password: userPW}}})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, a1.ConnString(tn.Port, ""))
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"CREATE TABLE wire (v text)", "INSERT INTO wire SELECT '" + marker + "' || g FROM generate_series(1, 2000) g", "CHECKPOINT"} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			conn.Close(ctx)
			m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2"})
			if err != nil {
				t.Fatal(err)
			}
			if m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil); m.Outcome != "committed" {
				t.Fatalf("migration ended %s: %s", m.Outcome, m.Error)
			}
			replPW, err := os.ReadFile(filepath.Join(c1.Root, replicationPasswordFile))
			if err != nil {
				t.Fatal(err)
			}
			secrets := map[string]string{"the marker row": marker, "an HTTP request line": "POST /v1/", "the replication password": strings.TrimSpace(string(replPW))}

			ups, downs := tap.recorded()
			all := bytes.Join(append(ups, downs...), nil)
			t.Logf("%s: %d connections through the relay, %d bytes", name, len(ups), len(all))
			if len(all) < 1<<20 {
				t.Fatalf("the relay carried %d bytes: the snapshot did not pass through it", len(all))
			}
			for what, s := range secrets {
				if got := bytes.Contains(all, []byte(s)); got == secure {
					t.Errorf("%s: %s on the wire: %v, want %v", name, what, got, !secure)
				}
			}
			if secure {
				for i := range ups {
					for dir, b := range map[string][]byte{"to the agent": ups[i], "from the agent": downs[i]} {
						if len(b) < 2 || b[0] != 0x16 || b[1] != 0x03 {
							t.Errorf("connection %d %s starts % x, want a TLS handshake record (16 03)", i, dir, b[:min(len(b), 8)])
						}
					}
				}
			}

			// The WAL stream: PostgreSQL's streaming replication between the
			// tenants, not the API. With certificates the tenant (now on a2)
			// takes replication only over TLS with a client certificate of
			// the CA; the live migration's standby streamed so (verify-full).
			repl := func(tls string) error {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				c, err := pgconn.Connect(cctx, fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s replication=true %s",
					a2.TenantPort(tn.ID), pgcluster.ReplicationRole, secrets["the replication password"], tls))
				if err == nil {
					c.Close(cctx)
				}
				return err
			}
			withCert := "sslmode=verify-full " + "sslrootcert=" + c2.TLSCA + " sslcert=" + c2.TLSCert + " sslkey=" + c2.TLSKey
			if !secure {
				if err := repl("sslmode=disable"); err != nil {
					t.Errorf("plain: replication without TLS refused: %v", err)
				}
			} else {
				if err := repl("sslmode=disable"); err == nil || !strings.Contains(err.Error(), "no encryption") {
					t.Errorf("replication without TLS: %v, want refused (no encryption)", err)
				}
				if err := repl("sslmode=require"); err == nil || !strings.Contains(err.Error(), "certificate") {
					t.Errorf("replication over TLS without a client certificate: %v, want refused", err)
				}
				if err := repl(withCert); err != nil {
					t.Errorf("replication over TLS with the agent's certificate: %v", err)
				}
			}

			// Passwords never in the catalog or the logs in clear.
			secrets = map[string]string{"a tenant user's password": userPW, "the replication password": secrets["the replication password"]}
			for _, f := range []struct {
				what string
				b    func() []byte
			}{
				{"a1's catalog", func() []byte { b, _ := os.ReadFile(filepath.Join(c1.Root, "catalog.db")); return b }},
				{"a2's catalog", func() []byte { b, _ := os.ReadFile(filepath.Join(c2.Root, "catalog.db")); return b }},
				{"a1's log", func() []byte { return []byte(log1.String()) }},
				{"a2's log", func() []byte { return []byte(log2.String()) }},
			} {
				b := f.b()
				if len(b) == 0 {
					t.Fatalf("%s is empty", f.what)
				}
				for what, s := range secrets {
					if bytes.Contains(b, []byte(s)) {
						t.Errorf("%s holds %s in clear", f.what, what)
					}
				}
			}
		})
	}
}
