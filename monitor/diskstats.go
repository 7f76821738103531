// Package monitor turns raw signals into what the controllers are handed: the
// proxy's latency windows become control.Signals, and /proc/diskstats becomes
// control.HostIO. Parsing and differencing are pure functions of their inputs;
// the readers that touch /proc or the network are thin shells around them.
// A failed or missing read is a value carrying its error, never a silent zero.
package monitor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicedb/sluice/control"
)

// DiskCounters are one device's cumulative counters from /proc/diskstats.
type DiskCounters struct {
	ReadsCompleted  uint64
	SectorsRead     uint64
	WritesCompleted uint64
	SectorsWritten  uint64
	IOTicksMs       uint64 // milliseconds spent doing I/O (field 13: io_ticks)
}

// ErrNoBaseline is the HostIO error of the first sample: a rate needs two reads.
var ErrNoBaseline = errors.New("monitor: first diskstats sample, no rate yet")

// ParseDiskstats finds device in a /proc/diskstats listing.
func ParseDiskstats(r io.Reader, device string) (DiskCounters, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 14 || f[2] != device {
			continue
		}
		var v [11]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[3+i], 10, 64)
			if err != nil {
				return DiskCounters{}, fmt.Errorf("monitor: diskstats %s field %d: %w", device, 4+i, err)
			}
			v[i] = n
		}
		// reads, reads merged, sectors read, ms reading, writes, writes merged,
		// sectors written, ms writing, in flight, io_ticks, weighted ms
		return DiskCounters{ReadsCompleted: v[0], SectorsRead: v[2], WritesCompleted: v[4], SectorsWritten: v[6], IOTicksMs: v[9]}, nil
	}
	if err := sc.Err(); err != nil {
		return DiskCounters{}, fmt.Errorf("monitor: diskstats: %w", err)
	}
	return DiskCounters{}, fmt.Errorf("monitor: diskstats: no device %q", device)
}

// HostRates derives the Interference controller's features from two samples
// dt apart. Counters that went backwards (device reset) give an error.
func HostRates(prev, cur DiskCounters, dt time.Duration) control.HostIO {
	if dt <= 0 {
		return control.HostIO{Err: fmt.Errorf("monitor: non-positive interval %v", dt)}
	}
	if cur.ReadsCompleted < prev.ReadsCompleted || cur.WritesCompleted < prev.WritesCompleted || cur.IOTicksMs < prev.IOTicksMs ||
		cur.SectorsRead < prev.SectorsRead || cur.SectorsWritten < prev.SectorsWritten {
		return control.HostIO{Err: errors.New("monitor: diskstats counters went backwards")}
	}
	s := dt.Seconds()
	ticks := float64(cur.IOTicksMs-prev.IOTicksMs) / s // ms busy per s
	util := ticks / 1000
	if util > 1 {
		util = 1
	}
	return control.HostIO{
		IOPS:       float64((cur.ReadsCompleted-prev.ReadsCompleted)+(cur.WritesCompleted-prev.WritesCompleted)) / s,
		IOTicks:    ticks,
		Throughput: float64((cur.SectorsRead-prev.SectorsRead)+(cur.SectorsWritten-prev.SectorsWritten)) * 512 / s,
		Util:       util,
	}
}

// Host reads /proc/diskstats for one device and reports rates between
// successive calls. Safe for concurrent use.
type Host struct {
	Device string
	Path   string // default /proc/diskstats

	mu   sync.Mutex
	prev DiskCounters
	at   time.Time
}

// Sample reads the counters now (at is the caller's clock reading) and returns
// the rates since the previous Sample; the first call returns ErrNoBaseline.
func (h *Host) Sample(at time.Time) control.HostIO {
	path := h.Path
	if path == "" {
		path = "/proc/diskstats"
	}
	f, err := os.Open(path)
	if err != nil {
		return control.HostIO{Err: fmt.Errorf("monitor: %w", err)}
	}
	cur, err := ParseDiskstats(f, h.Device)
	f.Close()
	if err != nil {
		return control.HostIO{Err: err}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, prevAt := h.prev, h.at
	h.prev, h.at = cur, at
	if prevAt.IsZero() {
		return control.HostIO{Err: ErrNoBaseline}
	}
	return HostRates(prev, cur, at.Sub(prevAt))
}
