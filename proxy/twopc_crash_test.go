package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/pgcluster"
)

// A proxy killed (SIGKILL) inside a two-phase commit: the test binary runs
// itself as the proxy process (childProxy), which kills itself at the
// coordinator's fault point; a new proxy on the same decision log then
// resolves what the dead one left prepared.

const childEnv = "SLUICE_TEST_PROXY_CHILD"

// childConfig is what the child proxy runs with.
type childConfig struct {
	Routes   []RouteConfig      `json:"routes"`
	Keyspace *keyspace.Keyspace `json:"keyspace"`
	TxLog    string             `json:"txlog"`
	CrashAt  string             `json:"crash_at"`
}

// runChildProxy serves as the child when the environment says so; it never
// returns then.
func runChildProxy() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	if err := cc.Keyspace.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", InsecureNoAuth: true,
		Users: map[string]string{"postgres": testPassword}, Routes: cc.Routes,
		Keyspaces: []*keyspace.Keyspace{cc.Keyspace}, TxLog: cc.TxLog,
		TwoPCHook: func(point string) {
			if point == cc.CrashAt {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	if err := p.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Println(p.Addr())
	select {}
}

// startChildProxy runs the test binary as a proxy that dies at crashAt.
func startChildProxy(t *testing.T, r *ksRig, txlog, crashAt string) (addr string, cmd *exec.Cmd) {
	t.Helper()
	cc, _ := json.Marshal(childConfig{Routes: []RouteConfig{{Tenant: "t1", Addr: r.c1.Addr(), Database: "postgres"},
		{Tenant: "t2", Addr: r.c2.Addr(), Database: "postgres"}}, Keyspace: r.ks, TxLog: txlog, CrashAt: crashAt})
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cc))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child proxy: %v", err)
	}
	return strings.TrimSpace(line), cmd
}

func preparedCount(t *testing.T, c *pgcluster.Cluster) int {
	t.Helper()
	conn := direct(t, c)
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTwoPhaseCommitSurvivesProxyKill(t *testing.T) {
	for _, tc := range []struct {
		crashAt string
		want    string // v of keys 1 and 150 after recovery
	}{
		{"decided", "after"},   // the decision was logged: recovery commits
		{"prepared", "before"}, // nothing decided: recovery rolls back
	} {
		t.Run(tc.crashAt, func(t *testing.T) {
			r := newKsRig(t, false, nil)
			ctx := context.Background()
			seed := r.connect(t, pgx.QueryExecModeCacheStatement)
			for _, k := range []int{1, 150} {
				if _, err := seed.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, 'before')", k); err != nil {
					t.Fatal(err)
				}
			}
			txlog := filepath.Join(t.TempDir(), "txlog")
			addr, cmd := startChildProxy(t, r, txlog, tc.crashAt)
			conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:%s@%s/kv?sslmode=disable", testPassword, addr))
			if err != nil {
				t.Fatal(err)
			}
			tx, _ := conn.Begin(ctx)
			for _, k := range []int{1, 150} {
				if _, err := tx.Exec(ctx, "UPDATE kv SET v = 'after' WHERE k = $1", k); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err == nil {
				t.Fatal("COMMIT succeeded through a proxy that was to die in it")
			}
			cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child proxy ended with %v, want SIGKILL", cmd.ProcessState)
			}
			if n1, n2 := preparedCount(t, r.c1), preparedCount(t, r.c2); n1 != 1 || n2 != 1 {
				t.Fatalf("in doubt after the kill: %d and %d prepared, want 1 and 1", n1, n2)
			}
			// A new proxy on the same log resolves them at start.
			startProxy(t, r.c1, func(c *Config) {
				c.Routes = []RouteConfig{{Tenant: "t1", Addr: r.c1.Addr(), Database: "postgres"}, {Tenant: "t2", Addr: r.c2.Addr(), Database: "postgres"}}
				c.Keyspaces = []*keyspace.Keyspace{r.ks}
				c.TxLog = txlog
			})
			deadline := time.Now().Add(30 * time.Second)
			for preparedCount(t, r.c1)+preparedCount(t, r.c2) > 0 {
				if time.Now().After(deadline) {
					t.Fatal("in-doubt transactions not resolved in 30 s")
				}
				time.Sleep(100 * time.Millisecond)
			}
			on1, on2 := rowsOn(t, r.c1), rowsOn(t, r.c2)
			if on1[1] != tc.want || on2[150] != tc.want {
				t.Errorf("after recovery: k=1 %q, k=150 %q; want %q on both", on1[1], on2[150], tc.want)
			}
		})
	}
}
