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

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// TestBenchRouter runs `sluice bench router --json` briefly (a built
// binary: the bench runs its own proxy command as a child) and checks that
// every key of the contract is printed, every ledger verdict is OK and the
// output files are written. No figure is judged.
func TestBenchRouter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("PostgreSQL runs as the postgres user: needs root")
	}
	out := t.TempDir()
	cmd := exec.Command(testbin.Sluice(t), "bench", "router", "--duration", "2s", "--rounds", "1", "--warmup", "0",
		"--records", "2000", "--tpcc-duration", "3s", "--mpl", "4", "--out", out, "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench router: %v\n%s", err, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v in %q", err, stdout.String())
	}
	for _, k := range []string{"direct_tps", "router_tps", "tenant_proxy_tps", "direct_p50_ms", "router_p50_ms", "distributed_tps", "distributed_fraction"} {
		if v, ok := got[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, got[k])
		}
	}
	if v, _ := got["tpcc_verdict"].(string); !strings.HasPrefix(v, "ledger OK") || got["tpcc_ok"] != true || got["ycsb_ledger_ok"] != true {
		t.Errorf("verdicts: tpcc %q, tpcc_ok %v, ycsb_ledger_ok %v", v, got["tpcc_ok"], got["ycsb_ledger_ok"])
	}
	for _, f := range []string{experiment.RouterCSV, experiment.SummaryFile, experiment.ReportFile, experiment.RouterPNG} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
