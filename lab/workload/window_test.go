package workload

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// runnerWith returns a runner whose record holds txs, started at start.
func runnerWith(t *testing.T, start time.Time, txs []Tx) *Runner {
	t.Helper()
	r, err := NewRunner(Config{DSN: "postgres://unused", Rate: 1, Records: 10, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.start, r.mu.txs = start, txs
	return r
}

func TestRunnerWindow(t *testing.T) {
	start := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	s := time.Second
	ms := time.Millisecond
	txs := []Tx{
		{Arrival: 500 * ms, Begin: 500 * ms, End: 900 * ms},             // before the window
		{Arrival: 2 * s, Begin: 2*s + 2*ms, End: 2*s + 10*ms},           // 10 ms, 2 queued
		{Arrival: 3 * s, Begin: 3 * s, End: 3*s + 4*ms},                 // 4 ms
		{Arrival: 3 * s, Begin: 3 * s, End: 3*s + 50*ms, Failed: true},  // failed: left out
		{Arrival: 3*s + 500*ms, Begin: 3*s + 600*ms, End: 4*s + 100*ms}, // 600 ms, 100 queued; recorded before the next
		{Arrival: 3*s + 900*ms, Begin: 3*s + 900*ms, End: 3*s + 910*ms}, // 10 ms: End out of order
		{Arrival: 4*s + 200*ms, Begin: 4*s + 200*ms, End: 4*s + 300*ms}, // after the window's end
	}
	r := runnerWith(t, start, txs)
	w := r.Window(start.Add(4*s+200*ms), 3*s) // (1.2 s, 4.2 s]
	if w.Count != 4 {
		t.Fatalf("count %d, want 4 (window %+v)", w.Count, w)
	}
	if want := (10 + 4 + 600 + 10) * ms / 4; w.Mean != want {
		t.Errorf("mean %v, want %v", w.Mean, want)
	}
	if want := (2 + 100) * ms / 4; w.Queue != want {
		t.Errorf("queue %v, want %v", w.Queue, want)
	}
	if w.P99 != 600*ms || w.P95 != 600*ms {
		t.Errorf("p95 %v p99 %v, want 600ms", w.P95, w.P99)
	}
	if w := r.Window(start.Add(30*s), 3*s); w.Count != 0 || w.Mean != 0 {
		t.Errorf("an idle window: %+v, want empty", w)
	}
	if w := runnerWith(t, time.Time{}, nil).Window(start, 3*s); w.Count != 0 {
		t.Errorf("a runner not started: %+v, want empty", w)
	}
}

func TestRunnerHandler(t *testing.T) {
	start := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	r := runnerWith(t, start, []Tx{{Arrival: time.Second, Begin: time.Second, End: time.Second + 8*time.Millisecond}})
	srv := httptest.NewServer(r.Handler("acme", 0, func() time.Time { return start.Add(2 * time.Second) }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	var ws []proxyclient.Window
	err = json.NewDecoder(resp.Body).Decode(&ws)
	resp.Body.Close()
	if err != nil || len(ws) != 1 {
		t.Fatalf("windows %+v, %v: want one", ws, err)
	}
	if w := ws[0]; w.Tenant != "acme" || w.WindowS != 3 || w.Count != 1 || w.MeanMS != 8 {
		t.Fatalf("window %+v: want acme, 3 s, 1 transaction at 8 ms", w)
	}
	resp, err = http.Post(srv.URL+"/", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", resp.StatusCode)
	}
}

func TestRunnerServeWindow(t *testing.T) {
	r := runnerWith(t, time.Now().Add(-5*time.Second), []Tx{{Arrival: 4 * time.Second, Begin: 4 * time.Second, End: 4*time.Second + 6*time.Millisecond}})
	u, stop, err := r.ServeWindow("127.0.0.1:0", "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	var ws []proxyclient.Window
	err = json.NewDecoder(resp.Body).Decode(&ws)
	resp.Body.Close()
	if err != nil || len(ws) != 1 || ws[0].Tenant != "acme" || ws[0].Count != 1 || ws[0].MeanMS != 6 {
		t.Fatalf("windows %+v, %v: want acme's one transaction at 6 ms", ws, err)
	}
	if _, _, err := r.ServeWindow("127.0.0.1:notaport", "acme"); err == nil {
		t.Fatal("a bad address: want an error")
	}
}
