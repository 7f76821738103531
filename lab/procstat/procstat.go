// Package procstat reads what a process holds from Linux's /proc: its
// resident memory (VmRSS in /proc/PID/status) and its open file
// descriptors (the entries of /proc/PID/fd). A soak compares them at the
// start and the end of a run to find leaks.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is one reading of a process.
type Usage struct {
	RSSBytes int64 // VmRSS: resident set, bytes
	FDs      int   // open file descriptors
}

// Root is the proc file system Read reads; a variable for tests.
var Root = "/proc"

// Read reads process pid's Usage. A process that has exited (or that this
// process may not inspect) is an error.
func Read(pid int) (Usage, error) {
	dir := filepath.Join(Root, strconv.Itoa(pid))
	st, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: %w", err)
	}
	rss, err := ParseVmRSS(st)
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: %w", err)
	}
	return Usage{RSSBytes: rss, FDs: len(fds)}, nil
}

// ParseVmRSS returns the VmRSS line of a /proc/PID/status text, bytes (the
// kernel prints it in kB, 1024 bytes).
func ParseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want \"<n> kB\"", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("VmRSS line %q: bad number", sc.Text())
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmRSS line (a kernel thread or a zombie)")
}
