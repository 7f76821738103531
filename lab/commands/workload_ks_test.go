package commands

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestWorkloadKeyspaceCommands drives `sluice workload tpcc` and `ycsb`
// in direct mode over two real PostgreSQL 15 clusters with --json: each
// loads, runs, and reports a verdict with nothing lost, duplicated or
// misplaced; a malformed --partition is a usage error.
func TestWorkloadKeyspaceCommands(t *testing.T) {
	var parts []string
	for _, name := range []string{"p1", "p2"} {
		c := pgtest.New(t, pgcluster.Options{})
		parts = append(parts, "--partition", name+"="+c.ConnString("postgres"))
	}
	type out struct {
		Load struct {
			Rows map[string]int64 `json:"rows"`
		} `json:"load"`
		Run struct {
			Workload     string `json:"workload"`
			Transactions int64  `json:"transactions"`
			Verdict      struct {
				Acknowledged int64 `json:"writes_acknowledged"`
				Lost         int64 `json:"lost"`
				Duplicated   int64 `json:"duplicated"`
				Misplaced    int64 `json:"misplaced"`
			} `json:"verdict"`
		} `json:"run"`
	}
	for _, args := range [][]string{
		{"tpcc", "--warehouses", "2", "--customers", "30", "--items", "100"},
		{"ycsb", "--records", "1000", "--distribution", "hotspot", "--hot-move", "1s", "--insert-fraction", "0.1"},
	} {
		argv := append(append([]string{"workload"}, args...), parts...)
		argv = append(argv, "--rate", "40", "--mpl", "2", "--duration", "2s", "--json")
		code, stdout, stderr := labRunCLI(t, argv...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		var o out
		if err := json.Unmarshal([]byte(stdout), &o); err != nil {
			t.Fatalf("%v: %v in %q", args, err, stdout)
		}
		v := o.Run.Verdict
		if o.Run.Workload != args[0] || o.Run.Transactions == 0 || len(o.Load.Rows) == 0 || v.Acknowledged == 0 || v.Lost+v.Duplicated+v.Misplaced != 0 {
			t.Fatalf("%v: %s", args, stdout)
		}
	}
	code, _, stderr := labRunCLI(t, "workload", "ycsb", "--partition", "p1")
	if code != 2 || !strings.Contains(stderr, "NAME=DSN") {
		t.Fatalf("malformed --partition: exit %d, %q; want usage error", code, stderr)
	}
}
