package commands

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the CPU time (user+system) of this process and of its waited-for
// children: sluice's sender and receiver, both tar processes, the
// pg_basebackup client (not the server backend that reads the files for it).
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// clockTick is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// treeCPU is the CPU time (user+system) of process pid, of its live
// children and of its children that have exited and been waited for: for
// the postmaster, everything the PostgreSQL cluster has spent (backends,
// walsenders, checkpointer...). Differences of two calls measure the work in
// between, also of backends that exited in between.
func treeCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of process %d: %w", pid, err)
	}
	_, total, err := procStatTicks(string(b), true)
	if err != nil {
		return 0, err
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile (then counted in the parent's cutime)
		}
		if ppid, t, err := procStatTicks(string(b), false); err == nil && ppid == pid {
			total += t
		}
	}
	return time.Duration(total) * clockTick, nil
}

// procStatTicks parses one /proc/<pid>/stat line: the parent's pid and the
// process's user+system CPU time in clock ticks, with its waited-for
// children's (cutime, cstime) added if withChildren.
func procStatTicks(stat string, withChildren bool) (ppid int, t int64, err error) {
	// The command name is in parentheses and may hold spaces and
	// parentheses: the fields start after the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	last := 12 // fields 14 utime, 15 stime
	if withChildren {
		last = 14 // and 16 cutime, 17 cstime
	}
	for _, s := range f[11 : last+1] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("malformed /proc stat %q", stat)
		}
		t += v
	}
	return ppid, t, nil
}

// loadAvg1 is the 1-minute load average, or -1 if unknown.
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// processCPU returns the CPU time (user+system) process pid has used so far,
// from /proc/PID/stat (10 ms resolution); 0 for pid 0 or when unreadable.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the ")" of the command name: utime and stime are the 12th and 13th.
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fs) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fs[11], 10, 64)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ = 100 on Linux
}
