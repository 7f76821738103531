// Package timing keeps sliding windows of transaction latencies: count, mean
// and percentiles over the last few seconds, recorded without allocation.
//
// The core is pure: every method takes the current time as a parameter, so
// tests run on a fixed time grid. A Window is safe for concurrent use.
//
// Model. A Window of length W is a ring of Slots slots of W/Slots each. A
// latency recorded at time t lands in the slot of t; a snapshot at time t
// merges the slots of the last Slots slot periods, the current (partial) one
// included, so it covers between W−W/Slots and W of history. Each slot holds a
// log-linear histogram: latencies below 16 µs exactly (1 µs steps), above that
// 16 buckets per power of two, so a percentile is reported as its bucket's
// midpoint with at most ±3.2% relative error. The mean is exact (sum/count).
package timing

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// Histogram geometry.
const (
	subBits    = 4            // 2^subBits buckets per power of two
	subCount   = 1 << subBits // 16
	maxExp     = 40           // largest power of two tracked, in µs (~12.7 days)
	NumBuckets = subCount + (maxExp-subBits+1)*subCount
)

// DefaultSlots is the number of slots a window is cut into (100 ms each for a 3 s window).
const DefaultSlots = 30

// bucketOf returns the histogram bucket of a latency of us microseconds.
func bucketOf(us uint64) int {
	if us < subCount {
		return int(us)
	}
	e := bits.Len64(us) - 1 // ≥ subBits
	if e > maxExp {
		return NumBuckets - 1
	}
	sub := int(us>>(uint(e)-subBits)) & (subCount - 1)
	return subCount + (e-subBits)*subCount + sub
}

// bucketMid returns the midpoint of bucket i, in microseconds.
func bucketMid(i int) float64 {
	if i < subCount {
		return float64(i) + 0.5
	}
	e := (i-subCount)/subCount + subBits
	sub := (i - subCount) % subCount
	width := math.Ldexp(1, e-subBits)
	lo := math.Ldexp(1, e) + float64(sub)*width
	return lo + width/2
}

// Hist is a latency histogram. The zero value is empty and ready to use.
type Hist struct {
	Count   uint64
	SumUS   float64 // sum of latencies, µs
	QueueUS float64 // sum of the parts of those latencies spent queued (held) before reaching a server, µs
	Buckets [NumBuckets]uint32
}

// Add records one latency.
func (h *Hist) Add(d time.Duration) {
	us := d.Microseconds()
	if us < 0 {
		us = 0
	}
	h.Count++
	h.SumUS += float64(d) / float64(time.Microsecond)
	h.Buckets[bucketOf(uint64(us))]++
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o *Hist) {
	if o.Count == 0 {
		return
	}
	h.Count += o.Count
	h.SumUS += o.SumUS
	h.QueueUS += o.QueueUS
	for i, c := range o.Buckets {
		h.Buckets[i] += c
	}
}

// Quantile returns the q-quantile (0 < q ≤ 1) in microseconds: the midpoint of
// the bucket holding the sample of rank ceil(q·Count). 0 when empty.
func (h *Hist) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.Count)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.Buckets {
		seen += uint64(c)
		if seen >= rank {
			return bucketMid(i)
		}
	}
	return bucketMid(NumBuckets - 1)
}

// Stats summarises a histogram. Durations are float64 milliseconds.
type Stats struct {
	Count       int
	MeanMS      float64
	QueueMeanMS float64 // mean time a transaction waited at the proxy (handover hold) before it started, included in MeanMS
	P50MS       float64
	P95MS       float64
	P99MS       float64
}

// Stats computes the summary of h.
func (h *Hist) Stats() Stats {
	if h.Count == 0 {
		return Stats{}
	}
	return Stats{
		Count:       int(h.Count),
		MeanMS:      h.SumUS / float64(h.Count) / 1000,
		QueueMeanMS: h.QueueUS / float64(h.Count) / 1000,
		P50MS:       h.Quantile(0.50) / 1000,
		P95MS:       h.Quantile(0.95) / 1000,
		P99MS:       h.Quantile(0.99) / 1000,
	}
}

type slot struct {
	epoch int64 // slot number (t / slotLen) this slot holds; -1 = never used
	h     Hist
}

// Window is a sliding window of latencies. Create it with NewWindow.
type Window struct {
	slotLen int64 // ns
	mu      struct {
		sync.Mutex
		slots    []slot
		total    uint64  // transactions ever recorded
		totalSum float64 // their latency sum, seconds
	}
}

// NewWindow returns a window of length w (> 0) cut into n slots (n ≤ 0 means DefaultSlots).
func NewWindow(w time.Duration, n int) *Window {
	if n <= 0 {
		n = DefaultSlots
	}
	if w <= 0 {
		w = 3 * time.Second
	}
	win := &Window{slotLen: int64(w) / int64(n)}
	if win.slotLen <= 0 {
		win.slotLen = 1
	}
	win.mu.slots = make([]slot, n)
	for i := range win.mu.slots {
		win.mu.slots[i].epoch = -1
	}
	return win
}

// Length returns the window length.
func (w *Window) Length() time.Duration {
	return time.Duration(w.slotLen * int64(len(w.mu.slots)))
}

func (w *Window) epoch(t time.Time) int64 { return t.UnixNano() / w.slotLen }

// RecordAt records a transaction of latency d that ended at time t.
// It does not allocate.
func (w *Window) RecordAt(t time.Time, d time.Duration) { w.RecordQueuedAt(t, d, 0) }

// RecordQueuedAt is RecordAt for a transaction that spent queued (≤ d) of
// its latency waiting at the proxy before it reached a server.
func (w *Window) RecordQueuedAt(t time.Time, d, queued time.Duration) {
	e := w.epoch(t)
	w.mu.Lock()
	s := &w.mu.slots[int(e%int64(len(w.mu.slots)))]
	if s.epoch != e {
		s.epoch = e
		s.h = Hist{}
	}
	s.h.Add(d)
	s.h.QueueUS += float64(queued) / float64(time.Microsecond)
	w.mu.total++
	w.mu.totalSum += d.Seconds()
	w.mu.Unlock()
}

// MergeAt adds the samples of the window as seen at time t to acc.
func (w *Window) MergeAt(t time.Time, acc *Hist) {
	e := w.epoch(t)
	n := int64(len(w.mu.slots))
	w.mu.Lock()
	for i := range w.mu.slots {
		s := &w.mu.slots[i]
		if s.epoch > e-n && s.epoch <= e {
			acc.Merge(&s.h)
		}
	}
	w.mu.Unlock()
}

// SnapshotAt returns the window's statistics as seen at time t.
func (w *Window) SnapshotAt(t time.Time) Stats {
	var h Hist
	w.MergeAt(t, &h)
	return h.Stats()
}

// Totals returns the number of transactions ever recorded and the sum of
// their latencies in seconds (Prometheus counters).
func (w *Window) Totals() (count uint64, sumSeconds float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.total, w.mu.totalSum
}
