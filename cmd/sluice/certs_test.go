package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/agent"
)

// TestCertsCommands: certs init and issue make a CA and certificates; bad
// input is refused with one line and exit 2, writing nothing.
func TestCertsCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if code, out, errs := agentRunCLI(t, "certs", "init", dir, "--json"); code != 0 || !strings.Contains(out, "ca.key") {
		t.Fatalf("certs init: exit %d %q %q", code, out, errs)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key: %v %v", fi, err)
	}
	code, out, errs := agentRunCLI(t, "certs", "issue", "--ca", dir, "--name", "db1", "--host", "127.0.0.1,db1.example.net", "--json")
	var files map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &files) != nil || files["cert"] != filepath.Join(dir, "db1.crt") {
		t.Fatalf("certs issue: exit %d %q %q", code, out, errs)
	}
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"init again", []string{"certs", "init", dir}, "ca.crt: exists (--force replaces it)"},
		{"issue again", []string{"certs", "issue", "--ca", dir, "--name", "db1", "--host", "127.0.0.1"}, "db1.crt: exists"},
		{"issue without CA", []string{"certs", "issue", "--ca", filepath.Join(empty, "none"), "--name", "x", "--host", "h", "--out", empty}, "sluice certs init"},
		{"issue no --ca", []string{"certs", "issue", "--name", "x", "--host", "h"}, "--ca is required"},
		{"issue no --name", []string{"certs", "issue", "--ca", dir, "--host", "h"}, "--name is required"},
		{"issue host with port", []string{"certs", "issue", "--ca", dir, "--name", "x", "--host", "db1:7001", "--out", empty}, `host "db1:7001": want a DNS name or an IP address`},
		{"issue no host", []string{"certs", "issue", "--ca", dir, "--name", "x", "--out", empty}, "no host"},
		{"issue bad name", []string{"certs", "issue", "--ca", dir, "--name", "a/b", "--client", "--out", empty}, `name "a/b"`},
		{"init no dir", []string{"certs", "init"}, "accepts 1 arg"},
	} {
		code, _, msg := agentRunCLI(t, tc.args...)
		if code != 2 || !strings.Contains(msg, tc.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2, one line containing %q", tc.name, code, msg, tc.want)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("refused requests wrote %d files", len(ents))
	}
}

// TestCLIMutualTLS: an agent with certificates of `sluice certs` answers
// the CLI that presents a client certificate of its CA (--cert/--key/--ca,
// or $SLUICE_CERT/$SLUICE_KEY/$SLUICE_CA) and refuses one without a
// certificate or with another CA's.
func TestCLIMutualTLS(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir, other := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "other")
	for _, args := range [][]string{
		{"certs", "init", dir}, {"certs", "issue", "--ca", dir, "--name", "db1", "--host", "127.0.0.1"},
		{"certs", "issue", "--ca", dir, "--name", "ops", "--client"},
		{"certs", "init", other}, {"certs", "issue", "--ca", other, "--name", "stranger", "--client"},
	} {
		if code, _, errs := agentRunCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errs)
		}
	}
	ca := filepath.Join(dir, "ca.crt")
	a, err := agent.New(agent.Config{Name: "m1", Root: filepath.Join(t.TempDir(), "a"), Listen: "127.0.0.1:0",
		TLSCert: filepath.Join(dir, "db1.crt"), TLSKey: filepath.Join(dir, "db1.key"), TLSCA: ca,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	url := a.URL()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("agent URL %s", url)
	}
	list := []string{"tenant", "list", "--agent", url}
	ops := []string{"--cert", filepath.Join(dir, "ops.crt"), "--key", filepath.Join(dir, "ops.key"), "--ca", ca}
	if code, out, errs := agentRunCLI(t, append(list, ops...)...); code != 0 {
		t.Fatalf("with the client certificate: exit %d %q %q", code, out, errs)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no certificate", []string{"--ca", ca}, "certificate required"},
		{"another CA's certificate", []string{"--cert", filepath.Join(other, "stranger.crt"), "--key", filepath.Join(other, "stranger.key"), "--ca", ca}, "unknown certificate authority"},
		{"no CA: the agent's certificate is not trusted", nil, "certificate signed by unknown authority"},
	} {
		code, _, msg := agentRunCLI(t, append(list, tc.args...)...)
		if code == 0 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal containing %q", tc.name, code, msg, tc.want)
		}
	}
	if code, _, msg := agentRunCLI(t, append(list, "--cert", filepath.Join(dir, "ops.crt"), "--ca", ca)...); code != 2 || !strings.Contains(msg, "go together") {
		t.Errorf("--cert without --key: exit %d %q, want 2", code, msg)
	}
	t.Setenv("SLUICE_CERT", filepath.Join(dir, "ops.crt"))
	t.Setenv("SLUICE_KEY", filepath.Join(dir, "ops.key"))
	t.Setenv("SLUICE_CA", ca)
	if code, out, errs := agentRunCLI(t, list...); code != 0 {
		t.Errorf("with $SLUICE_CERT, $SLUICE_KEY, $SLUICE_CA: exit %d %q %q", code, out, errs)
	}
}
