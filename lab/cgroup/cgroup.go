// Package cgroup puts processes into cgroup v1 groups and limits their
// memory, CPU and block I/O: the tenant postmasters of benchmarks, so that
// the OS page cache cannot hide a cold buffer cache, and (later) the closed
// loop's experiments with a CPU- or I/O-starved server.
//
// A Group is a directory of the same name under each controller it uses
// (Root/memory/<name>, Root/cpu/<name>, Root/blkio/<name>). Processes added
// to it stay there, and children they fork afterwards inherit it. Remove moves
// remaining processes back to the controllers' root groups and removes the
// directories. Needs root and cgroup v1 controllers mounted at Root.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where the cgroup v1 controllers are mounted.
var Root = "/sys/fs/cgroup"

// Controllers a Group uses.
var Controllers = []string{"memory", "cpu", "blkio"}

// Group is one cgroup v1 group across Controllers.
type Group struct {
	Name string
}

// New creates group name (a single path element) under every controller.
// An existing group of that name is reused.
func New(name string) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad group name %q", name)
	}
	g := &Group{Name: name}
	for _, c := range Controllers {
		if _, err := os.Stat(filepath.Join(Root, c)); err != nil {
			return nil, fmt.Errorf("cgroup: controller %s not mounted under %s (cgroup v1 needed): %w", c, Root, err)
		}
		if err := os.Mkdir(g.path(c), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup: create %s: %w", g.path(c), err)
		}
	}
	return g, nil
}

func (g *Group) path(controller string, file ...string) string {
	return filepath.Join(append([]string{Root, controller, g.Name}, file...)...)
}

func (g *Group) write(controller, file, value string) error {
	if err := os.WriteFile(g.path(controller, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: %s/%s = %s: %w", g.Name, file, value, err)
	}
	return nil
}

func (g *Group) readInt(controller, file string) (int64, error) {
	b, err := os.ReadFile(g.path(controller, file))
	if err != nil {
		return 0, fmt.Errorf("cgroup: read %s: %w", file, err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// SetMemoryLimit caps the group's memory, page cache included, in bytes
// (memory.limit_in_bytes). The kernel reclaims the group's page cache first
// when it reaches the cap.
func (g *Group) SetMemoryLimit(bytes int64) error {
	if bytes <= 0 {
		return fmt.Errorf("cgroup: memory limit %d must be positive", bytes)
	}
	return g.write("memory", "memory.limit_in_bytes", strconv.FormatInt(bytes, 10))
}

// MemoryUsage returns the group's current memory use in bytes (memory.usage_in_bytes).
func (g *Group) MemoryUsage() (int64, error) { return g.readInt("memory", "memory.usage_in_bytes") }

// SetCPUQuota lets the group use quota of CPU time per period
// (cpu.cfs_quota_us / cpu.cfs_period_us); quota 2×period is two cores.
// quota <= 0 removes the cap.
func (g *Group) SetCPUQuota(period, quota time.Duration) error {
	if period < time.Millisecond || period > time.Second {
		return fmt.Errorf("cgroup: CPU period %s outside 1ms..1s", period)
	}
	if err := g.write("cpu", "cpu.cfs_period_us", strconv.FormatInt(period.Microseconds(), 10)); err != nil {
		return err
	}
	q := int64(-1)
	if quota > 0 {
		q = quota.Microseconds()
	}
	return g.write("cpu", "cpu.cfs_quota_us", strconv.FormatInt(q, 10))
}

// SetCPUShares sets the group's CPU weight against its siblings
// (cpu.shares; every task of the root group counts 1024): when the CPU is
// contended the group gets a share in that proportion, within its quota.
// shares must be in 2..262144.
func (g *Group) SetCPUShares(shares int64) error {
	if shares < 2 || shares > 262144 {
		return fmt.Errorf("cgroup: CPU shares %d outside 2..262144", shares)
	}
	return g.write("cpu", "cpu.shares", strconv.FormatInt(shares, 10))
}

// SetIOLimit caps reads and writes on block device "major:minor" in bytes/s
// (blkio.throttle.read_bps_device / write_bps_device); 0 removes a cap.
// Buffered writes are throttled only when written back on behalf of the group.
func (g *Group) SetIOLimit(device string, readBPS, writeBPS int64) error {
	if _, _, ok := strings.Cut(device, ":"); !ok {
		return fmt.Errorf("cgroup: device %q is not major:minor", device)
	}
	if err := g.write("blkio", "blkio.throttle.read_bps_device", fmt.Sprintf("%s %d", device, readBPS)); err != nil {
		return err
	}
	return g.write("blkio", "blkio.throttle.write_bps_device", fmt.Sprintf("%s %d", device, writeBPS))
}

// SetIOPSLimit caps read and write operations per second on block device
// "major:minor" (blkio.throttle.read_iops_device / write_iops_device), e.g.
// a cloud volume's 3000 IOPS; 0 removes a cap.
func (g *Group) SetIOPSLimit(device string, readIOPS, writeIOPS int64) error {
	if _, _, ok := strings.Cut(device, ":"); !ok {
		return fmt.Errorf("cgroup: device %q is not major:minor", device)
	}
	if err := g.write("blkio", "blkio.throttle.read_iops_device", fmt.Sprintf("%s %d", device, readIOPS)); err != nil {
		return err
	}
	return g.write("blkio", "blkio.throttle.write_iops_device", fmt.Sprintf("%s %d", device, writeIOPS))
}

// DeviceOf returns the "major:minor" of the block device holding path, for
// SetIOLimit/SetIOPSLimit. Paths on virtual file systems (major 0: tmpfs,
// overlay) have no block device to throttle: an error.
func DeviceOf(path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	major, minor := (st.Dev>>8)&0xfff|(st.Dev>>32)&^0xfff, st.Dev&0xff|(st.Dev>>12)&^0xff
	if major == 0 {
		return "", fmt.Errorf("cgroup: %s is on a virtual file system (device 0:%d), not a block device", path, minor)
	}
	return fmt.Sprintf("%d:%d", major, minor), nil
}

// AddPID moves process pid (all its threads) into the group in every controller.
func (g *Group) AddPID(pid int) error {
	for _, c := range Controllers {
		if err := g.write(c, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// PIDs lists the processes in the group (memory controller).
func (g *Group) PIDs() ([]int, error) {
	b, err := os.ReadFile(g.path("memory", "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// Remove moves the group's processes to the root groups and removes the
// group's directories. Removing a group that does not exist is not an error.
func (g *Group) Remove() error {
	var errs []error
	for _, c := range Controllers {
		b, err := os.ReadFile(g.path(c, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			// A process may exit meanwhile: ignore its error.
			os.WriteFile(filepath.Join(Root, c, "cgroup.procs"), []byte(f), 0o644)
		}
		if err := os.Remove(g.path(c)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", g.path(c), err))
		}
	}
	return errors.Join(errs...)
}

// Children returns the pids whose parent is pid (from /proc/*/stat).
func Children(pid int) ([]int, error) {
	ms, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may contain spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil && pp == pid {
			if p, err := strconv.Atoi(strings.Fields(s)[0]); err == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// AddTree adds pid and its current children (e.g. a postmaster and the
// auxiliary processes it has already forked); later children inherit.
func (g *Group) AddTree(pid int) error {
	if err := g.AddPID(pid); err != nil {
		return err
	}
	kids, err := Children(pid)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := g.AddPID(k); err != nil && !isGone(k) {
			return err
		}
	}
	return nil
}

func isGone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err != nil
}

// ProcsFile is the group's cgroup.procs under controller: a process that
// writes its own pid there joins the group in that controller only (a
// workload sharing a server's disk cap, blkio, but not its CPU quota).
func (g *Group) ProcsFile(controller string) string { return g.path(controller, "cgroup.procs") }
