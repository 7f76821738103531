package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProductDoesNotImportLab: no package outside lab/ (and this command,
// which attaches the lab's command group) depends on a lab package, directly
// or through another package. The lab measures the product; the product must
// build and run without it.
func TestProductDoesNotImportLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "github.com/sluicedb/sluice/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluicedb/sluice/"
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if strings.HasPrefix(pkg, mod+"lab/") || pkg == mod+"cmd/sluice" {
			continue
		}
		checked++
		for _, d := range f[1:] {
			if strings.HasPrefix(d, mod+"lab/") {
				t.Errorf("product package %s depends on lab package %s", strings.TrimPrefix(pkg, mod), strings.TrimPrefix(d, mod))
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d product packages; go list printed:\n%s", checked, out)
	}
}
