package monitor

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sluicedb/sluice/control"
)

// CgroupRoot is where the cgroup controllers are mounted.
var CgroupRoot = "/sys/fs/cgroup"

// ErrNoQuotaPeriods is the CPUQuota error of a step in which no CFS quota
// period elapsed: the group has no CPU quota, or nothing in it ran.
var ErrNoQuotaPeriods = errors.New("monitor: no CPU quota periods elapsed (no quota, or the group was idle)")

// errNoCPUBaseline is the error of CPUQuota's first sample: a share needs
// two reads.
var errNoCPUBaseline = errors.New("monitor: first cpu.stat sample, no share yet")

// CPUQuota reads one cgroup's CFS bandwidth counters (its cpu.stat) and
// reports, per Sample, the share of the quota's periods in which the group
// was throttled since the previous Sample. Safe for concurrent use.
type CPUQuota struct {
	// Stat is the group's cpu.stat: /sys/fs/cgroup/cpu/<group>/cpu.stat
	// (v1) or /sys/fs/cgroup/<group>/cpu.stat (v2). See OwnCPUStat.
	Stat string

	mu   sync.Mutex
	prev CPUStat
	have bool
}

// Sample reads the counters now and returns the throttled share since the
// previous Sample. The first call, a read error, counters that went backwards
// (the group was recreated) and a step without quota periods give Err.
func (q *CPUQuota) Sample() control.CPUQuota {
	cur, err := ReadCPUStat(q.Stat)
	if err != nil {
		return control.CPUQuota{Err: err}
	}
	q.mu.Lock()
	prev, have := q.prev, q.have
	q.prev, q.have = cur, true
	q.mu.Unlock()
	if !have {
		return control.CPUQuota{Err: errNoCPUBaseline}
	}
	share := cur.ThrottledShare(prev)
	if math.IsNaN(share) {
		return control.CPUQuota{Err: ErrNoQuotaPeriods}
	}
	return control.CPUQuota{Throttled: share}
}

// OwnCPUStat returns the cpu.stat of the cgroup this process runs in, read
// from /proc/self/cgroup: the cgroup v1 cpu controller's group under
// CgroupRoot, else the v2 group (under CgroupRoot or its "unified" mount).
// An agent started in its server's cgroup (beside its tenants) so finds the
// server's quota. It fails when no such file exists.
func OwnCPUStat() (string, error) { return cpuStatOf("/proc/self/cgroup", CgroupRoot) }

// cpuStatOf finds the cpu.stat of the groups listed in the file procCgroup
// (/proc/<pid>/cgroup's format, "id:controllers:path" per line) with the
// controllers mounted under root.
func cpuStatOf(procCgroup, root string) (string, error) {
	f, err := os.Open(procCgroup)
	if err != nil {
		return "", fmt.Errorf("monitor: %w", err)
	}
	defer f.Close()
	var v1, v2 []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = append(v2, filepath.Join(root, parts[2], "cpu.stat"), filepath.Join(root, "unified", parts[2], "cpu.stat"))
		case slices.Contains(strings.Split(parts[1], ","), "cpu"):
			v1 = append(v1, filepath.Join(root, "cpu", parts[2], "cpu.stat"))
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("monitor: %s: %w", procCgroup, err)
	}
	for _, p := range append(v1, v2...) {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("monitor: no cpu.stat for the cgroups in %s under %s", procCgroup, root)
}
