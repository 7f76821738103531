package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/monitor"
)

// migrated is a committed migration placed on the workload's clock (offsets
// from workload.Runner.Started).
type migrated struct {
	m agentclient.Migration
	// series is the control loop's record as the agent serves it: T in
	// seconds since the loop started, with the migration (start).
	series []loop.Point
	start  time.Duration // the demo asked the source agent to start it
	hold   time.Duration // the proxy held the tenant's new transactions for the handover
	freeze time.Duration // hold → release, the summary's freeze
	end    time.Duration // the demo saw it committed
	// maxRate is the loop's top speed, bytes/s, as the migration's
	// progress showed it; 0 if it never did.
	maxRate float64
}

// migrate moves tn from server 0 to server 1 under opt's controller with
// setpoint sp, the product's defaults otherwise (no profile: the agent's
// default; the top speed the profile's unless opt names one), saying its
// progress every 2 s, and returns it on run's clock.
func migrate(ctx context.Context, bed *testbed.Bed, tn testbed.Tenant, opt Options, sp time.Duration, run *workload.Runner, secs *seconds, say func(string, ...any)) (migrated, error) {
	t0 := run.Started()
	ctl := &agentclient.Control{Controller: opt.Controller, MaxRate: opt.MaxRate}
	if opt.Controller == "pid" {
		ctl.SetpointMs = ms(sp)
	}
	top := "the profile's top speed"
	if opt.MaxRate > 0 {
		top = units.FormatRate(opt.MaxRate)
	}
	say("migrating tenant %s to %s: %s controller, setpoint %.1f ms, at most %s", tn.Name, bed.Servers[1].Name, opt.Controller, ms(sp), top)
	var mr migrated
	mr.start = time.Since(t0)
	var lastSay time.Time
	host, hostErr := monitor.ReadHostCPU()
	m, err := bed.Migrate(ctx, tn, 1, agentclient.StartMigration{Control: ctl}, func(m agentclient.Migration) {
		if m.Progress.MaxRate > 0 {
			mr.maxRate = m.Progress.MaxRate
		}
		if time.Since(lastSay) < 2*time.Second && !m.Done {
			return
		}
		lastSay = time.Now()
		line := progressLine(m.Progress, secs.last())
		if h, err := monitor.ReadHostCPU(); err == nil && hostErr == nil {
			if st := h.StealShare(host); !math.IsNaN(st) {
				line += fmt.Sprintf("  host steal %2.0f %%", 100*st)
			}
			host = h
		}
		say("%4.0fs %s", (time.Since(t0) - mr.start).Seconds(), line)
		if w := m.Progress.Warning; w != "" {
			say("warning: %s", w)
		}
	})
	mr.end, mr.m = time.Since(t0), m
	if err != nil {
		return mr, fmt.Errorf("demo: %w", err)
	}
	mr.hold = mr.end
	var rec migration.Record
	if json.Unmarshal(m.Record, &rec) == nil && !rec.HeldAt.IsZero() {
		mr.hold = rec.HeldAt.Sub(t0)
		if !rec.ReleasedAt.IsZero() {
			mr.freeze = rec.ReleasedAt.Sub(rec.HeldAt)
		}
	}
	series, err := bed.Servers[0].Client.MigrationSeries(ctx, m.ID)
	if err != nil {
		return mr, fmt.Errorf("demo: the loop's record: %w", err)
	}
	mr.series = series
	say("committed in %.1f s; handover freeze %.0f ms", (mr.end - mr.start).Seconds(), ms(mr.freeze))
	return mr, nil
}

// progressLine is one line of a migration's progress: phase, bytes, the
// copy's measured rate and the limit the loop set, the clients' latency in
// their last second (lat, ms), the loop's measure and setpoint, and how
// often the source ran out of its CPU quota. migrate adds the hypervisor's
// steal since the last line: a slowdown of every process that no copy
// speed causes.
func progressLine(p agentclient.Progress, lat float64) string {
	moved := units.FormatBytes(float64(p.Bytes))
	switch {
	case p.Phase == "catch-up" && p.LagBytes >= 0:
		moved = "lag " + units.FormatBytes(float64(p.LagBytes))
	case p.TotalBytes > 0:
		moved += " of " + units.FormatBytes(float64(p.TotalBytes))
	}
	s := fmt.Sprintf("%-9s %-20s %10s (limit %10s)  clients %6.1f ms", p.Phase, moved, units.FormatRate(p.Rate), limitText(p.Limit), lat)
	if p.SetpointMs > 0 && p.LatencyMs >= 0 {
		s += fmt.Sprintf("  proxy %6.1f ms (setpoint %.1f)", p.LatencyMs, p.SetpointMs)
	}
	if c := p.CPUThrottledPct; c != nil && !math.IsNaN(*c) {
		s += fmt.Sprintf("  source CPU throttled %3.0f %%", *c)
	}
	return s
}

func limitText(l float64) string {
	if l <= 0 {
		return "none"
	}
	return units.FormatRate(l)
}
