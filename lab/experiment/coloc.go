package experiment

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/fio"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/monitor"
)

// What the migration-buffering experiments (classifier.go, buffering.go)
// share: a tenant whose files are out of the page cache, a fio workload on
// the migration's source server's disk cap, and the host's disk sampled
// every second as the agent's interference controller samples it.

// DiskName is the /proc/diskstats name of the block device holding path
// (such as "vda"), as the interference controller's Device.
func DiskName(path string) (string, error) {
	dev, err := cgroup.DeviceOf(path)
	if err != nil {
		return "", err
	}
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 2 && fs[0]+":"+fs[1] == dev {
			return fs[2], nil
		}
	}
	return "", fmt.Errorf("experiment: device %s of %s is not in /proc/diskstats", dev, path)
}

// DropCache writes back and drops tenant t's files from the page cache on
// its current server (posix_fadvise DONTNEED on each file of its data
// directory after sync), so that its copy reads them from disk.
func DropCache(ctx context.Context, bed *testbed.Bed, t testbed.Tenant) error {
	from, id, err := bed.Owner(ctx, t)
	if err != nil {
		return err
	}
	ts, err := bed.Servers[from].Client.Tenants(ctx, false)
	if err != nil {
		return err
	}
	dir := ""
	for _, tn := range ts {
		if tn.ID == id {
			dir = tn.Dir
		}
	}
	if dir == "" {
		return fmt.Errorf("experiment: tenant %s has no data directory on %s", t.Name, bed.Servers[from].Name)
	}
	unix.Sync()
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // files come and go under a running server
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
}

// HostSample is the host's disk over the second ending T seconds after the
// sampler's start.
type HostSample struct {
	T  int
	IO control.HostIO
}

// hostSampler samples one disk every second from its start until stop.
type hostSampler struct {
	start time.Time
	mu    sync.Mutex
	out   []HostSample
	done  chan struct{}
	stop  context.CancelFunc
}

// sampleHost starts sampling device each second from now.
func sampleHost(ctx context.Context, device string) *hostSampler {
	ctx, cancel := context.WithCancel(ctx)
	h := &hostSampler{start: time.Now(), done: make(chan struct{}), stop: cancel}
	m := &monitor.Host{Device: device}
	m.Sample(h.start)
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for k := 1; ; k++ {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				io := m.Sample(now)
				h.mu.Lock()
				h.out = append(h.out, HostSample{T: k, IO: io})
				h.mu.Unlock()
			}
		}
	}()
	return h
}

// Stop ends sampling and returns the samples.
func (h *hostSampler) Stop() []HostSample {
	h.stop()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out
}

// fioRun is a fio workload running in the background.
type fioRun struct {
	done chan struct{}
	res  fio.Result
	err  error
}

// startFio runs w after delay in the background, in server s's blkio group
// (its disk cap) when it has one.
func startFio(ctx context.Context, w fio.Workload, s *testbed.Server, delay time.Duration) *fioRun {
	if s.Group != nil {
		w.ProcsFile = s.Group.ProcsFile("blkio")
	}
	r := &fioRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		select {
		case <-ctx.Done():
			r.err = ctx.Err()
			return
		case <-time.After(delay):
		}
		r.res, r.err = w.Run(ctx)
	}()
	return r
}

// wait returns the run's result once it ended.
func (r *fioRun) wait() (fio.Result, error) {
	<-r.done
	return r.res, r.err
}
