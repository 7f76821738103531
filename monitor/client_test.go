package monitor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
)

func TestClientLatency(t *testing.T) {
	body := ""
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	c := &ClientLatency{URL: srv.URL}
	ctx := context.Background()

	body = `[{"tenant":"acme","window_s":3,"count":42,"mean_ms":7.5,"p95_ms":12,"p99_ms":20}]`
	sig := c.Signals(ctx)
	if len(sig) != 1 || sig[0].Err != nil || sig[0].Name != "client:acme" || sig[0].Mean != 7500*time.Microsecond || sig[0].Count != 42 || sig[0].P99 != 20*time.Millisecond {
		t.Fatalf("signals %+v: want client:acme, 42 transactions at 7.5 ms", sig)
	}

	body = `[{"tenant":"","window_s":3,"count":0}]`
	if sig = c.Signals(ctx); len(sig) != 1 || !errors.Is(sig[0].Err, ErrNoTransactions) || sig[0].Name != "client" {
		t.Fatalf("an empty window: %+v, want ErrNoTransactions", sig)
	}
	body = `[]`
	if sig = c.Signals(ctx); len(sig) != 1 || !errors.Is(sig[0].Err, ErrNoTransactions) {
		t.Fatalf("no window: %+v, want ErrNoTransactions", sig)
	}
	body = `{"mean_ms":`
	if sig = c.Signals(ctx); len(sig) != 1 || sig[0].Err == nil || !strings.Contains(sig[0].Err.Error(), "decode") {
		t.Fatalf("bad JSON: %+v, want a decode error", sig)
	}
	status, body = http.StatusInternalServerError, `[]`
	if sig = c.Signals(ctx); len(sig) != 1 || sig[0].Err == nil || !strings.Contains(sig[0].Err.Error(), "HTTP 500") {
		t.Fatalf("HTTP 500: %+v, want an error", sig)
	}
	srv.Close()
	if sig = c.Signals(ctx); len(sig) != 1 || sig[0].Err == nil {
		t.Fatalf("server gone: %+v, want an error", sig)
	}
}

func TestObserverAddsClientSignals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`[{"tenant":"acme","window_s":3,"count":9,"mean_ms":9}]`))
	}))
	defer srv.Close()
	fp := fakeProxy{byServer: map[string][]client.Window{"src:1": {{Server: "src:1", Count: 9, MeanMS: 8.4}}}}
	o := &Observer{Latency: &ProxyLatency{Proxy: fp, Servers: []string{"src:1"}}, Client: &ClientLatency{URL: srv.URL}}
	obs := o.Observe(context.Background(), time.Now())
	if len(obs.Signals) != 2 || obs.Signals[0].Name != "src:1" || obs.Signals[1].Name != "client:acme" || obs.Signals[1].Mean != 9*time.Millisecond {
		t.Fatalf("signals %+v: want the proxy's src:1, then the client's 9 ms", obs.Signals)
	}
}
