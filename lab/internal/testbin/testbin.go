// Package testbin builds the sluice binary once per test binary, for tests
// that run `sluice agent` (or other subcommands) as real subprocesses.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var built struct {
	once sync.Once
	path string
	err  error
}

// Sluice returns the path of a sluice binary built from this module's
// cmd/sluice (once; later calls reuse it). Remove removes it.
func Sluice(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", built.path, "github.com/sluicedb/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// Remove deletes the built binary; call it from TestMain after m.Run.
func Remove() {
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
}
