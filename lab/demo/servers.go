package demo

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluicedb/sluice/pgcluster"
)

// cpuShares is the cpu.shares weight of the servers and of the demo's own
// process (workload, proxy) against the host's other processes (1024 each),
// as the benchmarks' testbed uses it: a busy neighbour disturbs the demo
// less. The source's quota still caps it.
const cpuShares = 32768

// memoryMB caps each server's memory, page cache and files in memory
// (memRoot) included: room for the tenant's files twice over and the WAL, so
// the copy and the workload read from memory and never reach the cap.
func memoryMB(size int64) int {
	return int(2*size>>20) + 2048
}

// shmDir is the memory file system memRoot puts the servers' data in.
const shmDir = "/dev/shm"

// memRoot returns a new directory on shmDir for the servers' data, owned by
// the postgres user, or "" when shmDir is missing or it or the machine's
// available memory has less room than two servers' memory caps. The two
// servers share this machine, and on its one disk the target's writes (the
// copy landing) slow the source's: a disturbance no copy speed on the
// source causes, and one that real servers do not share. In memory the copy
// competes with the clients for the source's CPU alone.
func memRoot(size int64) (string, error) {
	need := 2 * int64(memoryMB(size)) << 20
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err != nil || int64(st.Bavail)*st.Bsize < need || memAvailable() < need {
		return "", nil
	}
	d, err := pgcluster.MkdirTempIn(shmDir, "sluice-demo-")
	if err != nil {
		return "", fmt.Errorf("demo: data directory for the postgres user: %w", err)
	}
	return d, nil
}

// memAvailable is the machine's MemAvailable (/proc/meminfo), bytes; 0 when
// unknown.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

func cpusText(c float64) string {
	if c < 0 {
		return "no CPU limit"
	}
	return fmt.Sprintf("%.2g CPU", c)
}
