// Package client is the Go client of the sluice proxy's HTTP API, and the
// home of the API's JSON types.
//
// The agents use it for handover (Router: Hold, Switch, Release) and the
// control loop uses it to read latency windows (Latency). It has no
// dependency on the proxy's internals, so importing it is cheap.
//
// All durations on the wire are milliseconds (float64) unless the field name
// says otherwise. A Client is safe for concurrent use.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Route says where a tenant lives now.
type Route struct {
	Tenant   string   `json:"tenant"`
	Aliases  []string `json:"aliases,omitempty"` // database names clients use; default [Tenant]
	Addr     string   `json:"addr"`              // server host:port
	Database string   `json:"database"`          // database name on the server
	Held     bool     `json:"held"`              // a handover hold is in force
	Sessions int      `json:"sessions"`          // client sessions of the tenant now open, the keyspace router's among them
}

// HoldResult is the answer to a hold: the tenant is quiescent when it returns.
type HoldResult struct {
	HeldSessions int     `json:"held_sessions"` // sessions of the tenant at the time the hold completed
	WaitedMS     float64 `json:"waited_ms"`     // time spent waiting for in-flight transactions, ms
	Cancelled    int     `json:"cancelled"`     // statements running at the deadline that were sent a CancelRequest
	// Terminated counts the sessions whose transaction was still open at the
	// deadline and that were ended with FATAL 57P01: those idle in a
	// transaction block (TerminatedIdle, at the deadline) and those still in
	// their transaction the proxy's grace after the cancel.
	Terminated     int `json:"terminated"`
	TerminatedIdle int `json:"terminated_idle"`
	InFlight       int `json:"in_flight"` // transactions still open at return; 0 unless a terminated session did not close within the grace
	// IdleBackends are the PostgreSQL pids of the server sessions, on the
	// tenant's current server, that the hold keeps idle between
	// transactions: the proxy sends them nothing until Release and, after a
	// Switch, moves their sessions away before their next transaction. A
	// source's fence may leave them alone (migration.Router.Hold).
	IdleBackends []int `json:"idle_backends,omitempty"`
}

// PrepareResult is the answer to a prepare: server sessions opened on the
// target ahead of a switch (see Client.Prepare).
type PrepareResult struct {
	Sessions   int     `json:"sessions"`              // sessions of the tenant when the prepare began
	Opened     int     `json:"opened"`                // server sessions opened and kept for the switch
	Failed     int     `json:"failed"`                // sessions whose server session could not be opened (they dial at their next transaction)
	Statements int     `json:"statements"`            // named prepared statements created on the opened server sessions
	FirstError string  `json:"first_error,omitempty"` // the first failure, if any
	WaitedMS   float64 `json:"waited_ms"`             // time the prepare took, ms
}

// Backends names the server sessions a tenant's client sessions hold on its
// current server.
type Backends struct {
	Addr string `json:"addr"` // the tenant's current server, host:port
	// PIDs are the PostgreSQL pids of those server sessions (a source can
	// look up, in pg_stat_activity, the addresses the proxy connects from).
	PIDs []int `json:"pids"`
}

// Window is one latency window: transactions that ended within the last
// WindowS seconds, for one (tenant, server) pair, or aggregated when Tenant
// or Server is "" (see Proxy's doc).
type Window struct {
	Tenant  string  `json:"tenant"`
	Server  string  `json:"server"`
	WindowS float64 `json:"window_s"` // window length, seconds
	Count   int     `json:"count"`    // transactions ended in the window
	MeanMS  float64 `json:"mean_ms"`  // mean transaction latency, ms
	QueueMS float64 `json:"queue_ms"` // mean part of it spent waiting at the proxy (handover hold, session move), ms
	P50MS   float64 `json:"p50_ms"`   // median, ms (histogram estimate, ≤3% relative error)
	P95MS   float64 `json:"p95_ms"`   // 95th percentile, ms
	P99MS   float64 `json:"p99_ms"`   // 99th percentile, ms
}

// Handover is what one handover of a tenant cost its clients, as the proxy
// measured it: the tenant's latency window on the old server when the hold
// began, against its window on the new server one window length after the
// release (GET /v1/handovers).
type Handover struct {
	Tenant     string    `json:"tenant"`
	From       string    `json:"from"` // server (host:port) before
	To         string    `json:"to"`   // server after
	HeldAt     time.Time `json:"held_at"`
	ReleasedAt time.Time `json:"released_at"`
	WindowS    float64   `json:"window_s"` // the windows' length, seconds
	// BeforeMS, BeforeCount: the window ending at the hold (mean latency,
	// ms; transactions). AfterMS, AfterCount: the window starting at the
	// release, which holds the transactions the hold kept waiting.
	BeforeMS    float64 `json:"before_mean_ms"`
	BeforeCount int     `json:"before_count"`
	AfterMS     float64 `json:"after_mean_ms"`
	AfterCount  int     `json:"after_count"`
	// ExcessMSS is the latency the handover added above the level before
	// it, in ms·s: (AfterMS − BeforeMS) × AfterCount divided by the arrival
	// rate before the hold (BeforeCount/WindowS; AfterCount/WindowS if there
	// was none). A window mean that stays ExcessMSS ms above its level for
	// one second adds as much to a run's mean as the handover did. Negative
	// when the new server is faster.
	ExcessMSS float64 `json:"excess_ms_s"`
}

// Router is the handover side of the proxy, as the migrating agent uses it.
type Router interface {
	// Hold makes new transactions of tenant wait at their boundary and returns
	// once none is in flight; transactions still running after deadline are
	// cancelled (CancelRequest to their backend).
	Hold(ctx context.Context, tenant string, deadline time.Duration) (HoldResult, error)
	// Switch points tenant at the server addr (host:port); held sessions move
	// there at their next safe point after Release.
	Switch(ctx context.Context, tenant string, addr string) error
	// Release lets held transactions proceed (on the new server if switched).
	Release(ctx context.Context, tenant string) error
}

// Client talks to one proxy's HTTP API.
type Client struct {
	base  string // e.g. "http://127.0.0.1:6433"
	hc    *http.Client
	token string // sent as "Authorization: Bearer token"; "" = none
}

// WithToken returns a copy of c that sends "Authorization: Bearer token"
// with every request (the proxy's API requires it unless run open).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

var _ Router = (*Client)(nil)

// New returns a Client for the API at addr ("host:port" or an http:// URL).
// hc may be nil (http.DefaultClient).
func New(addr string, hc *http.Client) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(addr, "/"), hc: hc}
}

// APIError is a non-2xx answer of the proxy.
type APIError struct {
	Status  int    // HTTP status
	Message string // the proxy's error text
}

func (e *APIError) Error() string {
	return fmt.Sprintf("proxy api: %d %s", e.Status, e.Message)
}

// ErrUnknownTenant is wrapped by errors for a tenant the proxy has no route for (HTTP 404).
var ErrUnknownTenant = errors.New("unknown tenant")

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("proxy api: %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("proxy api: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("proxy api: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		ae := &APIError{Status: resp.StatusCode, Message: msg}
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %w", ErrUnknownTenant, ae)
		}
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("proxy api: %s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// Hold implements Router.
func (c *Client) Hold(ctx context.Context, tenant string, deadline time.Duration) (HoldResult, error) {
	var r HoldResult
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/hold",
		map[string]any{"deadline_ms": deadline.Milliseconds()}, &r)
	return r, err
}

// Prepare opens a server session on addr for every current session of
// tenant, to be used when the tenant is switched there (no hold needed; the
// target may be a hot standby that is promoted before the switch). Sessions
// that cannot be prepared are counted in the result, not an error.
func (c *Client) Prepare(ctx context.Context, tenant, addr string) (PrepareResult, error) {
	var r PrepareResult
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/prepare",
		map[string]any{"addr": addr}, &r)
	return r, err
}

// Backends returns the pids of tenant's server sessions on its current
// server.
func (c *Client) Backends(ctx context.Context, tenant string) (Backends, error) {
	var r Backends
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/backends", nil, &r)
	return r, err
}

// Switch implements Router.
func (c *Client) Switch(ctx context.Context, tenant string, addr string) error {
	return c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/switch",
		map[string]any{"addr": addr}, nil)
}

// SwitchEpoch is Switch for a tenant whose placement the driver moved to
// addr at epoch in an etcd catalog: a proxy watching that catalog answers
// once its watch routes the tenant by epoch or a later one; one that does
// not switches to addr as told.
func (c *Client) SwitchEpoch(ctx context.Context, tenant, addr string, epoch int64) error {
	return c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/switch",
		map[string]any{"addr": addr, "epoch": epoch}, nil)
}

// SwitchTo is Switch that also changes the server-side database name.
func (c *Client) SwitchTo(ctx context.Context, tenant, addr, database string) error {
	return c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/switch",
		map[string]any{"addr": addr, "database": database}, nil)
}

// Release implements Router.
func (c *Client) Release(ctx context.Context, tenant string) error {
	_, err := c.ReleaseAt(ctx, tenant)
	return err
}

// ReleaseAt is Release that also returns when the proxy let the held
// sessions go, by the proxy's clock (zero if it did not say).
func (c *Client) ReleaseAt(ctx context.Context, tenant string) (time.Time, error) {
	var r struct {
		ReleasedAt time.Time `json:"released_at"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/release", nil, &r)
	return r.ReleasedAt, err
}

// SetRoute creates or replaces the route of r.Tenant (Addr and Database;
// Aliases when given).
func (c *Client) SetRoute(ctx context.Context, r Route) error {
	in := map[string]any{"addr": r.Addr, "database": r.Database}
	if len(r.Aliases) > 0 {
		in["aliases"] = r.Aliases
	}
	return c.do(ctx, http.MethodPut, "/v1/routes/"+url.PathEscape(r.Tenant), in, nil)
}

// Routes lists every route.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	var rs []Route
	err := c.do(ctx, http.MethodGet, "/v1/routes", nil, &rs)
	return rs, err
}

// Latency returns the latency windows of tenant (one per server it used in
// the window, plus the tenant's aggregate with Server ""), or of every
// tenant and server when tenant is "".
func (c *Client) Latency(ctx context.Context, tenant string) ([]Window, error) {
	q := ""
	if tenant != "" {
		q = "?tenant=" + url.QueryEscape(tenant)
	}
	var ws []Window
	err := c.do(ctx, http.MethodGet, "/v1/latency"+q, nil, &ws)
	return ws, err
}

// ServerLatency returns the windows of every tenant on server addr, plus the
// server's aggregate with Tenant "".
func (c *Client) ServerLatency(ctx context.Context, addr string) ([]Window, error) {
	var ws []Window
	err := c.do(ctx, http.MethodGet, "/v1/latency?server="+url.QueryEscape(addr), nil, &ws)
	return ws, err
}

// Handovers returns the proxy's record of recent handovers of tenant (""
// = all tenants), oldest first. A handover appears one window length after
// its release, when its cost is known.
func (c *Client) Handovers(ctx context.Context, tenant string) ([]Handover, error) {
	var r []Handover
	q := ""
	if tenant != "" {
		q = "?tenant=" + url.QueryEscape(tenant)
	}
	err := c.do(ctx, http.MethodGet, "/v1/handovers"+q, nil, &r)
	return r, err
}

// HoldKeyspace stops the proxy admitting keyspace name's transactions and
// waits (at most deadline) for the open ones to end; on failure the proxy
// has released the hold again.
func (c *Client) HoldKeyspace(ctx context.Context, name string, deadline time.Duration) error {
	return c.do(ctx, http.MethodPost, "/v1/keyspaces/"+url.PathEscape(name)+"/hold",
		map[string]float64{"deadline_ms": float64(deadline.Microseconds()) / 1000}, nil)
}

// SwitchKeyspace installs a keyspace version (its JSON) with the
// reconfiguration moving its data (reshard: the driver's status with
// chunks; nil for none), whose reactive pulls go to driver (an agent's
// base URL), and ends the keyspace's hold.
func (c *Client) SwitchKeyspace(ctx context.Context, keyspace json.RawMessage, reshard any, driver string) error {
	return c.do(ctx, http.MethodPost, "/v1/keyspaces/"+nameOf(keyspace)+"/switch",
		map[string]any{"keyspace": keyspace, "reshard": reshard, "driver": driver}, nil)
}

// ReleaseKeyspace ends keyspace name's hold, nothing changed.
func (c *Client) ReleaseKeyspace(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodPost, "/v1/keyspaces/"+url.PathEscape(name)+"/release", nil, nil)
}

// nameOf is the path-escaped "name" of a keyspace's JSON.
func nameOf(ks json.RawMessage) string {
	var v struct {
		Name string `json:"name"`
	}
	json.Unmarshal(ks, &v)
	return url.PathEscape(v.Name)
}
