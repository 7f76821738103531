package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// KeyChooser picks record keys in [0, n). Implementations are deterministic for
// a given RNG and are not safe for concurrent use: give each worker its own.
type KeyChooser interface {
	Next(r *rand.Rand) int64
}

// Distribution names a key distribution, as YCSB's requestdistribution.
type Distribution string

const (
	Uniform Distribution = "uniform" // every key equally likely
	Zipfian Distribution = "zipfian" // YCSB's scrambled zipfian, theta 0.99
	HotSpot Distribution = "hotspot" // HotOpFraction of operations on HotSetFraction of keys
)

// Hot-spot defaults, as YCSB's HotspotIntegerGenerator: 20% of the keys take
// 80% of the operations.
const (
	HotSetFraction = 0.2
	HotOpFraction  = 0.8
)

// ZipfianTheta is YCSB's default zipfian constant.
const ZipfianTheta = 0.99

// NewKeyChooser returns a chooser over n keys.
func NewKeyChooser(d Distribution, n int64) (KeyChooser, error) {
	if n <= 0 {
		return nil, fmt.Errorf("workload: key space must be positive, got %d", n)
	}
	switch d {
	case Uniform, "":
		return uniform{n}, nil
	case Zipfian:
		return newScrambledZipf(n, ZipfianTheta), nil
	case HotSpot:
		hot := int64(float64(n) * HotSetFraction)
		if hot < 1 {
			hot = 1
		}
		return hotspot{n: n, hot: hot}, nil
	}
	return nil, fmt.Errorf("workload: unknown distribution %q (uniform, zipfian, hotspot)", d)
}

type uniform struct{ n int64 }

func (u uniform) Next(r *rand.Rand) int64 { return r.Int64N(u.n) }

type hotspot struct{ n, hot int64 }

func (h hotspot) Next(r *rand.Rand) int64 {
	if r.Float64() < HotOpFraction || h.hot == h.n {
		return r.Int64N(h.hot)
	}
	return h.hot + r.Int64N(h.n-h.hot)
}

// zipf is Gray et al.'s "Quickly generating billion-record synthetic
// databases" zipfian generator over [0, n), as YCSB's ZipfianGenerator:
// item i has probability proportional to 1/(i+1)^theta. scrambled spreads the
// popular items over the key space with an FNV-1a hash, as YCSB does, so the
// hot keys are not all adjacent.
type zipf struct {
	n                  int64
	theta, alpha, zeta float64
	eta, half          float64
}

func newScrambledZipf(n int64, theta float64) *zipf {
	z := &zipf{n: n, theta: theta}
	z.zeta = zetaN(n, theta)
	zeta2 := zetaN(2, theta)
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/z.zeta)
	z.half = 1 + math.Pow(0.5, theta)
	return z
}

// zetaN is sum_{i=1..n} 1/i^theta. O(n): computed once per chooser.
func zetaN(n int64, theta float64) float64 {
	s := 0.0
	for i := int64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

func (z *zipf) rank(r *rand.Rand) int64 {
	u := r.Float64()
	uz := u * z.zeta
	if uz < 1 {
		return 0
	}
	if uz < z.half {
		return 1
	}
	v := int64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	if v >= z.n {
		v = z.n - 1
	}
	return v
}

func (z *zipf) Next(r *rand.Rand) int64 {
	return int64(fnv64(uint64(z.rank(r))) % uint64(z.n))
}

func fnv64(v uint64) uint64 {
	const offset, prime = 0xcbf29ce484222325, 0x100000001b3
	h := uint64(offset)
	for i := 0; i < 8; i++ {
		h ^= v & 0xff
		h *= prime
		v >>= 8
	}
	return h
}
