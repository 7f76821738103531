package agent

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/migration"
)

// TestRateFloor: a positive rate under client.MinRate (64 KiB/s) stalls a
// copy, so the API refuses it — when a migration starts and when its rate
// changes — with a one-line 400 before looking the migration up; 0
// (unlimited) and MinRate itself pass on to the lookup (404 here).
func TestRateFloor(t *testing.T) {
	cfg := newTestConfig(t, "a1")
	ta := startAgent(t, cfg)
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"rate 0.001", "/v1/migrations/zz/rate", `{"rate":0.001}`, 400, "under the least rate"},
		{"rate 1 under the floor", "/v1/migrations/zz/rate", `{"rate":65535}`, 400, "65536 bytes/s (64 KiB/s)"},
		{"negative rate", "/v1/migrations/zz/rate", `{"rate":-1}`, 400, "rate -1"},
		{"rate at the floor", "/v1/migrations/zz/rate", `{"rate":65536}`, 404, "unknown migration"},
		{"unlimited", "/v1/migrations/zz/rate", `{"rate":0}`, 404, "unknown migration"},
		{"start at 0.001", "/v1/migrations", `{"tenant":1,"to":"a2","rate":0.001}`, 400, "under the least rate"},
		{"start max_rate 1 kB/s", "/v1/migrations", `{"tenant":1,"to":"a2","control":{"setpoint_ms":40,"max_rate":1000}}`, 400, "control.max_rate 1000 bytes/s"},
	} {
		req, _ := http.NewRequest(http.MethodPost, ta.URL()+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
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
	if ms, _ := ta.Catalog().Migrations(); len(ms) != 0 {
		t.Fatalf("refused rates left %d migrations", len(ms))
	}
}

// TestViewETA: the ETA the API shows for a running migration, from the
// driver's last progress and the throttle's rate now.
func TestViewETA(t *testing.T) {
	copying := migration.Progress{Phase: migration.PhaseSnapshot, BytesDone: 100 << 20, BytesTotal: 300 << 20, Rate: 10 << 20, ETA: 20 * time.Second}
	catchUp := migration.Progress{Phase: migration.PhaseCatchUp, LagBytes: 5 << 20, ETA: 90 * time.Second}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name  string
		p     migration.Progress
		limit float64 // bytes/s
		want  float64 // s; -1 = unknown
	}{
		{"copy, no throttle: the driver's", copying, inf, 20},
		{"copy, throttle above the average: the driver's", copying, 50 << 20, 20},
		{"copy, throttle lowered to 1 MiB/s: remaining at it", copying, 1 << 20, 200},
		{"copy, throttle at the floor", copying, 64 << 10, 3200},
		{"copy held under the floor by a loop: stalled", copying, 1000, -1},
		{"copy held at 0: stalled", copying, 0, -1},
		{"copy, driver has no ETA yet", migration.Progress{BytesDone: 1, BytesTotal: 10}, inf, -1},
		{"catch-up: the lag trend's, whatever the throttle", catchUp, 1000, 90},
		{"catch-up not converging", migration.Progress{Phase: migration.PhaseCatchUp}, inf, -1},
	} {
		if got := viewETA(tc.p, tc.limit); got != tc.want {
			t.Errorf("%s: ETA %v s, want %v", tc.name, got, tc.want)
		}
	}
}
