package commands

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/pgcluster"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// TestWorkloadCommands drives `sluice workload load`, `run --latency-listen
// --ledger --json` and `verify --json` against a real PostgreSQL 15: while
// the run goes, its clients' window is read over HTTP the way `sluice migrate
// --client-latency` reads it, and must agree with the run's own figures; the
// ledger it writes must verify with nothing missing or duplicated.
func TestWorkloadCommands(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	dsn := c.ConnString("postgres")
	dir := pgtest.TempDir(t)
	ledger := filepath.Join(dir, "ledger")

	code, out, errs := labRunCLI(t, "workload", "load", "--dsn", dsn, "--size", "2MB", "--json")
	if code != 0 {
		t.Fatalf("workload load: exit %d: %s", code, errs)
	}
	var loaded struct{ Rows, Bytes int64 }
	if err := json.Unmarshal([]byte(out), &loaded); err != nil || loaded.Rows == 0 {
		t.Fatalf("workload load --json: %q (%v)", out, err)
	}

	// A free loopback port for the window; the run binds it itself.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	type result struct {
		code      int
		out, errs string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := labRunCLI(t, "workload", "run", "--dsn", dsn, "--rate", "60", "--duration", "4s",
			"--latency-listen", addr, "--ledger", ledger, "--json")
		done <- result{code, out, errs}
	}()

	// Poll the window until it has transactions in it (or the run ends).
	var seen []proxyclient.Window
	var res result
poll:
	for {
		select {
		case res = <-done:
			break poll
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			continue // not listening yet
		}
		var ws []proxyclient.Window
		err = json.NewDecoder(resp.Body).Decode(&ws)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("window at %s: %v", addr, err)
		}
		if len(ws) == 1 && ws[0].Count > 0 && seen == nil {
			seen = ws
		}
	}
	if res.code != 0 {
		t.Fatalf("workload run: exit %d: %s", res.code, res.errs)
	}
	if !strings.Contains(res.errs, "http://"+addr+"/") {
		t.Errorf("workload run did not say where the window is served: %q", res.errs)
	}
	var sum workload.Summary
	if err := json.Unmarshal([]byte(res.out), &sum); err != nil {
		t.Fatalf("workload run --json: %q (%v)", res.out, err)
	}
	if sum.Transactions == 0 || sum.WritesAcked == 0 || sum.Errors != 0 {
		t.Fatalf("workload run summary: %+v", sum)
	}
	if seen == nil {
		t.Fatal("the clients' window was never served with transactions in it during the run")
	}
	w := seen[0]
	if w.WindowS != workload.DefaultWindow.Seconds() || w.Count > int(sum.Transactions) {
		t.Errorf("window %+v: want a %.0f s span of at most the run's %d transactions", w, workload.DefaultWindow.Seconds(), sum.Transactions)
	}
	// Latency is queue + execution: the mean covers the queue wait, and the
	// tail covers the mean.
	if w.MeanMS <= 0 || w.QueueMS < 0 || w.QueueMS > w.MeanMS || w.P99MS < w.MeanMS {
		t.Errorf("window %+v: want 0 <= queue <= mean <= p99, mean > 0", w)
	}
	// After the run the listener is gone.
	if resp, err := http.Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("window still served at %s after the run ended", addr)
	}

	code, out, errs = labRunCLI(t, "workload", "verify", "--dsn", dsn, "--ledger", ledger, "--json")
	if code != 0 {
		t.Fatalf("workload verify: exit %d: %s", code, errs)
	}
	var chk workload.Check
	if err := json.Unmarshal([]byte(out), &chk); err != nil {
		t.Fatalf("workload verify --json: %q (%v)", out, err)
	}
	if chk.Acknowledged != sum.WritesAcked || chk.Missing != 0 || chk.Duplicated != 0 {
		t.Errorf("verify %+v against a run that acknowledged %d writes", chk, sum.WritesAcked)
	}

	// Bad input: one line, exit 2, no run (the ledger is not rewritten).
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no port", []string{"--latency-listen", "localhost"}, "--latency-listen"},
		{"port taken", []string{"--latency-listen", busy.Addr().String()}, "--latency-listen"},
		{"distribution", []string{"--distribution", "gaussian"}, "--distribution"},
		{"no dsn", nil, "--dsn is required"},
	} {
		args := []string{"workload", "run", "--rate", "60", "--duration", "2s", "--ledger", filepath.Join(dir, "bad-"+strings.ReplaceAll(tc.name, " ", "-"))}
		if tc.name != "no dsn" {
			args = append(args, "--dsn", dsn)
		}
		code, out, errs := labRunCLI(t, append(args, tc.args...)...)
		msg := strings.TrimSpace(errs)
		if code != 2 || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and one line naming %s", tc.name, code, out, errs, tc.want)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "bad-*")); len(matches) != 0 {
		t.Errorf("refused runs wrote ledgers: %v", matches)
	}
}
