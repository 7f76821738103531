package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/sluicedb/sluice/loop"
)

// Control asks the source agent to run a control loop for a migration: every
// step it reads the proxy's latency windows of the tenants on the source and
// target servers, runs the controller, and sets the migration's throttle from
// the copy's first byte. It needs the agent's `proxy` setting (or
// ClientLatencyURL).
type Control struct {
	// Controller is "pid" (the default), "fixed", "integral" or
	// "interference".
	Controller string `json:"controller,omitempty"`
	// SetpointMs is the target transaction latency, ms; required for pid.
	SetpointMs float64 `json:"setpoint_ms,omitempty"`
	// Stat is the latency statistic the setpoint is for: "mean" (the
	// default), "p95" or "p99".
	Stat string `json:"stat,omitempty"`
	// MaxRate is the top speed, bytes/s; 0 = the profile's. The
	// controllers' outputs are fractions of it.
	MaxRate float64 `json:"max_rate,omitempty"`
	// Rate is the fixed controller's rate, bytes/s (default MaxRate).
	Rate float64 `json:"rate,omitempty"`
	// Profile is the control loop's tuning (control.Profile): a base
	// profile by name and the fields that differ from it, such as
	// {"name": "sluice", "ki": 0.1}; absent = the default profile. The agent
	// stores the resolved profile with the migration, so a migration
	// resumed after a restart keeps the tuning it started with.
	Profile json.RawMessage `json:"profile,omitempty"`
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
	// ClientLatencyURL, when set, is an http(s) URL answering GET with the
	// tenant's clients' own latency windows (a JSON array in the proxy's
	// GET /v1/latency shape; `sluice workload --latency-listen` serves
	// one). The loop reads it every step next to the proxy's windows and
	// the controller steers by the worse: queue wait in the clients, which
	// the proxy cannot see, then counts too.
	ClientLatencyURL string `json:"client_latency_url,omitempty"`
}

// MigrationSeries returns the control loop's record of a migration (one
// point per step), from its source agent.
func (c *Client) MigrationSeries(ctx context.Context, id string) ([]loop.Point, error) {
	var pts []loop.Point
	err := c.Do(ctx, http.MethodGet, "/v1/migrations/"+url.PathEscape(id)+"/series", nil, &pts)
	return pts, err
}
