package agent

import (
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/agent/client"
)

// TestConnInfoAddr: the relay finds the source's address in the conninfo a
// LocalSource writes, and the standby's conninfo keeps everything else.
func TestConnInfoAddr(t *testing.T) {
	ci := "host=10.0.0.7 port=5433 user=postgres application_name=sluice password=s3cret"
	addr, err := connInfoAddr(ci)
	if err != nil || addr != "10.0.0.7:5433" {
		t.Fatalf("connInfoAddr = %q, %v", addr, err)
	}
	if got, want := withConnInfoAddr(ci, "127.0.0.1", 40001), "host=10.0.0.7 hostaddr=127.0.0.1 port=40001 user=postgres application_name=sluice password=s3cret"; got != want {
		t.Errorf("withConnInfoAddr = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "host=/tmp port=5432", "host=h", "port=5432", "host=h port=x"} {
		if _, err := connInfoAddr(bad); err == nil {
			t.Errorf("connInfoAddr(%q): no error", bad)
		}
	}
}

// TestRateEncoding: an unlimited pace survives JSON (which has no +Inf).
func TestRateEncoding(t *testing.T) {
	for _, r := range []float64{0, 1e6, math.Inf(1)} {
		if got := decodeRate(encodeRate(r)); got != r {
			t.Errorf("decodeRate(encodeRate(%v)) = %v", r, got)
		}
	}
}

// TestPaceWALErrors: pace-wal answers 404 for a migration this agent does
// not know, and changes nothing.
func TestPaceWALErrors(t *testing.T) {
	c1, _ := agentPair(t)
	a1 := startAgent(t, c1)
	err := a1.c.Do(ctxT(t), http.MethodPost, targetPrefix+"/nosuch/pace-wal", paceWALRequest{Rate: 1e6}, nil)
	if client.StatusOf(err) != http.StatusNotFound || !strings.Contains(err.Error(), "no migration nosuch") {
		t.Fatalf("pace-wal of an unknown migration: %v (status %d), want 404", err, client.StatusOf(err))
	}
}
