// Package damon keeps a host's DAMON-based proactive reclaim away from chosen
// memory cgroups, so that what those cgroups keep in memory is what their
// limits allow and nothing else.
//
// Some hosts (this project's VMs among them) run a kdamond whose scheme pages
// out physical memory that looked idle for a while: here, page cache not
// mapped by any process and not seen accessed for 60 s. A PostgreSQL tenant
// read with pread is exactly such cache, and whether a given page survives
// depends on DAMON's sampling of the region it lies in, so a benchmark
// server's share of reads that go to disk changed from run to run whatever
// its memory cgroup allowed. Exclude puts a filter in front of every
// running pageout scheme that rejects the folios charged to the given memory
// cgroups; Restore takes those filters out again.
//
// The package is an adapter over DAMON's sysfs interface
// (/sys/kernel/mm/damon/admin, Linux 6.3+ for memcg filters; ops_filters
// from 6.15, the older filters directory before). It needs root.
package damon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Root is DAMON's sysfs admin directory.
var Root = "/sys/kernel/mm/damon/admin"

// MemcgRoot is where the cgroup v1 memory controller is mounted; a filter's
// memcg path is relative to it.
var MemcgRoot = "/sys/fs/cgroup/memory"

// OwnPrefix marks the memory cgroups of this project's benchmarks. A filter
// for a cgroup under this prefix that no longer exists (left by a process
// that died before Restore) is dropped whenever filters are rewritten: DAMON
// refuses to commit a filter naming a missing cgroup.
var OwnPrefix = "/sluice-bed-"

// Filter is one DAMOS filter as its sysfs directory holds it: attribute
// file name → value, without the trailing newline.
type Filter map[string]string

// attrs is the order attributes are written in: type first (the others'
// meaning depends on it).
var attrs = []string{"type", "matching", "allow", "memcg_path", "addr_start", "addr_end", "damon_target_idx", "min", "max"}

// Exclusion is the filters one Exclude call added.
type Exclusion struct {
	memcgs  []string
	schemes []scheme
}

type scheme struct {
	kdamond string // kdamonds/N
	filters string // the scheme's filter directory
}

// Exclude adds, in front of every pageout scheme of every running kdamond
// that monitors physical addresses, a filter rejecting the folios charged to
// each memory cgroup in memcgs (paths relative to MemcgRoot, "/name"), and
// commits the change. It returns an Exclusion with no schemes when the host
// runs no such scheme, and an error, with the schemes as they were, when
// DAMON refuses the change.
func Exclude(memcgs ...string) (*Exclusion, error) {
	e := &Exclusion{memcgs: memcgs}
	found, err := pageoutSchemes()
	if err != nil {
		return e, err
	}
	for _, s := range found {
		old, err := readFilters(s.filters)
		if err != nil {
			return e, err
		}
		next := Plan(old, memcgs, exists)
		if err := apply(s, next); err != nil {
			// Put back what was there; the error is the refusal.
			apply(s, Plan(old, nil, exists))
			e.Restore()
			return &Exclusion{}, err
		}
		e.schemes = append(e.schemes, s)
	}
	return e, nil
}

// Schemes is how many DAMON schemes the exclusion applies to.
func (e *Exclusion) Schemes() int { return len(e.schemes) }

// Restore removes the filters Exclude added, leaving any others as they are
// now. Safe to call more than once.
func (e *Exclusion) Restore() error {
	var errs []error
	for _, s := range e.schemes {
		cur, err := readFilters(s.filters)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var keep []Filter
		for _, f := range cur {
			if !(f["type"] == "memcg" && slices.Contains(e.memcgs, f["memcg_path"])) {
				keep = append(keep, f)
			}
		}
		if err := apply(s, Plan(keep, nil, exists)); err != nil {
			errs = append(errs, err)
		}
	}
	e.schemes = nil
	return errors.Join(errs...)
}

// Plan is the filter list Exclude writes: a rejecting memcg filter for each
// of memcgs, first, then old, less old filters for OwnPrefix cgroups that are
// stale (exists false) or that memcgs repeats. Pure.
func Plan(old []Filter, memcgs []string, exists func(memcg string) bool) []Filter {
	var out []Filter
	for _, m := range memcgs {
		out = append(out, Filter{"type": "memcg", "memcg_path": m, "matching": "Y", "allow": "N"})
	}
	for _, f := range old {
		if f["type"] == "memcg" && strings.HasPrefix(f["memcg_path"], OwnPrefix) &&
			(!exists(f["memcg_path"]) || slices.Contains(memcgs, f["memcg_path"])) {
			continue
		}
		out = append(out, f)
	}
	return out
}

func exists(memcg string) bool {
	_, err := os.Stat(filepath.Join(MemcgRoot, memcg))
	return err == nil
}

// pageoutSchemes lists the pageout schemes of running kdamonds whose
// contexts monitor physical addresses.
func pageoutSchemes() ([]scheme, error) {
	kds, err := filepath.Glob(filepath.Join(Root, "kdamonds", "[0-9]*"))
	if err != nil || len(kds) == 0 {
		return nil, nil
	}
	var out []scheme
	for _, kd := range kds {
		if read(filepath.Join(kd, "state")) != "on" {
			continue
		}
		ctxs, _ := filepath.Glob(filepath.Join(kd, "contexts", "[0-9]*"))
		for _, c := range ctxs {
			if read(filepath.Join(c, "operations")) != "paddr" {
				continue
			}
			ss, _ := filepath.Glob(filepath.Join(c, "schemes", "[0-9]*"))
			for _, s := range ss {
				if read(filepath.Join(s, "action")) != "pageout" {
					continue
				}
				dir := filepath.Join(s, "ops_filters")
				if _, err := os.Stat(dir); err != nil {
					dir = filepath.Join(s, "filters")
				}
				if _, err := os.Stat(filepath.Join(dir, "nr_filters")); err != nil {
					return nil, fmt.Errorf("damon: %s has no filters (kernel before 6.3?)", s)
				}
				out = append(out, scheme{kdamond: kd, filters: dir})
			}
		}
	}
	return out, nil
}

func read(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func readFilters(dir string) ([]Filter, error) {
	n, err := strconv.Atoi(read(filepath.Join(dir, "nr_filters")))
	if err != nil {
		return nil, fmt.Errorf("damon: %s/nr_filters: %w", dir, err)
	}
	fs := make([]Filter, n)
	for i := range fs {
		fs[i] = Filter{}
		for _, a := range attrs {
			if b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i), a)); err == nil {
				fs[i][a] = strings.TrimSpace(string(b))
			}
		}
	}
	return fs, nil
}

// apply writes fs as the scheme's filters (writing nr_filters makes that
// many fresh filter directories) and commits the kdamond's parameters.
func apply(s scheme, fs []Filter) error {
	if err := write(filepath.Join(s.filters, "nr_filters"), strconv.Itoa(len(fs))); err != nil {
		return err
	}
	for i, f := range fs {
		for _, a := range attrs {
			v, ok := f[a]
			if !ok || (a == "memcg_path" && v == "") {
				continue
			}
			if err := write(filepath.Join(s.filters, strconv.Itoa(i), a), v); err != nil {
				return err
			}
		}
	}
	return write(filepath.Join(s.kdamond, "state"), "commit")
}

func write(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("damon: %s = %s: %w", path, v, err)
	}
	return nil
}
