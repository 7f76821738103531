package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sluicedb/sluice/loop"
)

// Control asks the source agent to run a control loop for a migration: every
// StepMs it reads the proxy's latency windows of the tenants on the source and
// target servers, runs the controller, and sets the migration's throttle
// (StartMigration.Rate is then only the starting rate). It needs the agent's
// `proxy` setting.
type Control struct {
	// Controller is "fixed", "pid", "integral" or "interference".
	Controller string `json:"controller"`
	// SetpointMs is the target transaction latency, ms (pid, interference's
	// latency labels); required for pid.
	SetpointMs float64 `json:"setpoint_ms,omitempty"`
	// MaxRate is the top speed, bytes/s; > 0. The controllers' outputs are
	// fractions of it.
	MaxRate float64 `json:"max_rate"`
	// Rate is the fixed controller's rate, bytes/s, and the PID's starting
	// rate (default MaxRate/10).
	Rate float64 `json:"rate,omitempty"`
	// Kp, Ki, Kd override the PID's gains (control.DefaultPIDParams) when set.
	Kp *float64 `json:"kp,omitempty"`
	Ki *float64 `json:"ki,omitempty"`
	Kd *float64 `json:"kd,omitempty"`
	// ErrorForm is the PID's error normalisation: "linear" (default,
	// Slacker's (SP−PV)/SP) or "hybrid" (SP/PV−1 below the setpoint, which
	// makes a queueing server's loop linear; control.ErrorHybrid).
	ErrorForm string `json:"error_form,omitempty"`
	// StartGrowth, when > 1, starts the PID with a slow start: the rate is
	// multiplied by it every step until the latency is half-way from its
	// first measurement to the setpoint (control.PIDParams.StartGrowth).
	StartGrowth float64 `json:"start_growth,omitempty"`
	// RearmGrowth, when > 1, makes the PID climb back after a pause by
	// this factor a step to the rate that last held the setpoint
	// (control.PIDParams.RearmGrowth); 0 = the slow start's growth, to half
	// the peak.
	RearmGrowth float64 `json:"rearm_growth,omitempty"`
	// StartBackoff, when > 0, takes back that many steps of the slow
	// start's growth when it ends: the rate returns to what it was that
	// many steps before, since the latency that ended it is a few steps
	// old (control.PIDParams.StartBackoff); 0 = none. Needs start_growth.
	StartBackoff int `json:"start_backoff,omitempty"`
	// IdleFloor, when > 0, keeps the mean contract's working setpoint at
	// or above L0 + idle_floor·(setpoint − L0), L0 the latency the slow
	// start measured before the migration loaded the server: a run that
	// owes latency does not repay it at the idle latency, where the copy
	// would crawl (control.PIDParams.IdleFloor); 0 = none.
	IdleFloor float64 `json:"idle_floor,omitempty"`
	// ErrorFloor, when > 0, bounds the PID's normalised error from below:
	// a window more than (1 + ErrorFloor)× the setpoint slows the migration
	// as one at that level would (control.PIDParams.ErrorFloor); 0 = none.
	ErrorFloor float64 `json:"error_floor,omitempty"`
	// Headroom, when > 0, holds the PID's rate to at most (1 + Headroom) ×
	// what the copy moved while the copy moves less than it is allowed
	// (control.PIDParams.Headroom); 0 = off.
	Headroom float64 `json:"headroom,omitempty"`
	// MeanHorizon, when > 0, makes the PID's setpoint a contract on the
	// migration's mean latency: a shortfall or excess so far is worked off
	// over this many steps, within ±MeanBand of the setpoint
	// (control.PIDParams.MeanHorizon); 0 = each window against the setpoint.
	MeanHorizon int `json:"mean_horizon_steps,omitempty"`
	// MeanBand bounds MeanHorizon's working setpoint, a fraction of the
	// setpoint in (0, 1); 0 = control.DefaultMeanBand.
	MeanBand float64 `json:"mean_band,omitempty"`
	// HandoverReserveMsS is the PID's reserve for the handover's cost to
	// the clients, ms·s (control.PIDParams.Reserve; with MeanHorizon only).
	// nil: learned from the proxy, the median of the excess of the tenant's
	// last ReserveHistory handovers it measured (GET /v1/handovers), 0 if
	// it measured none; 0: no reserve.
	HandoverReserveMsS *float64 `json:"handover_reserve_ms_s,omitempty"`
	// K is the integral controller's gain, (bytes/s) per second of latency
	// error; from `sluice tune`. Required for integral.
	K float64 `json:"k,omitempty"`
	// ContractsMs are per-tenant latency contracts (tenant name → ms) for the
	// integral controller, which acts on the worst tenant; tenants without one
	// get SetpointMs.
	ContractsMs map[string]float64 `json:"contracts_ms,omitempty"`
	// Device is the block device (as in /proc/diskstats, e.g. "vda") whose
	// I/O the interference controller watches.
	Device string `json:"device,omitempty"`
	// StepMs is the control period, ms; default 1000 (Slacker).
	StepMs float64 `json:"step_ms,omitempty"`
	// ClientLatencyURL, when set, is an http(s) URL answering GET with the
	// tenant's clients' own latency windows (a JSON array in the proxy's
	// GET /v1/latency shape; `sluice workload --latency-listen` serves
	// one). The loop reads it every step next to the proxy's windows and
	// the controller steers by the worse: Slacker's latency is the
	// client's, queue wait included, which the proxy cannot see.
	ClientLatencyURL string `json:"client_latency_url,omitempty"`
}

// CheckClientLatencyURL reports whether u can be a ClientLatencyURL: an
// http:// or https:// URL with a host.
func CheckClientLatencyURL(u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL with a host, such as http://127.0.0.1:7433/", u)
	}
	return nil
}

// MigrationSeries returns the control loop's record of a migration (one
// point per step), from its source agent.
func (c *Client) MigrationSeries(ctx context.Context, id string) ([]loop.Point, error) {
	var pts []loop.Point
	err := c.Do(ctx, http.MethodGet, "/v1/migrations/"+url.PathEscape(id)+"/series", nil, &pts)
	return pts, err
}
