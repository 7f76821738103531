package timing

import (
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// exactQuantile is the reference: the sample of rank ceil(q·n), in µs.
func exactQuantile(sorted []float64, q float64) float64 {
	r := int(math.Ceil(q * float64(len(sorted))))
	if r < 1 {
		r = 1
	}
	return sorted[r-1]
}

// TestQuantilesAgainstReference compares histogram quantiles with exact ones
// on seeded random latency distributions: within the documented ±3.2%.
func TestQuantilesAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	dists := map[string]func() time.Duration{
		"lognormal ~1ms": func() time.Duration {
			return time.Duration(math.Exp(rng.NormFloat64()*0.8) * float64(time.Millisecond))
		},
		"uniform 0-50ms": func() time.Duration { return time.Duration(rng.Float64() * 50 * float64(time.Millisecond)) },
		"bimodal": func() time.Duration {
			return time.Duration((1 + 99*float64(rng.Intn(2))) * float64(time.Millisecond) * (0.9 + 0.2*rng.Float64()))
		},
		"sub-16us": func() time.Duration { return time.Duration(rng.Intn(16000)) },
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			var h Hist
			var xs []float64
			var sum float64
			for i := 0; i < 20000; i++ {
				d := gen()
				h.Add(d)
				us := float64(d.Microseconds())
				xs = append(xs, us)
				sum += float64(d) / 1e3
			}
			sort.Float64s(xs)
			for _, q := range []float64{0.5, 0.95, 0.99} {
				got, want := h.Quantile(q), exactQuantile(xs, q)
				tol := 0.032*want + 0.5 // ±3.2%, and half a µs for the exact small buckets
				if math.Abs(got-want) > tol {
					t.Errorf("q%.2f = %.1fµs, exact %.1fµs", q, got, want)
				}
			}
			st := h.Stats()
			if math.Abs(st.MeanMS-sum/float64(len(xs))/1000) > 1e-9*st.MeanMS+1e-12 {
				t.Errorf("mean %.6f ms, exact %.6f", st.MeanMS, sum/float64(len(xs))/1000)
			}
		})
	}
}

func TestBucketsMonotonic(t *testing.T) {
	prev := -1
	for us := uint64(0); us < 1<<22; us += 1 + us/64 {
		b := bucketOf(us)
		if b < prev {
			t.Fatalf("bucketOf(%d)=%d < %d", us, b, prev)
		}
		prev = b
		lo := bucketMid(b)
		if math.Abs(lo-float64(us)) > 0.032*float64(us)+0.5 {
			t.Fatalf("bucketMid(bucketOf(%d)) = %.1f", us, lo)
		}
	}
	if b := bucketOf(math.MaxUint64); b != NumBuckets-1 {
		t.Fatalf("huge value in bucket %d", b)
	}
}

// TestWindowSlides records on a fixed 100 ms grid and checks what a 3 s
// window sees as time advances.
func TestWindowSlides(t *testing.T) {
	w := NewWindow(3*time.Second, 30)
	if w.Length() != 3*time.Second {
		t.Fatalf("length %v", w.Length())
	}
	// 1 ms transactions for 3 s, one per 100 ms slot, then 10 ms ones for 1 s;
	// snapshots are taken as time passes (the ring forgets what slid out).
	record := func(from, to int, d time.Duration) {
		for i := from; i < to; i++ {
			w.RecordAt(t0.Add(time.Duration(i)*100*time.Millisecond), d)
		}
	}
	steps := []struct {
		before   func()
		at       time.Duration
		count    int
		mean     float64 // ms
		p50, p99 float64 // ms, approximate
	}{
		{func() { record(0, 30, time.Millisecond) }, 2950 * time.Millisecond, 30, 1, 1, 1},
		{func() { record(30, 40, 10*time.Millisecond) }, 3950 * time.Millisecond, 30, (20*1 + 10*10) / 30.0, 1, 10},
		{func() {}, 6950 * time.Millisecond, 0, 0, 0, 0},
	}
	for _, s := range steps {
		s.before()
		st := w.SnapshotAt(t0.Add(s.at))
		if st.Count != s.count || math.Abs(st.MeanMS-s.mean) > 1e-9 {
			t.Errorf("at %v: count %d mean %.4f, want %d %.4f", s.at, st.Count, st.MeanMS, s.count, s.mean)
		}
		if math.Abs(st.P50MS-s.p50) > 0.032*s.p50 || math.Abs(st.P99MS-s.p99) > 0.032*s.p99 {
			t.Errorf("at %v: p50 %.3f p99 %.3f, want ≈%.3f ≈%.3f", s.at, st.P50MS, st.P99MS, s.p50, s.p99)
		}
	}
	w.RecordQueuedAt(t0.Add(7*time.Second), 50*time.Millisecond, 30*time.Millisecond)
	w.RecordAt(t0.Add(7*time.Second), 10*time.Millisecond)
	if st := w.SnapshotAt(t0.Add(7 * time.Second)); st.Count != 2 || math.Abs(st.QueueMeanMS-15) > 1e-9 || math.Abs(st.MeanMS-30) > 1e-9 {
		t.Errorf("queued: %+v, want count 2, queue mean 15 ms, mean 30 ms", st)
	}
	if n, sum := w.Totals(); n != 42 || math.Abs(sum-0.19) > 1e-9 {
		t.Errorf("totals %d %.4f, want 42 0.19", n, sum)
	}
}

func TestRegistryAggregates(t *testing.T) {
	r := NewRegistry(3*time.Second, 30)
	r.Get(Key{"acme", "a:1"}).RecordAt(t0, time.Millisecond)
	r.Get(Key{"acme", "b:2"}).RecordAt(t0, 3*time.Millisecond)
	r.Get(Key{"zeta", "a:1"}).RecordAt(t0, 5*time.Millisecond)
	all := r.QueryAt(t0, Filter{})
	want := map[Key]int{
		{"", ""}: 3, {"", "a:1"}: 2, {"", "b:2"}: 1,
		{"acme", ""}: 2, {"acme", "a:1"}: 1, {"acme", "b:2"}: 1,
		{"zeta", ""}: 1, {"zeta", "a:1"}: 1,
	}
	if len(all) != len(want) {
		t.Fatalf("got %d series: %+v", len(all), all)
	}
	for _, s := range all {
		if want[s.Key] != s.Count {
			t.Errorf("%+v: count %d, want %d", s.Key, s.Count, want[s.Key])
		}
	}
	acme := r.QueryAt(t0, Filter{Tenant: "acme"})
	if len(acme) != 3 || acme[0].Key != (Key{"acme", ""}) || math.Abs(acme[0].MeanMS-2) > 1e-9 {
		t.Fatalf("tenant filter: %+v", acme)
	}
	srv := r.QueryAt(t0, Filter{Server: "a:1"})
	if len(srv) != 3 || srv[0].Key != (Key{"", "a:1"}) || srv[0].Count != 2 {
		t.Fatalf("server filter: %+v", srv)
	}
	if got := r.QueryAt(t0, Filter{Tenant: "nobody"}); got != nil {
		t.Fatalf("unknown tenant: %+v", got)
	}
}

func TestRecordAtDoesNotAllocate(t *testing.T) {
	w := NewWindow(3*time.Second, 30)
	at := t0
	allocs := testing.AllocsPerRun(1000, func() {
		at = at.Add(7 * time.Millisecond)
		w.RecordAt(at, 1500*time.Microsecond)
	})
	if allocs != 0 {
		t.Fatalf("RecordAt allocates %.1f per call", allocs)
	}
}

func BenchmarkRecordAt(b *testing.B) {
	w := NewWindow(3*time.Second, 30)
	at := t0
	b.ReportAllocs()
	for b.Loop() {
		at = at.Add(time.Microsecond * 50)
		w.RecordAt(at, 1500*time.Microsecond)
	}
}
