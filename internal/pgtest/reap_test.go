package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestReapOrphans: a test directory whose owner process is gone is removed
// and the process in its postmaster.pid gets SIGQUIT; one whose owner lives
// is left alone.
func TestReapOrphans(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(orphan)
	live, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	// A stand-in for a leaked postmaster: it must receive SIGQUIT.
	pm := exec.Command("sleep", "60")
	if err := pm.Start(); err != nil {
		t.Fatal(err)
	}
	defer pm.Process.Kill()
	os.MkdirAll(filepath.Join(orphan, "data"), 0o755)
	os.WriteFile(filepath.Join(orphan, "data", "postmaster.pid"), []byte(strconv.Itoa(pm.Process.Pid)+"\n"), 0o644)
	os.WriteFile(orphan+ownerSuffix, []byte(strconv.Itoa(dead.Process.Pid)), 0o644)
	os.WriteFile(live+ownerSuffix, []byte(strconv.Itoa(os.Getpid())), 0o644)
	defer os.Remove(live + ownerSuffix)

	reapOrphans()

	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphaned directory still there: %v", err)
	}
	if _, err := os.Stat(orphan + ownerSuffix); !os.IsNotExist(err) {
		t.Errorf("orphan's owner file still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live owner's directory was removed: %v", err)
	}
	err = pm.Wait()
	if ws, ok := pm.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGQUIT {
		t.Errorf("leaked postmaster stand-in ended with %v, want SIGQUIT", err)
	}
}
