// Command cgroupcpu prints, about every second, the CPU each kind of
// postgres and sluice process used since its last line, in clock ticks
// (1/100 s) per second — 50 is half a CPU — by the process's cpu cgroup
// (its last path element, e.g. sluice-bed-…-server-a) and kind (a postgres
// process's title without its cluster name, to two words, such as
// "walsender postgres"; else the command's name and first argument, digits
// as N). Run it next to a benchmark to see where a server's quota goes:
//
//	go run ./scripts/cgroupcpu > cpu.log    (Ctrl-C to stop)
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type proc struct {
	key   string // cgroup|kind
	ticks int64  // utime + stime
}

var digits = regexp.MustCompile(`[0-9]+`)

func main() {
	prev, t0 := snap(), time.Now()
	for {
		time.Sleep(time.Second)
		cur, t1 := snap(), time.Now()
		use := map[string]int64{}
		for pid, p := range cur {
			before := int64(0)
			if q, ok := prev[pid]; ok {
				before = q.ticks
			}
			if d := p.ticks - before; d > 0 {
				use[p.key] += d
			}
		}
		keys := make([]string, 0, len(use))
		for k := range use {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return use[keys[i]] > use[keys[j]] })
		var b strings.Builder
		b.WriteString(t1.Format("15:04:05"))
		span := t1.Sub(t0).Seconds()
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s=%.1f", k, float64(use[k])/span)
		}
		fmt.Println(b.String())
		prev, t0 = cur, t1
	}
}

// snap reads every postgres and sluice process's CPU ticks.
func snap() map[string]proc {
	out := map[string]proc{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " "))
		if !strings.Contains(cmd, "postgres") && !strings.Contains(cmd, "sluice") {
			continue
		}
		st, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		out[filepath.Base(d)] = proc{key: cgroup(d) + "|" + kind(cmd), ticks: u + k}
	}
	return out
}

// cgroup is the last element of d's cpu cgroup path ("?" if unknown).
func cgroup(d string) string {
	raw, err := os.ReadFile(d + "/cgroup")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(raw), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && (parts[1] == "" || strings.Contains(","+parts[1]+",", ",cpu,")) {
			return filepath.Base(parts[2])
		}
	}
	return "?"
}

// kind names a process by its title: see the command's doc.
func kind(cmd string) string {
	w := strings.Fields(cmd)
	if t, ok := strings.CutPrefix(cmd, "postgres: "); ok {
		w = strings.Fields(t)
		if len(w) > 0 && strings.HasSuffix(w[0], ":") { // cluster_name
			w = w[1:]
		}
	} else if len(w) > 0 {
		w[0] = filepath.Base(w[0])
	}
	if len(w) > 2 {
		w = w[:2]
	}
	return digits.ReplaceAllString(strings.Join(w, " "), "N")
}
