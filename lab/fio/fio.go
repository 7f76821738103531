// Package fio runs co-located disk workloads with fio (Debian's package
// fio) and reads their throughput per second from fio's bandwidth log.
package fio

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Profile is a co-located disk workload run by fio (Debian's package fio):
// one of the migration-buffering thesis's three I/O workloads. Each is a
// closed loop, one I/O at a time with a think time between them, as a
// neighbour's application is: when its I/Os take longer it does less, and
// it never catches up afterwards (fio's rate limits do, which would hide
// the interference in a run's mean).
type Profile struct {
	Name string
	Desc string
	// Job is fio's options for the profile (direct I/O, its own file).
	Job []string
}

// Profiles are the thesis's workloads (§3.1, Fig. 9): fio's random read,
// a file server (filebench's fileserver: reads and writes of mixed sizes)
// and a video server (a sequential stream at about a fixed bit rate). The
// throughputs are alone under the lab's 32 MB/s disk cap.
var Profiles = []Profile{
	{Name: "randread", Desc: "random 4 KiB reads, one at a time, 0.3 ms think time (about 5 MB/s)",
		Job: []string{"--rw=randread", "--bs=4k", "--iodepth=1", "--thinktime=300"}},
	{Name: "fileserver", Desc: "random reads and writes 70/30 of 4-64 KiB, one at a time, 2 ms think time (about 10 MB/s)",
		Job: []string{"--rw=randrw", "--rwmixread=70", "--bsrange=4k-64k", "--iodepth=1", "--thinktime=2000"}},
	{Name: "videoserver", Desc: "a sequential stream of 1 MiB reads, 80 ms think time (about 11 MB/s)",
		Job: []string{"--rw=read", "--bs=1m", "--iodepth=1", "--thinktime=80000"}},
}

// ProfileNamed returns the profile called name.
func ProfileNamed(name string) (Profile, error) {
	var names []string
	for _, p := range Profiles {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("fio: unknown fio profile %q (want %s)", name, strings.Join(names, ", "))
}

// Workload runs one fio profile against its own file in Dir.
type Workload struct {
	Profile Profile
	// Dir holds the workload's file (on the disk under test) and fio's logs.
	Dir string
	// FileMB is the file's size, MiB; default 256.
	FileMB int
	// Duration is how long fio runs.
	Duration time.Duration
	// ProcsFile, if set, is a cgroup.procs file fio joins before it starts
	// (a server's blkio group: the workload then shares its disk cap).
	ProcsFile string
}

// Result is what one fio run did.
type Result struct {
	// Start is when fio was started (its log's time 0, within ~0.1 s).
	Start time.Time
	// PerSecond is the bytes/s read and written in each whole second since
	// Start (fio's bandwidth log at 1 s averages, summed over jobs and
	// directions).
	PerSecond []float64
}

// Mean is the mean of PerSecond over seconds [from, to) (clipped), bytes/s;
// NaN when the range holds none.
func (r Result) Mean(from, to int) float64 {
	from, to = max(from, 0), min(to, len(r.PerSecond))
	if to <= from {
		return math.NaN()
	}
	var s float64
	for _, v := range r.PerSecond[from:to] {
		s += v
	}
	return s / float64(to-from)
}

func (f Workload) fileMB() int {
	if f.FileMB == 0 {
		return 256
	}
	return f.FileMB
}

func (f Workload) args(extra ...string) []string {
	a := []string{"--name=" + f.Profile.Name, "--filename=" + filepath.Join(f.Dir, "fio-"+f.Profile.Name+".dat"),
		fmt.Sprintf("--size=%dM", f.fileMB()), "--direct=1", "--ioengine=libaio", "--group_reporting"}
	a = append(a, f.Profile.Job...)
	return append(a, extra...)
}

// Prepare lays the workload's file out (fio --create_only), so that Run
// starts doing I/O at once.
func (f Workload) Prepare(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "fio", f.args("--create_only=1")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fio: fio %s: lay out: %v: %s", f.Profile.Name, err, lastLine(out))
	}
	return nil
}

// Run runs fio for Duration and returns its throughput per second.
func (f Workload) Run(ctx context.Context) (Result, error) {
	if f.Duration <= 0 {
		return Result{}, fmt.Errorf("fio: fio %s: duration %v must be positive", f.Profile.Name, f.Duration)
	}
	logp := filepath.Join(f.Dir, "fio-"+f.Profile.Name+"-log")
	matches, _ := filepath.Glob(logp + "_bw.*.log")
	for _, m := range matches {
		os.Remove(m)
	}
	args := f.args("--time_based", fmt.Sprintf("--runtime=%ds", int(f.Duration.Round(time.Second).Seconds())),
		"--write_bw_log="+logp, "--log_avg_msec=1000")
	name, argv := "fio", args
	if f.ProcsFile != "" {
		// Join the group first: fio's job processes fork from it.
		name, argv = "sh", append([]string{"-c", `echo $$ > "$0" && exec fio "$@"`, f.ProcsFile}, args...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	res := Result{Start: time.Now()}
	if out, err := cmd.CombinedOutput(); err != nil {
		return res, fmt.Errorf("fio: fio %s: %v: %s", f.Profile.Name, err, lastLine(out))
	}
	matches, _ = filepath.Glob(logp + "_bw.*.log")
	if len(matches) == 0 {
		return res, fmt.Errorf("fio: fio %s: no bandwidth log %s_bw.*.log", f.Profile.Name, logp)
	}
	for _, m := range matches {
		if err := addBWLog(m, &res.PerSecond); err != nil {
			return res, err
		}
	}
	return res, nil
}

// addBWLog adds fio bandwidth log path's entries ("msec, KiB/s, dir, bs,
// offset[, prio]") to per, one slot per whole second since the start.
func addBWLog(path string, per *[]float64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("fio: fio log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if len(fields) < 2 {
			continue
		}
		ms, err1 := strconv.ParseFloat(strings.TrimSpace(fields[0]), 64)
		kib, err2 := strconv.ParseFloat(strings.TrimSpace(fields[1]), 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("fio: fio log %s: bad line %q", path, sc.Text())
		}
		i := int(ms/1000+0.5) - 1 // the average over the second ending at ms
		if i < 0 {
			i = 0
		}
		for len(*per) <= i {
			*per = append(*per, 0)
		}
		(*per)[i] += kib * 1024
	}
	return sc.Err()
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
