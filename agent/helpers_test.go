package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	if sluiceBin.path != "" {
		os.RemoveAll(filepath.Dir(sluiceBin.path))
	}
	os.Exit(code)
}

// freeBase returns a base port such that base+1 … base+n are free right now
// and were handed to no other agent of this test binary (parallel tests
// pick their configs before either starts a tenant: free then is not
// enough). It picks below the kernel's ephemeral range (32768+), where
// outgoing connections would otherwise collide with the tenants' ports.
func freeBase(t testing.TB, n int) int {
	t.Helper()
	basesMu.Lock()
	defer basesMu.Unlock()
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(12000-n)
		ok := true
		for i := 0; i < n && ok; i++ {
			if handedOut[p+i] {
				ok = false
				break
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			for i := 0; i < n; i++ {
				handedOut[p+i] = true
			}
			return p - 1
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// handedOut holds the tenant ports freeBase returned in this test binary.
var (
	basesMu   sync.Mutex
	handedOut = map[int]bool{}
)

// testToken is the shared agent token of the tests' agents; each knows it
// as its peers' token too (Config.PeerTokenFile).
const testToken = "test-token"

// testUsers are the tenant users the tests' clients log in as (through a
// proxy, or over TCP); the first owns the tenant's database.
var testUsers = []client.User{{Name: "app", Password: "app-secret"}}

// testProxyUsers is testUsers as a proxy's Users.
func testProxyUsers() map[string]string {
	m := map[string]string{}
	for _, u := range testUsers {
		m[u.Name] = u.Password
	}
	return m
}

// appConnString is a libpq URL for testUsers[0] over TCP to port.
func appConnString(port int) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", testUsers[0].Name, testUsers[0].Password, port)
}

// writeTokenFile writes token to a fresh 0600 file and returns its path.
func writeTokenFile(t testing.TB, token string) string {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testAgent is an agent served in-process on its own root and listener.
type testAgent struct {
	*Agent
	cfg    Config
	cancel context.CancelFunc
	done   chan error
	c      *client.Client
}

// newTestConfig returns a config with a fresh root and a free port range.
// The root is seeded with an initdb template copied from pgtest's (initdb
// runs once per test binary instead of once per agent).
func newTestConfig(t testing.TB, name string) Config {
	root := filepath.Join(pgtest.TempDir(t), name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tmpl := pgtest.Init(t, pgcluster.Options{})
	if out, err := exec.Command("cp", "-a", tmpl.Dir, filepath.Join(root, "template")).CombinedOutput(); err != nil {
		t.Fatalf("seed template: %v\n%s", err, out)
	}
	peerToken := filepath.Join(root, "peer.token")
	if err := os.WriteFile(peerToken, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Config{
		Name: name, Root: root, Listen: "127.0.0.1:0", InsecureLoopback: true, Token: testToken, PeerTokenFile: peerToken,
		Tenant: TenantDefaults{BasePort: freeBase(t, 4), Settings: map[string]string{"fsync": "off"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startAgent starts an agent on cfg and registers its shutdown; the tenants'
// postmasters are stopped at the end of the test by stopTenants.
func startAgent(t testing.TB, cfg Config) *testAgent {
	t.Helper()
	if testing.Verbose() && cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{Agent: a, cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- a.Serve(ctx) }()
	ta.c, err = client.New(a.URL())
	if err != nil {
		t.Fatal(err)
	}
	ta.c = ta.c.WithToken(cfg.Token)
	if _, tc, err := cfg.transportTLS(); err != nil {
		t.Fatal(err)
	} else if tc != nil {
		ta.c = ta.c.WithTLS(tc)
	}
	t.Cleanup(ta.stop)
	return ta
}

// stop shuts the agent down (idempotent).
func (ta *testAgent) stop() {
	if ta.cancel == nil {
		return
	}
	ta.cancel()
	<-ta.done
	ta.cancel = nil
}

// stopTenants stops every postmaster under root's tenants directory.
func stopTenants(t testing.TB, root string) {
	t.Helper()
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(root, "tenants", "*"))
		for _, d := range dirs {
			c, err := pgcluster.Open(d, pgcluster.Options{Port: 1})
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			c.Stop(ctx, pgcluster.Immediate)
			cancel()
		}
	})
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func catalogTenant(id int64, dir string, port int, state string) catalog.Tenant {
	return catalog.Tenant{ID: id, Name: fmt.Sprint("t", id), Dir: dir, Port: port, State: catalog.State(state)}
}

func waitTick() <-chan time.Time { return time.After(50 * time.Millisecond) }
