package client

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// Reshard methods (ReshardRequest.Method): how chunks move after the plan
// switch. The baselines are the Squall paper's §7 comparators.
const (
	MethodControlled  = "controlled"    // sluice: asynchronous pulls paced by the control loop (Control)
	MethodSquall      = "squall"        // Squall's fixed pace: one chunk, then PaceDelay
	MethodReactive    = "reactive"      // reactive pulls only: asynchronous rate 0
	MethodZephyr      = "zephyr"        // Zephyr+: reactive + chunked asynchronous pulls at the fixed pace, no splitting or sub-plans
	MethodStopAndCopy = "stop-and-copy" // every moving range held and copied at full speed, then released
	// MethodPaced: reactive plus asynchronous pulls at Rate, which the
	// caller sets and changes (POST …/reshard/pace): a migration plan's
	// driver paces its key-range moves this way, as it does its tenants'
	// snapshots.
	MethodPaced = "paced"
)

// ReshardRequest starts a live reconfiguration of a keyspace to Plan.
type ReshardRequest struct {
	Plan   keyspace.PlanSpec `json:"plan"`
	Method string            `json:"method,omitempty"` // default MethodControlled
	// Control paces MethodControlled's asynchronous pulls (PID on the
	// keyspace's client latency by default; "integral" with ContractsMs
	// per partition tenant). Required for controlled: SetpointMs.
	Control *Control `json:"control,omitempty"`
	// ChunkBytes is the chunk size (default 8 MiB, Squall's).
	ChunkBytes int64 `json:"chunk_bytes,omitempty"`
	// SubPlans is the least number of sub-plans (default 5; 1 = only where
	// a source sends to several destinations).
	SubPlans int `json:"sub_plans,omitempty"`
	// PaceDelayMs is the fixed pace's pause after each chunk (default 200,
	// Squall's) for the squall and zephyr methods.
	PaceDelayMs float64 `json:"pace_delay_ms,omitempty"`
	// SubPlanPauseMs is the pause between sub-plans (default 100).
	SubPlanPauseMs float64 `json:"sub_plan_pause_ms,omitempty"`
	// Rate is method paced's pace, bytes/s (at least MinRate), or -1:
	// unlimited. Required for paced, refused otherwise.
	Rate float64 `json:"rate,omitempty"`
}

// Reshard phases (ReshardStatus.Phase).
const (
	PhasePreparing = "preparing" // fences being installed; nothing switched: a failure rolls back
	PhaseSwitching = "switching" // sources being fenced; a failure rolls back
	PhaseMoving    = "moving"    // the new plan is current; chunks being pulled and cleaned
	PhaseDone      = "done"
	PhaseFailed    = "failed" // rolled back before the switch: the old plan is current
)

// ReshardStatus is a reconfiguration's state.
type ReshardStatus struct {
	ID        string           `json:"id"`
	Keyspace  string           `json:"keyspace"`
	Method    string           `json:"method"`
	Phase     string           `json:"phase"`
	FromEpoch uint64           `json:"from_epoch"`
	ToEpoch   uint64           `json:"to_epoch"`
	Started   time.Time        `json:"started"`
	Switched  time.Time        `json:"switched,omitzero"`
	Finished  time.Time        `json:"finished,omitzero"`
	SwitchMs  float64          `json:"switch_ms"` // the switch's hold, ms
	Progress  reshard.Progress `json:"progress"`
	// Rate is the asynchronous pulls' current pace, bytes/s (0 paused,
	// -1 unlimited).
	Rate          float64 `json:"rate"`
	LatencyMs     float64 `json:"latency_ms,omitempty"` // the clients' latency the control loop saw last
	SetpointMs    float64 `json:"setpoint_ms,omitempty"`
	ReactivePulls int64   `json:"reactive_pulls"`
	AsyncPulls    int64   `json:"async_pulls"`
	BytesCopied   int64   `json:"bytes_copied"` // COPY payload actually moved
	ETASeconds    float64 `json:"eta_seconds,omitempty"`
	Error         string  `json:"error,omitempty"`
	// Chunks with their states; only in GET …/reshard?chunks=1 and to proxies.
	Chunks []ReshardChunk `json:"chunks,omitempty"`
}

// ReshardChunk is one chunk and its state.
type ReshardChunk struct {
	Chunk   reshard.Chunk `json:"chunk"`
	State   string        `json:"state"`
	Cleaned bool          `json:"cleaned,omitempty"`
}

// ReshardPace changes a running reconfiguration's method (and its
// control or fixed pace); its chunks stay as they were cut.
type ReshardPace struct {
	Method      string   `json:"method"`
	Control     *Control `json:"control,omitempty"`
	PaceDelayMs float64  `json:"pace_delay_ms,omitempty"`
	Rate        float64  `json:"rate,omitempty"` // method paced's
}

// SetReshardPace changes keyspace name's running reconfiguration's pace.
func (c *Client) SetReshardPace(ctx context.Context, name string, p ReshardPace) (ReshardStatus, error) {
	var v ReshardStatus
	return v, c.Do(ctx, http.MethodPost, keyspacePath(name)+"/reshard/pace", p, &v)
}

// Reshard starts a live reconfiguration of keyspace name (202: it runs on;
// follow it with ReshardStatus).
func (c *Client) Reshard(ctx context.Context, name string, req ReshardRequest) (ReshardStatus, error) {
	var v ReshardStatus
	return v, c.Do(ctx, http.MethodPost, keyspacePath(name)+"/reshard", req, &v)
}

// ReshardStatus returns keyspace name's reconfiguration in progress, or
// its last one (404 when it never had one).
func (c *Client) ReshardStatus(ctx context.Context, name string, chunks bool) (ReshardStatus, error) {
	var v ReshardStatus
	q := ""
	if chunks {
		q = "?chunks=1"
	}
	return v, c.Do(ctx, http.MethodGet, keyspacePath(name)+"/reshard"+q, nil, &v)
}

// ReshardPull asks the driver to pull chunk id now (a reactive pull) and
// waits until it is Complete at its destination.
func (c *Client) ReshardPull(ctx context.Context, name string, id int) error {
	return c.Do(ctx, http.MethodPost, keyspacePath(name)+"/reshard/pull", map[string]int{"chunk": id}, nil)
}
