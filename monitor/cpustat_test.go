package monitor

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseCPUStat(t *testing.T) {
	s, err := ParseCPUStat(strings.NewReader("nr_periods 120\nnr_throttled 30\nthrottled_time 4500000000\nnr_bursts 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (CPUStat{Periods: 120, Throttled: 30, Time: 4500 * time.Millisecond}); s != want {
		t.Fatalf("ParseCPUStat = %+v, want %+v", s, want)
	}
	if _, err := ParseCPUStat(strings.NewReader("nr_periods x\n")); err == nil {
		t.Fatal("a malformed count parsed")
	}
	before := CPUStat{Periods: 100, Throttled: 10}
	if got := s.ThrottledShare(before); got != 1 {
		t.Fatalf("ThrottledShare = %v, want 1 (20 of 20 periods)", got)
	}
	for _, b := range []CPUStat{s, {Periods: 200}, {Periods: 100, Throttled: 40}} {
		if got := s.ThrottledShare(b); !math.IsNaN(got) {
			t.Fatalf("ThrottledShare(%+v) = %v, want NaN", b, got)
		}
	}
}
