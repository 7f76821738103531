package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/internal/pgtest"
)

// TestExitCodes is the exit-code contract (internal/cli): 2 when the
// command or its request is wrong — bad flags or arguments, a bad agent
// config, an agent's refusal (4xx) — with nothing changed; 1 when a right
// command could not be carried out — an agent, or the target agent behind
// it, unreachable, a port in use. Each with one line on stderr. A real
// agent on PostgreSQL 15 serves a running tenant whose target peer is down.
func TestExitCodes(t *testing.T) {
	dir := pgtest.TempDir(t)
	down := "http://" + closedAddr(t)
	a := startCmdAgent(t, "x1", filepath.Join(dir, "x1"), "127.0.0.1:0", map[string]string{"down": down})
	url := a.URL()
	if code, _, errs := agentRunCLI(t, "tenant", "create", "--agent", url); code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, errs)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	config := func(name, body string) string {
		p := filepath.Join(dir, name+".json")
		if !strings.Contains(body, "tls") && !strings.HasPrefix(body, "!") {
			body = `"insecure_loopback":true,` + body
		}
		body = strings.TrimPrefix(body, "!")
		if err := os.WriteFile(p, []byte(`{"name":"c","root":"`+filepath.Join(dir, "root-"+name)+`",`+body+`}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	model := func(name, body string) string {
		p := filepath.Join(dir, name+"-model.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return `"interference_model":"` + p + `"`
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"migration", "list", "--agentt", url}, 2, "unknown flag: --agentt"},
		{"rate under the floor", []string{"migration", "rate", "m1", "1kB/s", "--agent", url}, 2, "1kB/s is under the least rate, 64KiB/s"},
		{"rate negative", []string{"migration", "rate", "m1", "-1MB/s", "--agent", url}, 2, `invalid rate "-1MB/s": must not be negative`},
		{"rate negative, flags after", []string{"migration", "rate", "m1", "-0.5MB/s", "--json", "--agent", url}, 2, "must not be negative"},
		{"rate negative after --", []string{"migration", "rate", "--agent", url, "m1", "--", "-1MB/s"}, 2, "must not be negative"},
		{"other unknown shorthand", []string{"migration", "rate", "m1", "-x", "--agent", url}, 2, "unknown shorthand flag: 'x' in -x"},
		{"migrate rate under the floor", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "down", "--rate", "1kB/s"}, 2, "--rate 1000 bytes/s is under the least rate"},
		{"agent refuses: unknown migration", []string{"migration", "show", "m1", "--agent", url}, 2, `unknown migration "m1"`},
		{"agent refuses: bad settings", []string{"tenant", "create", "--set", "shared_buffers=lots", "--agent", url}, 2, `invalid value for parameter "shared_buffers": "lots"`},
		{"agent config: listen", []string{"agent", "--config", config("listen", `"listen":"7001"`)}, 2, `listen "7001": want host:port`},
		{"agent config: os_user", []string{"agent", "--config", config("user", `"os_user":"nosuchuser"`)}, 2, `os_user "nosuchuser"`},
		{"agent config: shared_buffers", []string{"agent", "--config", config("sb", `"tenant":{"shared_buffers":"lots"}`)}, 2, "tenant.shared_buffers: invalid value"},
		{"agent config: no certificates", []string{"agent", "--config", config("plain", `!"listen":"127.0.0.1:0"`)}, 2, "no tls_cert, tls_key and tls_ca: the API requires mutual TLS"},
		{"agent --insecure-loopback off loopback", []string{"agent", "--config", config("wild", `!"listen":"0.0.0.0:0"`), "--insecure-loopback"}, 2, `insecure_loopback: listen "0.0.0.0:0" is not a loopback address`},
		{"agent config: certificate without CA", []string{"agent", "--config", config("noca", `"listen":"127.0.0.1:0","tls_cert":"/c.pem","tls_key":"/k.pem"`)}, 2, "tls_cert, tls_key, tls_ca"},
		{"agent config: model missing", []string{"agent", "--config", config("nomodel", `"interference_model":"`+filepath.Join(dir, "none.json")+`"`)}, 2, "interference_model: interference model: open "},
		{"agent config: model malformed", []string{"agent", "--config", config("badmodel", model("bad", `{"kind": "sluice-interference-model", "coef": [1,`))}, 2, "bad-model.json: not a model file"},
		{"agent config: model for other features", []string{"agent", "--config", config("othermodel", model("other", `{"kind":"sluice-interference-model","features":["iops","util"],"intercept":0,"coef":[1,2],"mean":[0,0],"scale":[1,1]}`))}, 2, "model is for features [iops, util]"},
		{"agent unreachable", []string{"migration", "list", "--agent", closedAddr(t)}, 1, "connection refused"},
		{"dashboard: agent unreachable", []string{"dashboard", "--agent", closedAddr(t)}, 1, "connection refused"},
		{"agent refuses: pause unknown migration", []string{"migration", "pause", "m1", "--agent", url}, 2, `unknown migration "m1"`},
		{"target agent down", []string{"migrate", "--agent", url, "--tenant", "1", "--to", "down"}, 1, "target agent down is unreachable"},
		{"agent listen address in use", []string{"agent", "--config", config("busy", `"listen":"`+busy.Addr().String()+`"`)}, 1, "address already in use"},
	} {
		code, _, msg := agentRunCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(msg, tc.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d, one line containing %q", tc.name, code, msg, tc.code, tc.want)
		}
	}
	// sluice dashboard prints the page's URL with the agent's token.
	if code, out, errs := agentRunCLI(t, "dashboard", "--agent", url); code != 0 || !strings.HasPrefix(out, url+"/ui/#token=") || len(strings.TrimSpace(out)) <= len(url+"/ui/#token=") {
		t.Errorf("dashboard: exit %d, %q %q; want the page's URL with the token", code, out, errs)
	}
	// The refused agent configs created nothing; the refusals changed no tenant.
	for _, name := range []string{"listen", "user", "sb", "busy", "plain", "wild", "noca", "nomodel", "badmodel", "othermodel"} {
		if _, err := os.Stat(filepath.Join(dir, "root-"+name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("agent config %s: root exists after the refusal (%v)", name, err)
		}
	}
	if code, out, _ := agentRunCLI(t, "tenant", "list", "--all", "--agent", url); code != 0 || strings.Count(out, "running") != 1 || strings.Contains(out, "deleted") {
		t.Errorf("tenants after the refusals: exit %d\n%s", code, out)
	}
}

// closedAddr is a loopback host:port nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
