package control

import (
	"math/rand"
	"testing"
	"time"

	"github.com/sluicedb/sluice/control/tune"
)

// BenchmarkNext measures one control step of each controller on a fixed
// sequence of observations (5 stores, host I/O). Fixed is the baseline: the
// cost of the call itself. A control step runs once per second, so anything
// under a few microseconds is free.
func BenchmarkNext(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	obs := make([]Observation, 1024)
	for i := range obs {
		o := Observation{At: time.Unix(int64(i), 0)}
		for s := range 5 {
			l := time.Duration(5+rng.Intn(20)) * time.Millisecond
			o.Signals = append(o.Signals, Signal{Name: string(rune('a' + s)), Mean: l, P95: 2 * l, P99: 3 * l, Count: 50})
		}
		h := HostIO{IOPS: 10 + rng.Float64()*3000, Util: rng.Float64(), Throughput: rng.Float64() * 200e6}
		h.IOTicks = h.Util * 1000
		o.Host = &h
		obs[i] = o
	}
	pp := slackerParams()
	pp.Setpoint, pp.MaxRate = 15*time.Millisecond, 100e6
	ip := DefaultIntegralParams()
	ip.MaxRate, ip.K = 100e6, HeuristicIntegralK(100e6, 10*time.Millisecond)
	fp := DefaultInterferenceParams()
	fp.MaxRate = 100e6
	for _, tc := range []struct {
		name string
		mk   func() Controller
	}{
		{"fixed", func() Controller { c, _ := NewFixed(1e6); return c }},
		{"pid", func() Controller { c, _ := NewPID(pp); return c }},
		{"integral", func() Controller { c, _ := NewIntegral(ip); return c }},
		{"interference", func() Controller { c, _ := NewInterference(fp); return c }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := tc.mk()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.Next(obs[i&1023])
				i++
			}
		})
	}
}

// BenchmarkFit measures fitting the interference model with 5-fold
// cross-validation (6 LBFGS fits) on 2000 synthetic samples.
func BenchmarkFit(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	truth := DefaultModel()
	hosts := syntheticHosts(rng, 2000)
	samples := make([]Sample, len(hosts))
	for i, h := range hosts {
		samples[i] = Sample{IO: h, Interfering: rng.Float64() < truth.Prob(h)}
	}
	for b.Loop() {
		if _, _, err := Fit(samples, 5, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecommend measures a whole tuning proposal (both fits, K, and the
// PID search over ~4700 closed-loop eigenvalue problems).
func BenchmarkRecommend(b *testing.B) {
	q := tune.Queue{L0: 0.004, Capacity: 12.5e6}
	var rates, lats []float64
	for r := 1.2e6; r <= 7.2e6; r += 1.2e6 {
		rates = append(rates, r)
		lats = append(lats, q.Latency(r))
	}
	for b.Loop() {
		if _, err := tune.Recommend(rates, lats, 30*time.Millisecond, 12e6, 3, 0.5, 0.6); err != nil {
			b.Fatal(err)
		}
	}
}
