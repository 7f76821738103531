package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAPIBadInput: malformed requests get a specific 4xx with a one-line JSON
// error and change nothing. No tenant is created, so no PostgreSQL runs.
func TestAPIBadInput(t *testing.T) {
	cfg := newTestConfig(t, "a1")
	ta := startAgent(t, cfg)
	auth := "Bearer " + cfg.Token
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		code                     int
		want                     string
	}{
		{"not json", "POST", "/v1/tenants", "{", nil, 400, "bad request body"},
		{"unknown field", "POST", "/v1/tenants", `{"idd":1}`, nil, 400, `unknown field "idd"`},
		{"wrong type", "POST", "/v1/tenants", `{"id":"one"}`, nil, 400, "bad request body"},
		{"negative id", "POST", "/v1/tenants", `{"id":-3}`, nil, 400, "must be > 0"},
		{"bad path id", "GET", "/v1/tenants/abc", "", nil, 400, "bad tenant id"},
		{"zero path id", "POST", "/v1/tenants/0/start", "", nil, 400, "bad tenant id"},
		{"unknown tenant delete", "DELETE", "/v1/tenants/77", "", nil, 404, "unknown tenant 77"},
		{"no endpoint", "GET", "/v2/whatever", "", nil, 404, "no such endpoint"},
		{"wrong method", "PUT", "/v1/tenants", "{}", nil, 404, "no such endpoint"},
		{"migration body", "POST", "/v1/migrations", `{"tenant":"x"}`, nil, 400, "bad request body"},
		{"migration no tenant", "POST", "/v1/migrations", `{"to":"a2"}`, nil, 400, "tenant 0: want a positive tenant id"},
		{"migration NaN-ish rate", "POST", "/v1/migrations", `{"tenant":1,"to":"a2","rate":-5}`, nil, 400, "rate"},
		{"rate unknown migration", "POST", "/v1/migrations/zz/rate", `{"rate":1000000}`, nil, 404, "unknown migration"},
		{"rate bad body", "POST", "/v1/migrations/zz/rate", `{"rate":"fast"}`, nil, 400, "bad request body"},
		{"target not reserved", "POST", "/v1/internal/targets/m1/position", `{"record":{"id":"m1"}}`, nil, 404, "not reserved here"},
		{"target id mismatch", "POST", "/v1/internal/targets/m1/promote", `{"record":{"id":"m2"}}`, nil, 400, "does not match"},
		{"snapshot bad header", "POST", "/v1/internal/targets/m1/snapshot", "xxxx", map[string]string{recordHeader: "%%%"}, 400, "bad Sluice-Record header"},
		{"reserve wrong target", "POST", "/v1/internal/targets/m1/reserve", `{"record":{"id":"m1","target":"elsewhere","tenant":"1"},"tenant_id":1}`, nil, 400, "targets agent"},
		{"reserve tenant mismatch", "POST", "/v1/internal/targets/m1/reserve", `{"record":{"id":"m1","target":"a1","tenant":"2"},"tenant_id":1}`, nil, 400, "does not match tenant id"},
	} {
		req, _ := http.NewRequest(tc.method, ta.URL()+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", auth)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error string }
		if resp.StatusCode != tc.code || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, tc.want) || strings.Contains(e.Error, "\n") {
			t.Errorf("%s: %d %s; want %d with a one-line error containing %q", tc.name, resp.StatusCode, b, tc.code, tc.want)
		}
	}
	ms, _ := ta.Catalog().Migrations()
	ts, _ := ta.Catalog().Tenants()
	if len(ms) != 0 || len(ts) != 0 {
		t.Fatalf("bad requests changed the catalog: %d migrations, %d tenants", len(ms), len(ts))
	}
}
