package monitor

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUStat is a group's cumulative CFS bandwidth counters (cpu.stat): how many
// quota periods have elapsed while it had runnable tasks, in how many of them
// it ran out of quota and was throttled, and the total time its threads
// spent throttled (summed over CPUs, so it can exceed the wall time).
type CPUStat struct {
	Periods   int64         // nr_periods
	Throttled int64         // nr_throttled
	Time      time.Duration // throttled_time (v1), throttled_usec (v2)
}

// ParseCPUStat reads a cpu.stat listing ("nr_periods N" lines) of cgroup v1
// (throttled_time in ns) or v2 (throttled_usec).
// Missing keys stay 0; a malformed number is an error.
func ParseCPUStat(r io.Reader) (CPUStat, error) {
	var s CPUStat
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return CPUStat{}, fmt.Errorf("monitor: cpu.stat: %s: %w", f[0], err)
		}
		switch f[0] {
		case "nr_periods":
			s.Periods = v
		case "nr_throttled":
			s.Throttled = v
		case "throttled_time": // v1, ns
			s.Time = time.Duration(v)
		case "throttled_usec": // v2
			s.Time = time.Duration(v) * time.Microsecond
		}
	}
	return s, sc.Err()
}

// ReadCPUStat reads and parses the cpu.stat file at path (any group's, v1
// or v2).
func ReadCPUStat(path string) (CPUStat, error) {
	f, err := os.Open(path)
	if err != nil {
		return CPUStat{}, fmt.Errorf("monitor: %w", err)
	}
	defer f.Close()
	return ParseCPUStat(f)
}

// ThrottledShare is the share (0–1) of the quota periods between before and
// s in which the group was throttled: 1 means it wanted more CPU than its
// quota in every period. NaN when no period elapsed (no quota, or nothing
// ran) or the counters went backwards (the group was recreated).
func (s CPUStat) ThrottledShare(before CPUStat) float64 {
	dp, dt := s.Periods-before.Periods, s.Throttled-before.Throttled
	if dp <= 0 || dt < 0 {
		return math.NaN()
	}
	return float64(dt) / float64(dp)
}
