package experiment

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestThrottleNote(t *testing.T) {
	if p := pct(math.NaN()); p != nil {
		t.Fatalf("pct(NaN) = %v, want nil", *p)
	}
	src, dst := pct(0.3449), pct(0.12)
	if *src != 34.5 || *dst != 12 {
		t.Fatalf("pct = %v, %v; want 34.5, 12", *src, *dst)
	}
	if got := throttleNote(nil, nil); got != "" {
		t.Fatalf("throttleNote(nil, nil) = %q, want empty", got)
	}
	if got, want := throttleNote(src, nil), "; CPU quota throttled in 34 % of the source's periods, ? % of the target's"; got != want {
		t.Fatalf("throttleNote = %q, want %q", got, want)
	}
	b, err := json.Marshal(FixedPoint{SourceThrottledPct: src})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"source_throttled_pct":34.5`) || strings.Contains(s, "target_throttled_pct") {
		t.Fatalf("JSON %s: want source_throttled_pct 34.5 and no target_throttled_pct", s)
	}
}

func TestQuotaLines(t *testing.T) {
	nan := math.NaN()
	none := []Labeled{{Name: "fixed-20MBps", Res: &TrialResult{SourceThrottled: nan, TargetThrottled: nan}}}
	if got := quotaLines(none); got != "" {
		t.Fatalf("quotaLines without measurements = %q, want empty", got)
	}
	some := append(none, Labeled{Name: "pid-8ms", Res: &TrialResult{SourceThrottled: 0.344, TargetThrottled: nan}})
	got := quotaLines(some)
	if !strings.Contains(got, "| pid-8ms | 34 % | – |") || strings.Contains(got, "fixed-20MBps") {
		t.Fatalf("quotaLines = %q: want pid-8ms's row only", got)
	}
}
