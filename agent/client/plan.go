package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicedb/sluice/plan"
)

// PlanStatus is GET /v1/plans/{id}: the plan's persisted state (package
// plan) and its live figures.
type PlanStatus struct {
	plan.Plan
	// Live is set while the driving agent runs the plan.
	Live bool `json:"live"`
	// Rate is the plan's aggregate rate now, bytes/s (the controller's
	// output, split among the moves in their snapshot); -1 = unlimited
	// (method whole-store).
	Rate float64 `json:"rate"`
	// Bytes and MovedBytes are the moves' estimated total and what their
	// snapshots have sent, bytes.
	Bytes      int64 `json:"bytes"`
	MovedBytes int64 `json:"moved_bytes_total"`
	// MeasuredRate is MovedBytes over the plan's time so far, bytes/s.
	MeasuredRate float64 `json:"measured_rate"`
	// ETASeconds is the time left at MeasuredRate; -1 = unknown.
	ETASeconds float64 `json:"eta_seconds"`
	// Worst is the store with the smallest error against its contract in
	// the last step, its mean latency and contract (ms); "" = no data.
	Worst           string  `json:"worst_store,omitempty"`
	WorstLatencyMs  float64 `json:"worst_latency_ms,omitempty"`
	WorstContractMs float64 `json:"worst_contract_ms,omitempty"`
	// MoveLive are the running moves' live figures, by move index.
	MoveLive map[int]PlanMoveLive `json:"move_live,omitempty"`
	Elapsed  float64              `json:"elapsed_seconds"`
}

// PlanMoveLive is a running move's live figures, from its migration.
type PlanMoveLive struct {
	Phase      string  `json:"phase"`
	Rate       float64 `json:"rate"`  // measured, bytes/s
	Limit      float64 `json:"limit"` // its throttle, bytes/s; 0 = unlimited
	ETASeconds float64 `json:"eta_seconds"`
}

// PlanPoint is one step of a plan's control loop (GET /v1/plans/{id}/series).
type PlanPoint struct {
	At         time.Time          `json:"at"`
	Rate       float64            `json:"rate"` // aggregate, bytes/s; -1 unlimited
	Running    int                `json:"running"`
	Moved      int64              `json:"moved_bytes"`
	Worst      string             `json:"worst_store,omitempty"`
	LatencyMs  map[string]float64 `json:"latency_ms,omitempty"` // mean per store in the window
	ContractMs map[string]float64 `json:"contract_ms,omitempty"`
	Reason     string             `json:"reason,omitempty"`
}

// ApplyPlan is POST /v1/plans: validate spec and start driving it.
func (c *Client) ApplyPlan(ctx context.Context, spec plan.Spec) (PlanStatus, error) {
	var v PlanStatus
	return v, c.Do(ctx, http.MethodPost, "/v1/plans", spec, &v)
}

// Plans is GET /v1/plans.
func (c *Client) Plans(ctx context.Context) ([]PlanStatus, error) {
	var v []PlanStatus
	return v, c.Do(ctx, http.MethodGet, "/v1/plans", nil, &v)
}

// Plan is GET /v1/plans/{id}.
func (c *Client) Plan(ctx context.Context, id string) (PlanStatus, error) {
	var v PlanStatus
	return v, c.Do(ctx, http.MethodGet, "/v1/plans/"+url.PathEscape(id), nil, &v)
}

// PlanSeries is GET /v1/plans/{id}/series.
func (c *Client) PlanSeries(ctx context.Context, id string) ([]PlanPoint, error) {
	var v []PlanPoint
	return v, c.Do(ctx, http.MethodGet, "/v1/plans/"+url.PathEscape(id)+"/series", nil, &v)
}

// PlanOp is POST /v1/plans/{id}/{op} with op pause, resume or abort.
func (c *Client) PlanOp(ctx context.Context, id, op string) (PlanStatus, error) {
	var v PlanStatus
	return v, c.Do(ctx, http.MethodPost, "/v1/plans/"+url.PathEscape(id)+"/"+url.PathEscape(op), nil, &v)
}
