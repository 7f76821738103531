package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sluicedb/sluice/keyspace"
)

// The keyspace endpoints (docs/agent-api.md, Keyspaces). A keyspace's JSON
// is keyspace.Keyspace's, as given to POST /v1/keyspaces, with its epoch;
// the methods below return it validated (keyspace.Keyspace.Validate), ready
// for Owner and PlanRanges.

// KeyspaceSizes is GET /v1/keyspaces/{name}/sizes.
type KeyspaceSizes struct {
	Keyspace   string           `json:"keyspace"`
	Epoch      uint64           `json:"epoch"`
	Partitions []PartitionSizes `json:"partitions"` // in the keyspace's order
	Rows       int64            `json:"rows"`       // sum over the partitions reached
	Bytes      int64            `json:"bytes"`      // sum over the partitions reached
}

// PartitionSizes is one partition's tables' sizes. Error, when set, says
// why the partition could not be measured (one line); its figures are then 0.
type PartitionSizes struct {
	Partition string      `json:"partition"`
	Tenant    string      `json:"tenant"`
	Agent     string      `json:"agent"` // the name of the agent running the tenant
	Database  string      `json:"database"`
	Tables    []TableSize `json:"tables"` // in the keyspace's order
	Rows      int64       `json:"rows"`
	Bytes     int64       `json:"bytes"`
	Error     string      `json:"error,omitempty"`
}

// TableSize is one table's size in one partition.
type TableSize struct {
	Table string `json:"table"`
	// Rows is pg_class.reltuples when the table has been vacuumed or
	// analyzed (Estimated), else an exact count(*).
	Rows      int64 `json:"rows"`
	Estimated bool  `json:"estimated,omitempty"`
	Bytes     int64 `json:"bytes"` // pg_total_relation_size: heap, indexes and TOAST
}

// KeyspaceCheck is GET /v1/keyspaces/{name}/check: whether every row of a
// sharded or co-partitioned table lives on the partition the plan names,
// and every partition's copy of each reference table is the same.
type KeyspaceCheck struct {
	Keyspace string `json:"keyspace"`
	Epoch    uint64 `json:"epoch"`
	// OK: no row misplaced, every reference table equal everywhere, and
	// every partition and table checked (no Error anywhere).
	OK         bool             `json:"ok"`
	Misplaced  int64            `json:"misplaced"` // rows outside their partition's ranges, over all
	Partitions []PartitionCheck `json:"partitions"`
	Reference  []ReferenceCheck `json:"reference"` // one per reference table
}

// PartitionCheck is one partition's tables. Error, when set, says why the
// partition could not be checked (one line).
type PartitionCheck struct {
	Partition string       `json:"partition"`
	Tenant    string       `json:"tenant"`
	Agent     string       `json:"agent"`
	Database  string       `json:"database"`
	Tables    []TableCheck `json:"tables"` // in the keyspace's order
	Error     string       `json:"error,omitempty"`
}

// TableCheck is one table in one partition.
type TableCheck struct {
	Table string        `json:"table"`
	Kind  keyspace.Kind `json:"kind"`
	Rows  int64         `json:"rows"` // count(*)
	// Ranges are the partition's ranges of the table's root in the plan,
	// "[1,4),[9,12)"; "" when it owns none (sharded and co-partitioned).
	Ranges string `json:"ranges,omitempty"`
	// Misplaced counts rows whose key is outside Ranges, NULL keys
	// included (sharded and co-partitioned).
	Misplaced int64 `json:"misplaced"`
	// MD5 is the md5 of the rows' text forms sorted bytewise and joined
	// by newlines (reference tables).
	MD5   string `json:"md5,omitempty"`
	Error string `json:"error,omitempty"`
}

// ReferenceCheck compares one reference table's copies.
type ReferenceCheck struct {
	Table string `json:"table"`
	Equal bool   `json:"equal"` // every partition checked has the same rows
	// Differs names the partitions whose copy (rows, md5) differs from the
	// first checked partition's, each with its row count ("p2: 99 rows").
	Differs []string `json:"differs,omitempty"`
}

// PlanCheck is POST /v1/keyspaces/{name}/plan/check's answer: the proposed
// plan, valid against the keyspace, parsed; nothing was changed.
type PlanCheck struct {
	Keyspace  string                 `json:"keyspace"`
	Epoch     uint64                 `json:"epoch"`      // the current plan's
	NextEpoch uint64                 `json:"next_epoch"` // the proposed plan's, were it applied
	Plan      keyspace.PlanSpec      `json:"plan"`
	Ranges    map[string][]PlanRange `json:"ranges"` // root table → its ranges in key order
	// Moves are the reconfiguration ranges applying the plan would move
	// (keyspace.Diff): none when it keeps every key's owner.
	Moves []PlanMove `json:"moves"`
}

// PlanMove is one reconfiguration range of a proposed plan.
type PlanMove struct {
	Root   string   `json:"root"`
	Range  string   `json:"range"`
	From   string   `json:"from"`
	To     string   `json:"to"`
	Tables []string `json:"tables"` // the root and the tables co-partitioned with it
}

// PlanMoves renders keyspace.Diff's moves.
func PlanMoves(ms []keyspace.Move) []PlanMove {
	out := make([]PlanMove, len(ms))
	for i, m := range ms {
		out[i] = PlanMove{Root: m.Root, Range: m.Range.String(), From: m.From, To: m.To, Tables: m.Tables}
	}
	return out
}

// PlanRange is one range of a parsed plan.
type PlanRange struct {
	Range     string `json:"range"` // "[1,4)"; an empty bound is unbounded
	Partition string `json:"partition"`
}

// PlanRanges renders a validated plan: root table → its ranges in key order.
func PlanRanges(p keyspace.Plan) map[string][]PlanRange {
	out := map[string][]PlanRange{}
	for table, m := range p {
		rs := make([]PlanRange, len(m))
		for i, r := range m {
			rs[i] = PlanRange{Range: r.String(), Partition: r.Partition}
		}
		out[table] = rs
	}
	return out
}

// CreateKeyspace is POST /v1/keyspaces: the agent applies ks's schema to
// every partition (all or none) and records ks with epoch 1.
func (c *Client) CreateKeyspace(ctx context.Context, ks *keyspace.Keyspace) (*keyspace.Keyspace, error) {
	var v json.RawMessage
	if err := c.Do(ctx, http.MethodPost, "/v1/keyspaces", ks, &v); err != nil {
		return nil, err
	}
	return decodeKeyspace(v)
}

// Keyspaces is GET /v1/keyspaces, in name order.
func (c *Client) Keyspaces(ctx context.Context) ([]*keyspace.Keyspace, error) {
	var raw []json.RawMessage
	if err := c.Do(ctx, http.MethodGet, "/v1/keyspaces", nil, &raw); err != nil {
		return nil, err
	}
	out := make([]*keyspace.Keyspace, 0, len(raw))
	for _, r := range raw {
		ks, err := decodeKeyspace(r)
		if err != nil {
			return nil, err
		}
		out = append(out, ks)
	}
	return out, nil
}

// Keyspace is GET /v1/keyspaces/{name}.
func (c *Client) Keyspace(ctx context.Context, name string) (*keyspace.Keyspace, error) {
	var v json.RawMessage
	if err := c.Do(ctx, http.MethodGet, keyspacePath(name), nil, &v); err != nil {
		return nil, err
	}
	return decodeKeyspace(v)
}

// DeleteKeyspace is DELETE /v1/keyspaces/{name}: the record goes, the
// partitions' tables and rows stay. It returns the deleted record.
func (c *Client) DeleteKeyspace(ctx context.Context, name string) (*keyspace.Keyspace, error) {
	var v json.RawMessage
	if err := c.Do(ctx, http.MethodDelete, keyspacePath(name), nil, &v); err != nil {
		return nil, err
	}
	return decodeKeyspace(v)
}

// KeyspaceSizes is GET /v1/keyspaces/{name}/sizes.
func (c *Client) KeyspaceSizes(ctx context.Context, name string) (KeyspaceSizes, error) {
	var v KeyspaceSizes
	return v, c.Do(ctx, http.MethodGet, keyspacePath(name)+"/sizes", nil, &v)
}

// CheckKeyspace is GET /v1/keyspaces/{name}/check.
func (c *Client) CheckKeyspace(ctx context.Context, name string) (KeyspaceCheck, error) {
	var v KeyspaceCheck
	return v, c.Do(ctx, http.MethodGet, keyspacePath(name)+"/check", nil, &v)
}

// CheckPlan is POST /v1/keyspaces/{name}/plan/check: plan validated
// against the keyspace (a 400 APIError with the one-line reason when it is
// not), nothing changed.
func (c *Client) CheckPlan(ctx context.Context, name string, plan keyspace.PlanSpec) (PlanCheck, error) {
	var v PlanCheck
	return v, c.Do(ctx, http.MethodPost, keyspacePath(name)+"/plan/check", plan, &v)
}

func keyspacePath(name string) string { return "/v1/keyspaces/" + url.PathEscape(name) }

func decodeKeyspace(b []byte) (*keyspace.Keyspace, error) {
	var ks keyspace.Keyspace
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("agent: bad keyspace: %w", err)
	}
	if err := ks.Validate(); err != nil {
		return nil, fmt.Errorf("agent: bad keyspace %s: %w", ks.Name, err)
	}
	return &ks, nil
}
