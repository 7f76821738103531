package sim

import (
	"testing"
	"time"

	"github.com/sluicedb/sluice/control"
)

// BenchmarkRun times one whole run (the migration plus its idle twin) per
// scenario with the PID (Integral for multitenant, with a fixed K so the
// profile is not timed), and reports how many times faster than real time
// the simulation is: simulated seconds (warm-up, migration, tail, twice)
// per wall-clock second.
func BenchmarkRun(b *testing.B) {
	for _, name := range ScenarioNames() {
		b.Run(name, func(b *testing.B) {
			s, err := Lookup(name)
			if err != nil {
				b.Fatal(err)
			}
			cfg := ControllerConfig{Kind: "pid"}
			if name == "multitenant" {
				cfg = ControllerConfig{Kind: "integral", K: 4e7, Initial: 9e6}
			}
			var virtual float64
			start := time.Now()
			for b.Loop() {
				c, err := NewController(s, cfg, Options{Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				r, err := Run(s, c, Options{Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				virtual += 2 * float64(len(r.Points))
			}
			b.ReportMetric(virtual/time.Since(start).Seconds(), "x-realtime")
		})
	}
}

// BenchmarkSweep times `sluice sim sweep` on steady: the fixed-rate ladder
// down to the best rate, plus the default profile's PID.
func BenchmarkSweep(b *testing.B) {
	s, err := Lookup("steady")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Sweep(s, Options{Seed: 1, Setpoint: 30 * time.Millisecond}, 0, control.Profile{}); err != nil {
			b.Fatal(err)
		}
	}
}
