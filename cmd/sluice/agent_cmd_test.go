package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestAgentCommandsBadInput: tenant and migrate commands refuse bad input
// with one line on stderr and exit 2; an unreachable agent is exit 1.
func TestAgentCommandsBadInput(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // where the agent registers its token
	root := t.TempDir()
	a, err := agent.New(agent.Config{Name: "c1", Root: filepath.Join(root, "a"), Listen: "127.0.0.1:0", InsecureLoopback: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	url := a.URL()

	badCfg := filepath.Join(root, "bad.json")
	os.WriteFile(badCfg, []byte(`{"name":"x","root":"/tmp/x","nonsense":1}`), 0o644)
	badAnalyze := filepath.Join(root, "bad-analyze.json")
	os.WriteFile(badAnalyze, []byte(`{"name":"x","root":"/tmp/x","analyze_after":"-1s"}`), 0o644)
	badProfile := filepath.Join(root, "bad-profile.yaml")
	os.WriteFile(badProfile, []byte("name: sluice\nkq: 1\n"), 0o644)
	reservedUsers := filepath.Join(root, "users.txt")
	os.WriteFile(reservedUsers, []byte(`"postgres" "secret"`+"\n"), 0o600)
	rangeProfile := filepath.Join(root, "range-profile.yaml")
	os.WriteFile(rangeProfile, []byte("ki: 0\n"), 0o644)

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"migrate unknown tenant", []string{"migrate", "--agent", url, "--tenant", "9", "--to", "c2"}, 2, "unknown tenant 9"},
		{"migrate no tenant", []string{"migrate", "--agent", url, "--to", "c2"}, 2, "--tenant"},
		{"migrate no target", []string{"migrate", "--agent", url, "--tenant", "1"}, 2, "--to"},
		{"migrate bad rate", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--rate", "fast"}, 2, "invalid rate"},
		{"migrate zero rate", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--rate", "0"}, 2, "never finish"},
		{"migrate bad mode", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--mode", "fly"}, 2, "--mode"},
		{"migrate bad checkpoint", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--checkpoint", "1m"}, 2, "--checkpoint"},
		{"migrate bad WAL relay", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--wal-relay", "middle"}, 2, "--wal-relay \"middle\""},
		{"migrate bad catch-up timeout", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--catch-up-timeout", "10ms"}, 2, "--catch-up-timeout \"10ms\""},
		{"migrate bad hold deadline", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--hold-deadline", "2m"}, 2, "--hold-deadline \"2m\""},
		{"migrate unreachable agent", []string{"migrate", "--agent", "127.0.0.1:1", "--tenant", "1", "--to", "c2"}, 1, "connection refused"},
		{"migrate max rate without setpoint", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--max-rate", "10MB/s"}, 2, "--max-rate goes with --setpoint"},
		{"migrate rate and setpoint", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "40ms", "--rate", "10MB/s"}, 2, "give one"},
		{"migrate bad setpoint", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "soon"}, 2, "--setpoint \"soon\""},
		{"migrate bad percentile", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "40ms", "--percentile", "p50"}, 2, "--percentile \"p50\""},
		{"migrate bad max rate", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "40ms", "--max-rate", "-5MB/s"}, 2, "--max-rate"},
		{"migrate unknown profile", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "40ms", "--profile", "turbo"}, 2, "neither a profile"},
		{"migrate bad profile file", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "40ms", "--profile", badProfile}, 2, "field kq not found"},
		{"migrate profile out of range", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--setpoint", "40ms", "--profile", rangeProfile}, 2, "ki must be > 0"},
		{"migrate bad deadline", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "c2", "--deadline", "never"}, 2, "--deadline \"never\""},
		{"tenant show unknown", []string{"tenant", "show", "4", "--agent", url}, 2, "unknown tenant 4"},
		{"tenant start bad id", []string{"tenant", "start", "x", "--agent", url}, 2, "bad tenant id"},
		{"tenant create bad set", []string{"tenant", "create", "--set", "novalue", "--agent", url}, 2, "key=value"},
		{"tenant create reserved", []string{"tenant", "create", "--set", "port=5", "--agent", url}, 2, "set by the agent"},
		{"tenant no token file", []string{"tenant", "list", "--agent", url, "--token-file", filepath.Join(root, "none")}, 2, "--token-file"},
		{"tenant create reserved user", []string{"tenant", "create", "--users", reservedUsers, "--agent", url}, 2, `"postgres" is reserved`},
		{"tenant bad agent url", []string{"tenant", "list", "--agent", "ftp://x"}, 2, "bad agent URL"},
		{"agent no config", []string{"agent"}, 2, "--config"},
		{"agent negative procs", []string{"agent", "--config", badCfg, "--procs", "-1"}, 2, "--procs"},
		{"migration show unknown", []string{"migration", "show", "nope", "--agent", url}, 2, `unknown migration "nope"`},
		{"migration rate unknown", []string{"migration", "rate", "nope", "5MB/s", "--agent", url}, 2, `unknown migration "nope"`},
		{"migration rate bad", []string{"migration", "rate", "nope", "quick", "--agent", url}, 2, "invalid rate"},
		{"migration abort unknown", []string{"migration", "abort", "nope", "--agent", url}, 2, `unknown migration "nope"`},
		{"agent bad config", []string{"agent", "--config", badCfg}, 2, "nonsense"},
		{"agent negative analyze_after", []string{"agent", "--config", badAnalyze}, 2, "analyze_after"},
	} {
		code, _, msg := agentRunCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(msg, tc.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d, one line containing %q", tc.name, code, msg, tc.code, tc.want)
		}
	}
	// Nothing was created.
	if code, out, errs := agentRunCLI(t, "tenant", "list", "--all", "--json", "--agent", url); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("tenant list after refusals: exit %d, %q %q", code, out, errs)
	}
}

// agentRunCLI runs the CLI after resetting every flag of the commands this
// file tests (cobra keeps flag values between invocations in one process).
func agentRunCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	for _, c := range root.Commands() {
		if err := cli.ResetFlags(c); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestTenantAndMigrateCommands drives two in-process agents through the CLI:
// tenant create/list, then migrate --json, whose one object carries the
// summary figures.
func TestTenantAndMigrateCommands(t *testing.T) {
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/postgres"); err != nil {
		t.Fatalf("PostgreSQL 15 is not installed: %v (make test installs it)", err)
	}
	// The agents register their token files here; the CLI and each agent
	// find the other's token there (package internal/auth).
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var urls [2]string
	names := []string{"m1", "m2"}
	for i := range urls {
		port, err := pgcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	for i, name := range names {
		startCmdAgent(t, name, filepath.Join(pgtest.TempDir(t), name), urls[i][len("http://"):], map[string]string{names[1-i]: urls[1-i]})
	}
	code, out, errs := agentRunCLI(t, "tenant", "create", "--name", "shop", "--agent", urls[0], "--json")
	if code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, errs)
	}
	var tn map[string]any
	if err := json.Unmarshal([]byte(out), &tn); err != nil || tn["state"] != "running" || tn["name"] != "shop" {
		t.Fatalf("tenant create --json = %s (%v)", out, err)
	}
	if code, out, _ = agentRunCLI(t, "tenant", "list", "--agent", urls[0]); code != 0 || !strings.Contains(out, "shop") || !strings.Contains(out, "running") {
		t.Fatalf("tenant list: exit %d:\n%s", code, out)
	}
	code, out, errs = agentRunCLI(t, "migrate", "--agent", urls[0], "--tenant", "1", "--to", urls[1], "--rate", "50MB/s", "--catch-up-timeout", "7m", "--hold-deadline", "250ms", "--json")
	if code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errs)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("migrate --json is not one object: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "tenant", "from", "to", "mode", "outcome", "bytes", "seconds", "freeze_ms", "downtime_ms"} {
		if _, ok := res[k]; !ok {
			t.Errorf("migrate --json lacks %q: %s", k, out)
		}
	}
	if res["outcome"] != "committed" || res["bytes"].(float64) <= 0 || res["freeze_ms"].(float64) <= 0 {
		t.Fatalf("migrate result %s", out)
	}
	// --catch-up-timeout and --hold-deadline reached the migration's record.
	if code, out, errs = agentRunCLI(t, "migration", "show", res["id"].(string), "--agent", urls[0], "--json"); code != 0 || !strings.Contains(out, `"catch_up_timeout_ns": 420000000000`) || !strings.Contains(out, `"hold_deadline_ns": 250000000`) {
		t.Fatalf("migration show after --catch-up-timeout 7m --hold-deadline 250ms: exit %d, want the record's catch_up_timeout_ns 420 s and hold_deadline_ns 250 ms\n%s%s", code, out, errs)
	}
	// A setpoint needs the proxy's latency: these agents have none, so it
	// is refused up front (exit 2) and nothing starts.
	if code, _, errs = agentRunCLI(t, "migrate", "--agent", urls[1], "--tenant", "1", "--to", urls[0], "--setpoint", "40ms", "--max-rate", "30MB/s"); code != 2 || !strings.Contains(errs, "no proxy") {
		t.Fatalf("migrate --setpoint without a proxy: exit %d: %s", code, errs)
	}
	// Human output of a second move back at a fixed rate: the start line
	// names it, a summary line goes to stdout.
	code, out, errs = agentRunCLI(t, "migrate", "--agent", urls[1], "--tenant", "1", "--to", urls[0], "--rate", "30MB/s")
	if code != 0 || !strings.Contains(out, "committed") || !strings.Contains(out, "freeze") || !strings.Contains(errs, "ETA") || !strings.Contains(errs, "done") || !strings.Contains(errs, "rate 30") {
		t.Fatalf("migrate back: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	if code, out, _ = agentRunCLI(t, "migration", "list", "--agent", urls[1]); code != 0 || strings.Count(out, "committed") != 2 {
		t.Fatalf("migration list: exit %d\n%s", code, out)
	}
	// Migrating it again onto the agent where it lives is bad input.
	if code, _, errs = agentRunCLI(t, "migrate", "--agent", urls[0], "--tenant", "1", "--to", urls[0]); code != 2 || !strings.Contains(errs, "is the source") {
		t.Fatalf("migrate to itself: exit %d: %s", code, errs)
	}
}

// freeTenantBase returns a base port whose tenant 1 port (base+1) is free,
// below the ephemeral range so outgoing connections do not take it.
func freeTenantBase(t *testing.T) int {
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(12000)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p - 1
		}
	}
	t.Fatal("no free port")
	return 0
}

// startCmdAgent runs an agent in this process on listen (host:port, or
// port 0) with root and peers, until the test ends, when it stops the
// agent and every tenant postmaster under root.
func startCmdAgent(t *testing.T, name, root, listen string, peers map[string]string) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{Name: name, Root: root, Listen: listen, Peers: peers, InsecureLoopback: true,
		Tenant: agent.TenantDefaults{BasePort: freeTenantBase(t), Settings: map[string]string{"fsync": "off"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		dirs, _ := filepath.Glob(filepath.Join(root, "tenants", "*"))
		for _, d := range dirs {
			if c, err := pgcluster.Open(d, pgcluster.Options{Port: 1}); err == nil {
				sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
				c.Stop(sctx, pgcluster.Immediate)
				scancel()
			}
		}
	})
	return a
}
