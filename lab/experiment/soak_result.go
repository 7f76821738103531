package experiment

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/testbed"
)

// SoakMigration is one migration of a soak.
type SoakMigration struct {
	N          int    `json:"n"`          // 1-based
	Controller string `json:"controller"` // SoakPID or SoakFixed
	ID         string `json:"migration_id"`
	From       string `json:"from"` // server names
	To         string `json:"to"`
	Committed  bool   `json:"committed"`
	Error      string `json:"error,omitempty"`
	// StartS and EndS are when the soak asked for it and saw it end,
	// seconds since the soak began.
	StartS   float64 `json:"start_s"`
	EndS     float64 `json:"end_s"`
	Seconds  float64 `json:"migration_seconds"` // the agent's figure
	Bytes    int64   `json:"bytes"`
	FreezeMs float64 `json:"freeze_ms"` // the handover's hold → release
}

// SoakSample is one reading of a watched process (procstat).
type SoakSample struct {
	T        float64 `json:"t_s"`     // seconds since the soak began
	Process  string  `json:"process"` // "proxy", "agent server-a", …
	PID      int     `json:"pid"`
	RSSBytes int64   `json:"rss_bytes"` // VmRSS
	FDs      int     `json:"fds"`       // open file descriptors
	Mark     string  `json:"mark,omitempty"`
	Error    string  `json:"error,omitempty"` // the reading failed (the process is gone)
}

// Freezes are percentiles (nearest rank) of handover freezes, ms; N = 0
// when there were none (the figures are then 0).
type Freezes struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// SoakUsage is a watched process's start and end readings and how far
// apart they are, % of the start (nil when a reading is missing).
type SoakUsage struct {
	Process       string   `json:"process"`
	PID           int      `json:"pid"`
	StartRSSBytes int64    `json:"start_rss_bytes"`
	EndRSSBytes   int64    `json:"end_rss_bytes"`
	RSSChangePct  *float64 `json:"rss_change_pct"`
	StartFDs      int      `json:"start_fds"`
	EndFDs        int      `json:"end_fds"`
	FDChangePct   *float64 `json:"fds_change_pct"`
	// RSSTrendMBPerHour and FDTrendPerHour are the least-squares slopes of
	// the process's readings from the start reading to the end reading, MB
	// (1e6 bytes) and fds per hour: a leak's rate, which one reading's
	// garbage-collection timing does not swing; nil with fewer than 3
	// readings.
	RSSTrendMBPerHour *float64 `json:"rss_trend_mb_per_hour"`
	FDTrendPerHour    *float64 `json:"fds_trend_per_hour"`
}

// SoakCheck is one of the soak's pass/fail checks.
type SoakCheck struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// Line is the check as the command prints it: "PASS  name: detail".
func (c SoakCheck) Line() string {
	v := "FAIL"
	if c.Pass {
		v = "PASS"
	}
	return fmt.Sprintf("%s  %s: %s", v, c.Name, c.Detail)
}

// SoakResult is the soak's summary; its JSON keys are `sluice lab soak
// --json`'s.
type SoakResult struct {
	// Seconds is the soak's span: the first migration's start to the end of
	// the settle after the last.
	Seconds      float64            `json:"soak_seconds"`
	Committed    int                `json:"migrations"`
	ByController map[string]int     `json:"migrations_by_controller"` // committed ones
	Failed       int                `json:"migrations_failed"`
	Freeze       Freezes            `json:"freeze"`
	FreezeBy     map[string]Freezes `json:"freeze_by_controller"`
	Processes    []SoakUsage        `json:"processes"`
	// Slots are the replication slots on the servers' running postmasters
	// at the end; WALHeldBytes the WAL they hold together; WALDirs each
	// postmaster's pg_wal.
	SlotsLeft     int              `json:"slots_left"`
	WALHeldBytes  int64            `json:"slots_wal_held_bytes"`
	Slots         []testbed.Slot   `json:"slots"`
	WALDirs       []testbed.WALDir `json:"wal_dirs"`
	SlotsRead     bool             `json:"slots_read"`     // false: the slots could not be listed
	LedgerChecked bool             `json:"ledger_checked"` // false: the ledger could not be read
	// The ledger, checked row by row on the final owner through the proxy.
	WritesAcknowledged int64 `json:"writes_acknowledged"`
	WritesMissing      int64 `json:"writes_missing"`
	WritesDuplicated   int64 `json:"writes_duplicated"`
	// WorkloadErrors counts failed transactions up to the last whole second
	// before the workload was stopped.
	WorkloadErrors int64   `json:"workload_errors"`
	BaselineMeanMs float64 `json:"baseline_mean_latency_ms"`
	SetpointMs     float64 `json:"pid_setpoint_ms"`
	TenantBytes    int64   `json:"tenant_bytes"`
	// Pass is every check's.
	Pass       bool            `json:"pass"`
	Checks     []SoakCheck     `json:"checks"`
	Start      []SoakSample    `json:"start_reading"` // after the warm-up
	End        []SoakSample    `json:"end_reading"`
	Migrations []SoakMigration `json:"migration_list"`
}

// summarise fills the counts, the freezes, the processes' usage and the
// checks from Migrations, Start, End, the readings of the whole run
// (samples, for the trends), the slots and the ledger.
func (r *SoakResult) summarise(o SoakOptions, samples []SoakSample) {
	r.Committed, r.Failed = 0, 0
	r.ByController = map[string]int{SoakPID: 0, SoakFixed: 0}
	by := map[string][]float64{}
	var all []float64
	for _, m := range r.Migrations {
		if !m.Committed {
			r.Failed++
			continue
		}
		r.Committed++
		r.ByController[m.Controller]++
		by[m.Controller] = append(by[m.Controller], m.FreezeMs)
		all = append(all, m.FreezeMs)
	}
	r.Freeze = freezes(all)
	r.FreezeBy = map[string]Freezes{SoakPID: freezes(by[SoakPID]), SoakFixed: freezes(by[SoakFixed])}
	r.Processes = usage(r.Start, r.End, samples)
	r.SlotsLeft, r.WALHeldBytes = len(r.Slots), 0
	for _, s := range r.Slots {
		r.WALHeldBytes += s.HeldBytes
	}
	r.Checks = soakChecks(*r, o)
	r.Pass = true
	for _, c := range r.Checks {
		r.Pass = r.Pass && c.Pass
	}
}

// freezes are xs' percentiles, nearest rank (with fewer than 100 freezes
// the p99 is the maximum).
func freezes(xs []float64) Freezes {
	if len(xs) == 0 {
		return Freezes{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := func(p float64) float64 { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)] }
	return Freezes{N: len(s), P50Ms: rank(0.5), P99Ms: rank(0.99), MaxMs: s[len(s)-1]}
}

// usage pairs each process's start and end readings (by name, in the start
// reading's order; a process missing from either, or whose reading failed,
// gets no changes) and fits its trends to its samples between them.
func usage(start, end, samples []SoakSample) []SoakUsage {
	var out []SoakUsage
	for _, a := range start {
		u := SoakUsage{Process: a.Process, PID: a.PID, StartRSSBytes: a.RSSBytes, StartFDs: a.FDs}
		i := slices.IndexFunc(end, func(b SoakSample) bool { return b.Process == a.Process })
		if i >= 0 && a.Error == "" && end[i].Error == "" {
			b := end[i]
			u.EndRSSBytes, u.EndFDs = b.RSSBytes, b.FDs
			u.RSSChangePct, u.FDChangePct = changePct(float64(a.RSSBytes), float64(b.RSSBytes)), changePct(float64(a.FDs), float64(b.FDs))
			var hs, rss, fds []float64
			for _, x := range samples {
				if x.Process == a.Process && x.Error == "" && x.T >= a.T && x.T <= b.T {
					hs, rss, fds = append(hs, x.T/3600), append(rss, float64(x.RSSBytes)/1e6), append(fds, float64(x.FDs))
				}
			}
			u.RSSTrendMBPerHour, u.FDTrendPerHour = slope(hs, rss), slope(hs, fds)
		}
		out = append(out, u)
	}
	return out
}

// slope is the least-squares slope of ys over xs, to 0.1; nil with fewer
// than 3 points or no spread in xs.
func slope(xs, ys []float64) *float64 {
	n := float64(len(xs))
	if len(xs) < 3 || len(ys) != len(xs) {
		return nil
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if !(d > 1e-12) {
		return nil
	}
	v := round((n*sxy-sx*sy)/d, 1)
	return &v
}

// changePct is (b − a) / a in %, to 0.1; nil when a is not positive.
func changePct(a, b float64) *float64 {
	if !(a > 0) {
		return nil
	}
	x := round(100*(b-a)/a, 1)
	return &x
}

// soakChecks judges r against the must-show: at least MinPerHour
// committed migrations per hour of Duration, none failed, no acknowledged
// write lost or duplicated, each process's RSS and fds at the end within
// Tolerance of the start, and no replication slot left on either server.
func soakChecks(r SoakResult, o SoakOptions) []SoakCheck {
	need := int(math.Ceil(o.MinPerHour * o.Duration.Hours()))
	byc := fmt.Sprintf("%d PID, %d fixed", r.ByController[SoakPID], r.ByController[SoakFixed])
	cs := []SoakCheck{
		{"migrations", r.Committed >= need, fmt.Sprintf("%d committed (%s) in %.0f s; want ≥ %d (%.0f per hour over %v)", r.Committed, byc, r.Seconds, need, o.MinPerHour, o.Duration)},
		{"no migration failed", r.Failed == 0, fmt.Sprintf("%d failed", r.Failed)},
	}
	ledger := func(name string, n int64) SoakCheck {
		if !r.LedgerChecked {
			return SoakCheck{name, false, "the ledger was not checked"}
		}
		return SoakCheck{name, n == 0, fmt.Sprintf("%d of %d acknowledged writes", n, r.WritesAcknowledged)}
	}
	cs = append(cs, ledger("writes lost", r.WritesMissing), ledger("writes duplicated", r.WritesDuplicated))
	tol := 100 * o.Tolerance
	for _, u := range r.Processes {
		within := func(x *float64) bool { return x != nil && math.Abs(*x) <= tol+1e-9 }
		cs = append(cs,
			SoakCheck{u.Process + " RSS", within(u.RSSChangePct), fmt.Sprintf("%s → %s (%s); want within ±%.0f %%",
				units.FormatBytes(float64(u.StartRSSBytes)), units.FormatBytes(float64(u.EndRSSBytes)), pctText(u.RSSChangePct), tol)},
			SoakCheck{u.Process + " fds", within(u.FDChangePct), fmt.Sprintf("%d → %d (%s); want within ±%.0f %%",
				u.StartFDs, u.EndFDs, pctText(u.FDChangePct), tol)})
	}
	if len(r.Processes) == 0 {
		cs = append(cs, SoakCheck{"RSS and fds", false, "no start and end readings"})
	}
	slot := SoakCheck{"no slot left behind", r.SlotsRead && len(r.Slots) == 0, "the slots could not be listed"}
	if r.SlotsRead {
		var names []string
		for _, s := range r.Slots {
			names = append(names, fmt.Sprintf("%s on %s/%s holding %s", s.Name, s.Server, s.Tenant, units.FormatBytes(float64(s.HeldBytes))))
		}
		slot.Detail = fmt.Sprintf("%d slots on the servers' postmasters, holding %s of WAL", len(r.Slots), units.FormatBytes(float64(r.WALHeldBytes)))
		if len(names) > 0 {
			slot.Detail += ": " + strings.Join(names, "; ")
		}
	}
	return append(cs, slot)
}

// medianReading is, per process of the first read, the median RSS and
// fds of its successful reads (T and PID from the first); a process with
// no successful read keeps the first read's error.
func medianReading(reads [][]SoakSample) []SoakSample {
	if len(reads) == 0 {
		return nil
	}
	out := slices.Clone(reads[0])
	for i := range out {
		var rss, fds []float64
		for _, rd := range reads {
			for _, x := range rd {
				if x.Process == out[i].Process && x.Error == "" {
					rss, fds = append(rss, float64(x.RSSBytes)), append(fds, float64(x.FDs))
				}
			}
		}
		if len(rss) > 0 {
			out[i].RSSBytes, out[i].FDs, out[i].Error = int64(stats.Median(rss)), int(math.Round(stats.Median(fds))), ""
		}
	}
	return out
}

// pctText is a signed percentage, or "n/a" for nil.
func pctText(x *float64) string {
	if x == nil {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f %%", *x)
}

// usageLine is a reading in one line: each process's RSS and fds.
func usageLine(ss []SoakSample) string {
	parts := make([]string, 0, len(ss))
	for _, s := range ss {
		if s.Error != "" {
			parts = append(parts, s.Process+" unreadable")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s/%d fds", s.Process, units.FormatBytes(float64(s.RSSBytes)), s.FDs))
	}
	return strings.Join(parts, ", ")
}
