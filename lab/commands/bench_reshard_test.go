package commands

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/internal/testbin"
)

// TestBenchReshard runs `sluice bench reshard --quick` on one scenario
// with two methods and checks that every key of the contract is printed,
// every method's change done, its ledger verified (nothing missing or
// duplicated) and its keyspace check passed, and the output files are
// written. No figure is
// judged. It skips only when the agent answers that its reconfiguration
// driver is not built.
func TestBenchReshard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups and PostgreSQL as the postgres user: needs root")
	}
	out := t.TempDir()
	cmd := exec.Command(testbin.Sluice(t), "bench", "reshard", "--scenario", "expand", "--quick",
		"--methods", "squall,controlled", "--mpl", "4", "--out", out, "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), experiment.ErrReshardNotBuilt.Error()) {
			t.Skipf("the agent cannot reconfigure yet: %s", lastLine(stderr.String()))
		}
		t.Fatalf("bench reshard: %v\n%s", err, stderr.String())
	}
	var got struct {
		Scenario string           `json:"scenario"`
		Workload string           `json:"workload"`
		Methods  []map[string]any `json:"methods"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v in %q", err, stdout.String())
	}
	if got.Scenario != "expand" || got.Workload != "ycsb" || len(got.Methods) != 2 {
		t.Fatalf("scenario %q, workload %q, %d methods; want expand, ycsb, 2", got.Scenario, got.Workload, len(got.Methods))
	}
	keys := []string{"method", "reconfig_seconds", "pre_tps", "mean_tps_during", "min_tps_1s", "zero_commit_seconds",
		"p99_ms_before", "p99_ms_during", "writes_acknowledged", "writes_missing", "writes_duplicated"}
	for _, m := range got.Methods {
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("method %v: no %s", m["method"], k)
			}
		}
		if m["writes_missing"] != 0.0 || m["writes_duplicated"] != 0.0 || m["ledger_ok"] != true || m["keyspace_check_ok"] != true {
			t.Errorf("method %v: missing %v, duplicated %v, ledger OK %v, keyspace check OK %v (%v)",
				m["method"], m["writes_missing"], m["writes_duplicated"], m["ledger_ok"], m["keyspace_check_ok"], m["verdict"])
		}
		if m["phase"] != "done" {
			t.Errorf("method %v: phase %v, want done (finished %v; error %v)", m["method"], m["phase"], m["finished"], m["error"])
		}
		if w, _ := m["writes_acknowledged"].(float64); w <= 0 {
			t.Errorf("method %v: no write acknowledged", m["method"])
		}
	}
	for _, f := range []string{experiment.SeriesFile, experiment.ReshardStatusFile, experiment.SummaryFile, experiment.ReportFile, experiment.ReshardPNG} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}
