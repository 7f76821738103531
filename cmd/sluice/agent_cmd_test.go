package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/agent"
)

// TestAgentCommandsBadInput: tenant and migrate commands refuse bad input
// with one line on stderr and exit 2; an unreachable agent is exit 1.
func TestAgentCommandsBadInput(t *testing.T) {
	root := t.TempDir()
	a, err := agent.New(agent.Config{Name: "c1", Root: filepath.Join(root, "a"), Listen: "127.0.0.1:0",
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
		{"migrate unreachable agent", []string{"migrate", "--agent", "127.0.0.1:1", "--tenant", "1", "--to", "c2"}, 1, "connection refused"},
		{"tenant show unknown", []string{"tenant", "show", "4", "--agent", url}, 2, "unknown tenant 4"},
		{"tenant start bad id", []string{"tenant", "start", "x", "--agent", url}, 2, "bad tenant id"},
		{"tenant create bad set", []string{"tenant", "create", "--set", "novalue", "--agent", url}, 2, "key=value"},
		{"tenant create reserved", []string{"tenant", "create", "--set", "port=5", "--agent", url}, 2, "set by the agent"},
		{"tenant bad agent url", []string{"tenant", "list", "--agent", "ftp://x"}, 2, "bad agent URL"},
		{"agent no config", []string{"agent"}, 2, "--config"},
		{"agent bad config", []string{"agent", "--config", badCfg}, 2, "nonsense"},
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
	var reset func(c *cobra.Command)
	reset = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if sv, ok := f.Value.(pflag.SliceValue); ok {
					sv.Replace(nil)
				} else if err := f.Value.Set(f.DefValue); err != nil {
					t.Fatalf("reset --%s: %v", f.Name, err)
				}
				f.Changed = false
			})
		}
		for _, sub := range c.Commands() {
			reset(sub)
		}
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "agent", "tenant", "migrate":
			reset(c)
		}
	}
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}
