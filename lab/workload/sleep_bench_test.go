package workload

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkArrivalLateness measures how late a wait for a scheduled arrival
// wakes (reported as late-µs/op), for Poisson gaps with a mean of 10 ms as
// the generator's at 100 transactions/s: "timer" is a plain time.Timer,
// "generator" is waitUntil (timer, then the kernel's sleep for the last
// preciseLead): `go test -run '^$' -bench ArrivalLateness ./lab/workload`.
func BenchmarkArrivalLateness(b *testing.B) {
	gap := func(rng *rand.Rand) time.Duration {
		return time.Duration(rng.ExpFloat64() * float64(10*time.Millisecond))
	}
	b.Run("timer", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		var late time.Duration
		for b.Loop() {
			next := time.Now().Add(gap(rng))
			timer.Reset(time.Until(next))
			<-timer.C
			late += time.Since(next)
		}
		b.ReportMetric(float64(late.Microseconds())/float64(b.N), "late-µs/op")
	})
	b.Run("generator", func(b *testing.B) {
		done := make(chan struct{})
		go func() { // waitUntil runs on a goroutine of its own, as generate
			defer close(done)
			defer preciseThread()()
			rng := rand.New(rand.NewPCG(1, 2))
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			var late time.Duration
			for range b.N { // b.Loop belongs to the benchmark's goroutine
				next := time.Now().Add(gap(rng))
				waitUntil(context.Background(), timer, next)
				late += time.Since(next)
			}
			b.ReportMetric(float64(late.Microseconds())/float64(b.N), "late-µs/op")
		}()
		<-done
	})
}
