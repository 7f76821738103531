package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// Overview is GET /v1/overview: everything the operator's page (package
// dashboard) shows, in one answer, so that a page polling each second costs
// the agent one request. Figures are the same as the other endpoints'
// (GET /v1/migrations, /v1/tenants, /v1/keyspaces, the proxy's /v1/latency).
type Overview struct {
	Time  time.Time    `json:"time"`
	Agent OverviewSelf `json:"agent"`
	// Migrations are this agent's running migrations (both roles), then its
	// last finished ones (at most OverviewFinished), newest first; without
	// their persisted record.
	Migrations []Migration `json:"migrations"`
	// Tenants are this agent's tenants that are not deleted.
	Tenants []Tenant `json:"tenants"`
	// Peers are the configured peers with their tenants: where the other
	// tenants live. A peer that did not answer within a second has Error.
	Peers []PeerTenants `json:"peers"`
	// Keyspaces are the keyspaces this agent coordinates, each with its
	// reconfiguration in progress or its last one.
	Keyspaces []KeyspaceView `json:"keyspaces"`
	// Plans are the migration plans this agent drives (GET /v1/plans), the
	// unfinished first, then the newest.
	Plans []PlanStatus `json:"plans"`
	// Proxy is the configured proxy's latency windows per tenant; absent when
	// the agent has no proxy.
	Proxy *ProxyWindows `json:"proxy,omitempty"`
	// RemoteAsOf is when Peers and Proxy were asked for: the agent answers
	// with its last answers from them (at most about a second old) rather
	// than wait on a peer or a proxy busy with the migration shown.
	RemoteAsOf time.Time `json:"remote_as_of"`
}

// OverviewFinished is how many finished migrations GET /v1/overview lists.
const OverviewFinished = 20

// OverviewSelf names the agent answering.
type OverviewSelf struct {
	Name      string `json:"name"`
	URL       string `json:"url"`
	PGVersion string `json:"pg_version"`
}

// PeerTenants is a peer agent and its tenants.
type PeerTenants struct {
	Name    string   `json:"name"`
	URL     string   `json:"url"`
	Tenants []Tenant `json:"tenants"`
	Error   string   `json:"error,omitempty"`
}

// KeyspaceView is a keyspace and its reconfiguration (nil when it never had
// one).
type KeyspaceView struct {
	Keyspace *keyspace.Keyspace `json:"keyspace"`
	Reshard  *ReshardStatus     `json:"reshard,omitempty"`
}

// ProxyWindows is the proxy's per-tenant latency windows (rows with Server
// "": a tenant over its servers) as GET /v1/latency gives them.
type ProxyWindows struct {
	URL     string               `json:"url"`
	Windows []proxyclient.Window `json:"windows"`
	Error   string               `json:"error,omitempty"`
}

// Overview returns GET /v1/overview.
func (c *Client) Overview(ctx context.Context) (Overview, error) {
	var v Overview
	err := c.Do(ctx, http.MethodGet, "/v1/overview", nil, &v)
	return v, err
}

// PauseMigration holds a running migration's copy (rate 0) until
// ResumeMigration: POST /v1/migrations/{id}/pause.
func (c *Client) PauseMigration(ctx context.Context, id string) (Migration, error) {
	var m Migration
	err := c.Do(ctx, http.MethodPost, "/v1/migrations/"+url.PathEscape(id)+"/pause", nil, &m)
	return m, err
}

// ResumeMigration lets a paused migration's copy go on at the rate its
// controller or operator set: POST /v1/migrations/{id}/resume.
func (c *Client) ResumeMigration(ctx context.Context, id string) (Migration, error) {
	var m Migration
	err := c.Do(ctx, http.MethodPost, "/v1/migrations/"+url.PathEscape(id)+"/resume", nil, &m)
	return m, err
}
