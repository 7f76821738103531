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

// HostCPU is the machine's aggregate CPU time from the "cpu" line of
// /proc/stat, in clock ticks (USER_HZ) since boot. Steal is the time a
// virtual machine's CPUs were runnable but the hypervisor ran something
// else: on a shared host it slows every process at once, a load no
// migration rate made and none can take back.
type HostCPU struct {
	Total uint64 // every field of the line: user … steal (guest time is inside user)
	Steal uint64
}

// ParseHostCPU reads the aggregate "cpu" line of a /proc/stat listing.
// Kernels before 2.6.11 have no steal field: Steal is then 0.
func ParseHostCPU(r io.Reader) (HostCPU, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 5 {
			return HostCPU{}, fmt.Errorf("monitor: /proc/stat cpu line has %d fields, want at least 4 counters", len(f)-1)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest and guest_nice are already counted in user and nice.
		var c HostCPU
		for i, s := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return HostCPU{}, fmt.Errorf("monitor: /proc/stat cpu field %d: %w", i+1, err)
			}
			c.Total += n
			if i == 7 {
				c.Steal = n
			}
		}
		return c, nil
	}
	if err := sc.Err(); err != nil {
		return HostCPU{}, fmt.Errorf("monitor: /proc/stat: %w", err)
	}
	return HostCPU{}, fmt.Errorf("monitor: /proc/stat: no aggregate cpu line")
}

// ReadHostCPU reads /proc/stat now.
func ReadHostCPU() (HostCPU, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return HostCPU{}, fmt.Errorf("monitor: %w", err)
	}
	defer f.Close()
	return ParseHostCPU(f)
}

// StealShare is the share (0–1) of the CPU time between before and c that
// the hypervisor stole; NaN when no time passed or the counters went
// backwards (a different boot).
func (c HostCPU) StealShare(before HostCPU) float64 {
	if c.Total <= before.Total || c.Steal < before.Steal {
		return math.NaN()
	}
	return float64(c.Steal-before.Steal) / float64(c.Total-before.Total)
}

// HostCPUSample is a HostCPU reading and when it was taken.
type HostCPUSample struct {
	At  time.Time
	CPU HostCPU
}

// StealPeak is the largest share (0–1) of CPU time the hypervisor stole
// over any stretch of at least span between two of samples (taken in time
// order): the worst burst a run met, which a mean over the whole run
// dilutes (a minute at 35 % inside eight minutes at 2 % reads 8 %). A
// stretch starts at each sample and ends at the first sample at least span
// after it. NaN when no such stretch exists (fewer samples, or a run
// shorter than span) or no stretch's counters are usable.
func StealPeak(samples []HostCPUSample, span time.Duration) float64 {
	peak := math.NaN()
	j := 0
	for i := range samples {
		j = max(j, i+1)
		for j < len(samples) && samples[j].At.Sub(samples[i].At) < span {
			j++
		}
		if j == len(samples) {
			break
		}
		if s := samples[j].CPU.StealShare(samples[i].CPU); !math.IsNaN(s) && (math.IsNaN(peak) || s > peak) {
			peak = s
		}
	}
	return peak
}
