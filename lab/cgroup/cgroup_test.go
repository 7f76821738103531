package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// fakeRoot points Root at a temp dir laid out like cgroup v1 (plain files),
// so the file protocol is tested without privileges.
func fakeRoot(t *testing.T) {
	old := Root
	Root = t.TempDir()
	t.Cleanup(func() { Root = old })
	for _, c := range Controllers {
		os.MkdirAll(filepath.Join(Root, c), 0o755)
	}
}

func read(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFiles(t *testing.T) {
	fakeRoot(t)
	g, err := New("sluice-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryLimit(64 << 20); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(Root, "memory/sluice-test/memory.limit_in_bytes")); got != strconv.Itoa(64<<20) {
		t.Fatalf("memory limit file %q", got)
	}
	if err := g.SetCPUQuota(100*time.Millisecond, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(Root, "cpu/sluice-test/cpu.cfs_quota_us")); got != "50000" {
		t.Fatalf("cpu quota file %q", got)
	}
	if err := g.SetCPUShares(8192); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(Root, "cpu/sluice-test/cpu.shares")); got != "8192" {
		t.Fatalf("cpu shares file %q", got)
	}
	if err := g.SetIOLimit("8:0", 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(Root, "blkio/sluice-test/blkio.throttle.read_bps_device")); got != "8:0 1048576" {
		t.Fatalf("blkio file %q", got)
	}
	if err := g.SetIOPSLimit("8:0", 3000, 0); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(Root, "blkio/sluice-test/blkio.throttle.read_iops_device")); got != "8:0 3000" {
		t.Fatalf("blkio iops file %q", got)
	}
	if err := g.AddPID(1234); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(Root, "cpu/sluice-test/cgroup.procs")); got != "1234" {
		t.Fatalf("procs file %q", got)
	}
	for _, bad := range []func() error{
		func() error { return g.SetMemoryLimit(0) },
		func() error { return g.SetCPUQuota(0, time.Millisecond) },
		func() error { return g.SetIOLimit("sda", 1, 1) },
		func() error { return g.SetCPUShares(1) },
		func() error { _, err := New("a/b"); return err },
		func() error { _, err := New(""); return err },
	} {
		if bad() == nil {
			t.Fatal("bad input accepted")
		}
	}
}

// TestRealMemoryGroup uses the real cgroup v1 hierarchy when it is there
// (root on a v1 host): a process added to a group is listed in it.
func TestRealMemoryGroup(t *testing.T) {
	g := realGroup(t, "memory", "cgroup.procs", "sluice-test-")
	if err := g.SetMemoryLimit(256 << 20); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.AddTree(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := g.PIDs()
	if err != nil || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("PIDs = %v, %v; want %d", pids, err, cmd.Process.Pid)
	}
	if u, err := g.MemoryUsage(); err != nil || u < 0 {
		t.Fatalf("MemoryUsage = %d, %v", u, err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(Root, "memory", g.Name)); !os.IsNotExist(err) {
		t.Fatalf("group still there: %v", err)
	}
}

func TestChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var kids []int
	for i := 0; i < 200 && len(kids) == 0; i++ {
		kids, _ = Children(cmd.Process.Pid)
		time.Sleep(10 * time.Millisecond)
	}
	if len(kids) != 1 {
		t.Fatalf("children of sh: %v", kids)
	}
	for _, k := range kids {
		defer exec.Command("kill", strconv.Itoa(k)).Run()
	}
}

func TestDeviceOf(t *testing.T) {
	if _, err := DeviceOf("/proc"); err == nil {
		t.Fatal("DeviceOf(/proc) accepted a virtual file system")
	}
	if _, err := DeviceOf("/nonexistent/x"); err == nil {
		t.Fatal("DeviceOf of a missing path succeeded")
	}
}

// realGroup creates group prefix+pid in the real hierarchy, removed when the
// test ends. It skips the test unless it runs as root and the v1 controller's
// file (e.g. "memory", "cgroup.procs") is there.
func realGroup(t *testing.T, controller, file, prefix string) *Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(Root, controller, file)); err != nil {
		t.Skipf("no cgroup v1 %s controller", controller)
	}
	g, err := New(prefix + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	return g
}
