package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
)

// TestAPIRequiresToken: every API call but GET /metrics answers 401 with a
// one-line JSON error without the token or with a wrong one — re-routing a
// tenant to another's server and holding a tenant included — and changes
// nothing. The token file is made at New, mode 0600.
func TestAPIRequiresToken(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // where the proxy registers its token
	tokFile := filepath.Join(t.TempDir(), "sub", "proxy.token")
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, TokenFile: tokFile,
		Routes: []RouteConfig{{Tenant: "t1", Addr: "127.0.0.1:5001"}, {Tenant: "t2", Addr: "127.0.0.1:5002"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fi, err := os.Stat(tokFile)
	if err != nil || fi.Mode().Perm() != 0o600 || len(p.Token()) != 64 {
		t.Fatalf("token file %v %v, token %q: want mode 0600 and 64 hex digits", fi, err, p.Token())
	}
	base := "http://" + p.APIAddr()
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/v1/routes", ""},
		{"PUT", "/v1/routes/t1", `{"addr":"127.0.0.1:5002","database":"postgres"}`},
		{"POST", "/v1/tenants/t1/hold", `{"deadline_ms":1}`},
		{"POST", "/v1/tenants/t1/switch", `{"addr":"127.0.0.1:5002"}`},
		{"POST", "/v1/tenants/t1/prepare", `{"addr":"127.0.0.1:5002"}`},
		{"POST", "/v1/tenants/t1/release", ""},
		{"GET", "/v1/tenants/t1/backends", ""},
		{"GET", "/v1/latency", ""},
		{"GET", "/v1/handovers", ""},
		{"GET", "/v1/stats", ""},
	} {
		for _, hdr := range []string{"", "Bearer nope", "Bearer " + p.Token() + "x"} {
			req, _ := http.NewRequest(rq.method, base+rq.path, strings.NewReader(rq.body))
			if hdr != "" {
				req.Header.Set("Authorization", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 || !bytes.HasPrefix(body, []byte(`{"error": "proxy: `)) || bytes.Count(bytes.TrimSpace(body), []byte("\n")) != 0 {
				t.Errorf("%s %s with Authorization %q: %d %s; want 401 and a one-line error", rq.method, rq.path, hdr, resp.StatusCode, body)
			}
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics without a token: %v %v, want 200", resp, err)
	}
	resp.Body.Close()
	rs, err := p.APIClient().Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Held || r.Addr != map[string]string{"t1": "127.0.0.1:5001", "t2": "127.0.0.1:5002"}[r.Tenant] {
			t.Errorf("route after refused calls: %+v", r)
		}
	}
	// Restarted on the same file, the proxy keeps its token.
	p2, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, TokenFile: tokFile, Routes: []RouteConfig{{Tenant: "t1", Addr: "127.0.0.1:5001"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if p2.Token() != p.Token() {
		t.Fatal("a second proxy on the same token file has another token")
	}
	// A token file others may read is refused.
	os.Chmod(tokFile, 0o644)
	if _, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, TokenFile: tokFile}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("token file of mode 0644: %v, want refused", err)
	}
}

// TestInsecureNoAuth: a proxy run open on purpose serves the API without a
// token and warns at start.
func TestInsecureNoAuth(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, InsecureNoAuth: true,
		Routes: []RouteConfig{{Tenant: "t1", Addr: "127.0.0.1:5001"}},
		Logf:   func(f string, a ...any) { mu.Lock(); logs = append(logs, fmt.Sprintf(f, a...)); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := client.New(p.APIAddr(), nil).Routes(context.Background()); err != nil {
		t.Fatalf("open proxy: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) == 0 || !strings.Contains(logs[0], "INSECURE") {
		t.Fatalf("logs of an open proxy: %q, want the warning first", logs)
	}
}

// TestCatalogSendsToken: the proxy polls an agent that requires a token
// with the one it was given (Config.CatalogTokenFile), and an agent it has
// no token for refuses it: the proxy then routes nothing from it.
func TestCatalogSendsToken(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no registered tokens
	const tok = "agent-token"
	var mu sync.Mutex
	var seen []string
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+tok {
			w.WriteHeader(401)
			return
		}
		fmt.Fprint(w, `[{"id":1,"name":"acme","host":"127.0.0.1","port":5001,"database":"postgres","state":"running"}]`)
	}))
	defer agent.Close()
	tokFile := filepath.Join(t.TempDir(), "agent.token")
	os.WriteFile(tokFile, []byte(tok+"\n"), 0o600)
	for _, tc := range []struct {
		name, file string
		routed     bool
	}{{"no token", "", false}, {"token file", tokFile, true}} {
		p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true,
			Catalogs: []string{agent.URL}, CatalogTokenFile: tc.file, CatalogPoll: 20 * time.Millisecond, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if got := p.tenantByName("acme") != nil; got != tc.routed {
			t.Errorf("%s: acme routed %v, want %v", tc.name, got, tc.routed)
		}
		p.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0] != "" || seen[len(seen)-1] != "Bearer "+tok {
		t.Fatalf("Authorization headers the agent saw: %q", seen)
	}
}
