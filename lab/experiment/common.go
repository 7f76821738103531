package experiment

import (
	"fmt"
	"math"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// DefaultMPL is the experiments' workload connections. Slacker fixes its
// MPL so that "the queue time is minimal unless the server is heavily
// overloaded" (§5.2); on the testbed's quarter-core servers no MPL does both
// jobs. With too few connections a stall fills them all and transactions
// wait in the client's queue, where the proxy (the loop's instrument)
// cannot see them; with too many, backends convoy behind whichever holds a
// lock when the CPU quota runs out. 8 is the measured compromise for step40
// and multitenant (docs/control.md, "Benchmark-side defaults"); --mpl sets it.
const DefaultMPL = 8

// SweepMPL is slack-sweep's workload connections: its 1 GB tenant is
// cached and its servers CPU-bound, where at DefaultMPL the clients' queue
// was most of their excess over the setpoint, and at 16 the clients' mean
// stayed near the proxy's execution mean with alike baselines
// (docs/control.md).
const SweepMPL = 16

// DefaultCalm is the benchmarks' calm hold (Common.Calm): a migration
// starts once the workload's last CalmSpan seconds average at most 1.5 ×
// the baseline's median 3 s window.
const DefaultCalm = 1.5

// Common are the options every experiment shares. Zero values take the
// defaults noted.
type Common struct {
	Out      string          // output directory (required)
	Command  string          // the command line, for the report
	Size     int64           // tenant data, bytes; default 1 GB (Slacker's)
	Workload workload.Config // default 100 transactions/s, MPL DefaultMPL, uniform keys
	// Profile is the control loop's tuning in every PID trial of the base
	// loop (control.Profile); zero = control.DefaultProfile(), what `sluice
	// migrate --setpoint` runs.
	Profile control.Profile
	// Variants are further loops: the experiment runs each PID trial again
	// with each of them, right after the base loop's, on the same plant.
	Variants []Variant
	// MaxRate is the PID's top speed, bytes/s; 0 = each loop's profile's
	// (control.Profile.MaxRate), as `sluice migrate` without --max-rate.
	MaxRate float64
	// Calm, when > 0, holds each migration's start until the workload's
	// last CalmSpan seconds average at most Calm × the baseline's median
	// 3 s window (Trial.CalmBelow; at most CalmWaitMax): trials start on a
	// plant as calm as the baseline's, not in the previous migration's
	// aftermath. 0 = no hold.
	Calm float64
	// TargetCPUs, when not 0, is the CPU quota (cores; negative: none) of
	// the server each trial's tenant moves to, the source keeping the
	// bed's (Trial.TargetCPUs); 0 = every server the bed's.
	TargetCPUs float64
	// Warmup is the workload before each migration; default 20 s (the
	// previous trial's handover backlog drains).
	Warmup time.Duration
	// BaselineFor is how long the workload runs without a migration to
	// measure the baseline; default 20 s.
	BaselineFor time.Duration
	Seed        uint64
	Progress    func(format string, args ...any)
}

func (c *Common) defaults() error {
	if c.Out == "" {
		return fmt.Errorf("experiment: no output directory")
	}
	if c.Size == 0 {
		c.Size = 1e9
	}
	if c.Workload.Rate == 0 {
		c.Workload.Rate = 100
	}
	if c.Workload.MPL == 0 {
		c.Workload.MPL = DefaultMPL
	}
	if c.Workload.Distribution == "" {
		c.Workload.Distribution = workload.Uniform
	}
	if c.Profile == (control.Profile{}) {
		c.Profile = control.DefaultProfile()
	}
	if c.Warmup == 0 {
		c.Warmup = 20 * time.Second
	}
	if c.BaselineFor == 0 {
		c.BaselineFor = 20 * time.Second
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	switch {
	case c.Size < 1e6:
		return fmt.Errorf("experiment: size %d bytes is below 1 MB", c.Size)
	case c.MaxRate < 0 || math.IsNaN(c.MaxRate) || math.IsInf(c.MaxRate, 0):
		return fmt.Errorf("experiment: max rate %v must be a positive number of bytes/s (0 = the profile's)", c.MaxRate)
	case !(c.Workload.Rate > 0) || math.IsInf(c.Workload.Rate, 0):
		return fmt.Errorf("experiment: workload rate %v must be a positive number", c.Workload.Rate)
	}
	for _, v := range c.loops() {
		if err := v.Profile.Validate(); err != nil {
			return fmt.Errorf("experiment: loop %s: %w", v.Label(), err)
		}
	}
	return nil
}

// loops are the PID loops every PID trial runs with: the base (Profile,
// the proxy's windows, the agent's defaults), then Variants.
func (c *Common) loops() []Variant {
	return append([]Variant{{Profile: c.Profile}}, c.Variants...)
}

// topSpeed is loop v's top speed, bytes/s: MaxRate, or v's profile's.
func (c *Common) topSpeed(v Variant) float64 {
	if c.MaxRate > 0 {
		return c.MaxRate
	}
	return v.Profile.MaxRate
}

// pidRequest is the migration request of a PID trial of loop v at
// setpoint sp (ms): what `sluice migrate --setpoint` sends, with v's
// mechanism.
func (c *Common) pidRequest(v Variant, sp float64) agentclient.StartMigration {
	req := v.request(0)
	req.Control = v.control(sp, c.topSpeed(v))
	return req
}

// calmBelow is Trial.CalmBelow for a run whose baseline is base (ms; 0 =
// no hold).
func (c *Common) calmBelow(base Stats) float64 {
	if c.Calm <= 0 || !(base.Window50 > 0) {
		return 0
	}
	return round(c.Calm*base.Window50, 2)
}

// bedNote is the bed's description for a report, with the targets' CPU
// quota when it differs from the bed's (TargetCPUs).
func (c *Common) bedNote(bed *testbed.Bed) string {
	switch {
	case c.TargetCPUs > 0:
		return fmt.Sprintf("%s; each migration's target server %.2g CPU for its trial", bed.Describe(), c.TargetCPUs)
	case c.TargetCPUs < 0:
		return bed.Describe() + "; each migration's target server without a CPU cap for its trial"
	}
	return bed.Describe()
}
