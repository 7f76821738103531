package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestClientWire checks the requests the client sends and how it maps
// answers, against a stand-in for the proxy's API.
func TestClientWire(t *testing.T) {
	type call struct{ method, path, body string }
	var calls []call
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, call{r.Method, r.URL.RequestURI(), string(b)})
		switch {
		case r.URL.Path == "/v1/tenants/ghost/hold":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]string{"error": `unknown tenant "ghost"`})
		case r.URL.Path == "/v1/tenants/acme/switch" && string(b) == `{"addr":"bad"}`:
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": "want host:port"})
		case r.URL.Path == "/v1/tenants/acme/hold":
			json.NewEncoder(w).Encode(HoldResult{HeldSessions: 3, WaitedMS: 12.5, Cancelled: 1})
		case r.URL.Path == "/v1/latency":
			json.NewEncoder(w).Encode([]Window{{Tenant: "acme", Server: "h:1", WindowS: 3, Count: 7, P99MS: 4}})
		case r.URL.Path == "/v1/routes":
			json.NewEncoder(w).Encode([]Route{{Tenant: "acme", Addr: "h:1", Database: "postgres"}})
		default:
			json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
		}
	}))
	defer hs.Close()
	c := New(hs.URL, nil)
	ctx := context.Background()

	hr, err := c.Hold(ctx, "acme", 1500*time.Millisecond)
	if err != nil || hr.HeldSessions != 3 || hr.Cancelled != 1 || hr.WaitedMS != 12.5 {
		t.Fatalf("Hold: %+v %v", hr, err)
	}
	if _, err := c.Hold(ctx, "ghost", time.Second); !errors.Is(err, ErrUnknownTenant) {
		t.Fatalf("Hold(ghost): %v, want ErrUnknownTenant", err)
	}
	var ae *APIError
	if err := c.Switch(ctx, "acme", "bad"); !errors.As(err, &ae) || ae.Status != 400 || ae.Message != "want host:port" {
		t.Fatalf("Switch(bad): %v", err)
	}
	if err := c.Switch(ctx, "acme", "h:2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRoute(ctx, Route{Tenant: "acme", Addr: "h:3", Database: "d"}); err != nil {
		t.Fatal(err)
	}
	ws, err := c.Latency(ctx, "acme")
	if err != nil || len(ws) != 1 || ws[0].Count != 7 {
		t.Fatalf("Latency: %+v %v", ws, err)
	}
	rs, err := c.Routes(ctx)
	if err != nil || len(rs) != 1 || rs[0].Addr != "h:1" {
		t.Fatalf("Routes: %+v %v", rs, err)
	}
	want := []call{
		{"POST", "/v1/tenants/acme/hold", `{"deadline_ms":1500}`},
		{"POST", "/v1/tenants/ghost/hold", `{"deadline_ms":1000}`},
		{"POST", "/v1/tenants/acme/switch", `{"addr":"bad"}`},
		{"POST", "/v1/tenants/acme/switch", `{"addr":"h:2"}`},
		{"POST", "/v1/tenants/acme/release", ``},
		{"PUT", "/v1/routes/acme", `{"addr":"h:3","database":"d"}`},
		{"GET", "/v1/latency?tenant=acme", ``},
		{"GET", "/v1/routes", ``},
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %+v", calls)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
}
