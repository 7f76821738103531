package loop

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/control"
)

// scripted is a test controller: rate = 1e6 × (number of signals with data),
// hold when none has data. It lets the test see what the loop hands over.
type scripted struct {
	last float64
}

func (s *scripted) Name() string     { return "scripted" }
func (s *scripted) Initial() float64 { return 0 }
func (s *scripted) Next(obs control.Observation) control.Decision {
	n := 0
	for _, sg := range obs.Signals {
		if sg.Err == nil {
			n++
		}
	}
	if n == 0 {
		return control.Decision{Rate: s.last, Prefetch: s.last, Hold: true, Reason: "no data"}
	}
	s.last = float64(n) * 1e6
	return control.Decision{Rate: s.last, Prefetch: 2 * s.last}
}

type setter struct{ rates []float64 }

func (s *setter) SetRate(r float64) { s.rates = append(s.rates, r) }

func TestStepRecordsAndApplies(t *testing.T) {
	obs := []control.Observation{
		{Signals: []control.Signal{{Name: "src", Mean: 30 * time.Millisecond}, {Name: "dst", Mean: 45 * time.Millisecond}}},
		{Signals: []control.Signal{{Name: "src", Err: errors.New("down")}}},
		{Signals: []control.Signal{{Name: "src", Mean: 20 * time.Millisecond}}, CPU: &control.CPUQuota{Throttled: 0.25}},
	}
	send, pre := &setter{}, &setter{}
	i := 0
	l := &Loop{
		Controller: &scripted{},
		Observe: func(_ context.Context, at time.Time) control.Observation {
			o := obs[i]
			o.At = at
			i++
			return o
		},
		Send: send, Prefetch: pre, Setpoint: 40 * time.Millisecond,
		Status: func() Status {
			return Status{Phase: "snapshot", Stage: control.StageCopy, Bytes: int64(i) * 100, Lag: -1}
		},
	}
	t0 := time.Unix(1000, 0)
	for k := range obs {
		l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	s := l.Series()
	want := []Point{
		{T: 0, LatencyMs: 45, SetpointMs: 40, Rate: 2e6, Prefetch: 4e6, Phase: "snapshot", Bytes: 100},
		{T: 1, LatencyMs: -1, SetpointMs: 40, Rate: 2e6, Prefetch: 2e6, Hold: true, Reason: "no data", Phase: "snapshot", Bytes: 200},
		{T: 2, LatencyMs: 20, SetpointMs: 40, Rate: 1e6, Prefetch: 2e6, Phase: "snapshot", Bytes: 300},
	}
	if len(s) != len(want) {
		t.Fatalf("%d points, want %d", len(s), len(want))
	}
	if c := s[2].CPUThrottledPct; c == nil || *c != 25 {
		t.Errorf("point 2's CPU throttled share = %v, want 25 %%", c)
	}
	s[2].CPUThrottledPct = nil
	for k := range want {
		if s[k] != want[k] {
			t.Errorf("point %d = %+v, want %+v", k, s[k], want[k])
		}
	}
	if got := send.rates; len(got) != 3 || got[0] != 2e6 || got[1] != 2e6 || got[2] != 1e6 {
		t.Errorf("send rates %v", got)
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, l.Series()); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 4 {
		t.Fatalf("csv has %d lines, want header + 3:\n%s", lines, buf.String())
	}
	if !strings.Contains(buf.String(), ",300,25.000,") {
		t.Fatalf("csv lacks point 2's CPU throttled share:\n%s", buf.String())
	}
}

func TestRunNeedsParts(t *testing.T) {
	if err := (&Loop{}).Run(context.Background(), nil); err == nil {
		t.Fatal("Run without controller/observer/throttle did not fail")
	}
}

// TestSinceAndLast: Since returns the points after t (all for t < 0),
// Last the latest; both copy.
func TestSinceAndLast(t *testing.T) {
	l := &Loop{}
	if _, ok := l.Last(); ok {
		t.Fatal("Last of an empty loop")
	}
	if got := l.Since(-1); got == nil || len(got) != 0 {
		t.Fatalf("Since of an empty loop: %v, want an empty slice", got)
	}
	l.mu.series = []Point{{T: 0}, {T: 1}, {T: 2}, {T: 3}}
	for _, tc := range []struct {
		since float64
		n     int
	}{{-1, 4}, {0, 3}, {1.5, 2}, {3, 0}, {9, 0}} {
		if got := l.Since(tc.since); len(got) != tc.n || (tc.n > 0 && got[len(got)-1].T != 3) {
			t.Errorf("Since(%v) = %v, want the last %d points", tc.since, got, tc.n)
		}
	}
	got := l.Since(-1)
	got[0].T = 99
	if last, ok := l.Last(); !ok || last.T != 3 || l.mu.series[0].T != 0 {
		t.Fatalf("Last %v %v, or Since did not copy", last, ok)
	}
}
