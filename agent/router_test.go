package agent

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestProxyRouterWarnsSlowCalls: a handover call to the proxy that takes
// longer than slowProxyCall is logged with its name and tenant, and its
// error is passed through.
func TestProxyRouterWarnsSlowCalls(t *testing.T) {
	var logged bytes.Buffer
	p := proxyRouter{name: "t1", log: slog.New(slog.NewTextHandler(&logged, nil))}
	boom := errors.New("boom")
	err := p.timed("release", func() error {
		time.Sleep(slowProxyCall + 10*time.Millisecond)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	line := logged.String()
	for _, want := range []string{`msg="slow proxy call"`, "call=release", "tenant=t1", "took="} {
		if !strings.Contains(line, want) {
			t.Fatalf("log %q lacks %s", line, want)
		}
	}
	// Without a logger nothing is written and the call still runs.
	ran := false
	if err := (proxyRouter{}).timed("hold", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("timed without a logger: ran %v, err %v", ran, err)
	}
}
