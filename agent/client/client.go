// Package client talks to a sluice agent's HTTP API (documented in package
// agent and docs/agent-api.md) and defines its JSON wire types.
//
// The CLI uses it to drive agents; agents use it to talk to each other.
// A Client is safe for concurrent use.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// APIError is a non-2xx answer from an agent: its HTTP status and the
// one-line message from the {"error": "..."} body.
type APIError struct {
	Status int
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

// IsClientError reports whether err is an agent's 4xx answer: the request was
// refused and nothing was changed.
func IsClientError(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

// StatusOf returns the HTTP status of an APIError, or 0.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// Client is an agent's API at one base URL.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// WithToken returns a copy of c that sends "Authorization: Bearer token"
// (agents configured with a token refuse state-changing requests without it).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// streamBuffer is the socket buffer size of agent connections (256 KiB):
// snapshot streams move in 256 KiB frames, and 4 KiB buffers cost syscalls.
const streamBuffer = 256 << 10

func newTransport(tc *tls.Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.WriteBufferSize, tr.ReadBufferSize = streamBuffer, streamBuffer
	return tr
}

// WithTLS returns a copy of c that checks the agent's certificate with cfg
// (e.g. a private CA in cfg.RootCAs).
func (c *Client) WithTLS(cfg *tls.Config) *Client {
	cc := *c
	cc.hc = &http.Client{Timeout: c.hc.Timeout, Transport: newTransport(cfg)}
	return &cc
}

func (c *Client) auth(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// DefaultTimeout bounds ordinary requests (tenant creation runs initdb, so it
// is generous). Streaming requests use their context only.
const DefaultTimeout = 5 * time.Minute

// New returns a client for the agent at baseURL ("http://host:port"; a bare
// "host:port" gets "http://").
func New(baseURL string) (*Client, error) {
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("agent client: bad agent URL %q", baseURL)
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), hc: &http.Client{Timeout: DefaultTimeout, Transport: newTransport(nil)}}, nil
}

// URL returns the base URL.
func (c *Client) URL() string { return c.base }

// streamClient returns a client without a timeout, for streams.
func (c *Client) streamClient() *http.Client {
	return &http.Client{Transport: c.hc.Transport}
}

// Do sends a JSON request (in may be nil) and decodes a JSON answer into out
// (may be nil). Non-2xx answers become *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("agent client: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("agent client: %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent %s: %w", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	return decode(resp, out)
}

// StreamWithHeader POSTs the bytes of r to path as a chunked request body,
// with one extra header (key may be ""), and decodes the JSON answer into out.
// It has no timeout beyond ctx.
func (c *Client) StreamWithHeader(ctx context.Context, path, key, value string, r io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, r)
	if err != nil {
		return fmt.Errorf("agent client: POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if key != "" {
		req.Header.Set(key, value)
	}
	c.auth(req)
	req.ContentLength = -1
	resp, err := c.streamClient().Do(req)
	if err != nil {
		return fmt.Errorf("agent %s: %w", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	return decode(resp, out)
}

// PostStream POSTs in as JSON to path and returns the answer's body, to be
// read as a stream and closed by the caller; a non-2xx answer is an
// *APIError. It has no timeout beyond ctx.
func (c *Client) PostStream(ctx context.Context, path string, in any) (io.ReadCloser, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("agent client: POST %s: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("agent client: POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	c.auth(req)
	resp, err := c.streamClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", c.base, unwrapURLError(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decode(resp, nil)
	}
	return resp.Body, nil
}

func decode(resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("agent: reading answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return &APIError{Status: resp.StatusCode, Msg: e.Error}
		}
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &APIError{Status: resp.StatusCode, Msg: fmt.Sprintf("agent answered %s: %s", resp.Status, msg)}
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("agent: bad answer: %w", err)
	}
	return nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Info is GET /v1/info.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var v Info
	return v, c.Do(ctx, http.MethodGet, "/v1/info", nil, &v)
}

// Tenants is GET /v1/tenants (all=true includes deleted tenants).
func (c *Client) Tenants(ctx context.Context, all bool) ([]Tenant, error) {
	var v []Tenant
	p := "/v1/tenants"
	if all {
		p += "?all=true"
	}
	return v, c.Do(ctx, http.MethodGet, p, nil, &v)
}

// Tenant is GET /v1/tenants/{id}.
func (c *Client) Tenant(ctx context.Context, id int64) (Tenant, error) {
	var v Tenant
	return v, c.Do(ctx, http.MethodGet, fmt.Sprintf("/v1/tenants/%d", id), nil, &v)
}

// CreateTenant is POST /v1/tenants. It returns when the tenant is running.
func (c *Client) CreateTenant(ctx context.Context, req CreateTenant) (Tenant, error) {
	var v Tenant
	return v, c.Do(ctx, http.MethodPost, "/v1/tenants", req, &v)
}

// StartTenant is POST /v1/tenants/{id}/start.
func (c *Client) StartTenant(ctx context.Context, id int64) (Tenant, error) {
	var v Tenant
	return v, c.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/tenants/%d/start", id), nil, &v)
}

// StopTenant is POST /v1/tenants/{id}/stop.
func (c *Client) StopTenant(ctx context.Context, id int64) (Tenant, error) {
	var v Tenant
	return v, c.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/tenants/%d/stop", id), nil, &v)
}

// DeleteTenant is DELETE /v1/tenants/{id}.
func (c *Client) DeleteTenant(ctx context.Context, id int64) (Tenant, error) {
	var v Tenant
	return v, c.Do(ctx, http.MethodDelete, fmt.Sprintf("/v1/tenants/%d", id), nil, &v)
}

// StartMigration is POST /v1/migrations on the source agent.
func (c *Client) StartMigration(ctx context.Context, req StartMigration) (Migration, error) {
	var v Migration
	return v, c.Do(ctx, http.MethodPost, "/v1/migrations", req, &v)
}

// Migrations is GET /v1/migrations.
func (c *Client) Migrations(ctx context.Context) ([]Migration, error) {
	var v []Migration
	return v, c.Do(ctx, http.MethodGet, "/v1/migrations", nil, &v)
}

// Migration is GET /v1/migrations/{id}.
func (c *Client) Migration(ctx context.Context, id string) (Migration, error) {
	var v Migration
	return v, c.Do(ctx, http.MethodGet, "/v1/migrations/"+url.PathEscape(id), nil, &v)
}

// SetRate is POST /v1/migrations/{id}/rate.
func (c *Client) SetRate(ctx context.Context, id string, rate float64) (Migration, error) {
	var v Migration
	return v, c.Do(ctx, http.MethodPost, "/v1/migrations/"+url.PathEscape(id)+"/rate", SetRate{Rate: rate}, &v)
}

// AbortMigration is POST /v1/migrations/{id}/abort.
func (c *Client) AbortMigration(ctx context.Context, id string) (Migration, error) {
	var v Migration
	return v, c.Do(ctx, http.MethodPost, "/v1/migrations/"+url.PathEscape(id)+"/abort", nil, &v)
}
