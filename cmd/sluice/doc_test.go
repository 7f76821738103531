package main

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/internal/cli"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md from the command tree")

// TestCLIReference: docs/cli.md is the command tree as it is (`make docs`
// rewrites it: go test ./cmd/sluice -run TestCLIReference -update).
func TestCLIReference(t *testing.T) {
	var b bytes.Buffer
	if err := cli.WriteReference(&b, root); err != nil {
		t.Fatal(err)
	}
	const path = "../../docs/cli.md"
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (make docs writes it)", err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("docs/cli.md is stale: run make docs (go test ./cmd/sluice -run TestCLIReference -update)")
	}
}

// TestMigrateFlags: `sluice migrate` offers the operator's decisions only.
func TestMigrateFlags(t *testing.T) {
	cmd, _, err := root.Find([]string{"migrate"})
	if err != nil {
		t.Fatal(err)
	}
	// Where and how to talk (agent, token, output) are not decisions
	// about the migration; the rest are, and they must stay few.
	talk := map[string]bool{"help": true, "agent": true, "token-file": true, "cert": true, "key": true, "ca": true, "json": true}
	n := 0
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if !talk[f.Name] {
			n++
		}
	})
	if n > 14 {
		t.Errorf("migrate has %d decision flags, want at most 14", n)
	}
}
