package control

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicedb/sluice/internal/asciiplot"
)

// This file holds the helpers the datadriven scripts share: argument parsing
// with units, a deterministic linear plant, and the transcript's plots.

const mb = 1e6 // bytes in the "MB" of the scripts (decimal, like MB/s on a link)

// parseRate parses "100MB/s", "512KiB/s", "0" or a plain number of bytes/s.
func parseRate(s string) (float64, error) {
	s = strings.TrimSuffix(strings.TrimSpace(s), "/s")
	units := []struct {
		suf string
		mul float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mul := 1.0
	for _, u := range units {
		if strings.HasSuffix(s, u.suf) {
			s, mul = strings.TrimSuffix(s, u.suf), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	return v * mul, nil
}

// parseGain parses a plant gain such as "0.5ms/MBps": seconds of latency per
// byte/s of migration rate.
func parseGain(s string) (float64, error) {
	lat, per, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("bad gain %q: want <duration>/<rate unit>ps", s)
	}
	d, err := time.ParseDuration(lat)
	if err != nil {
		return 0, err
	}
	unit, err := parseRate("1" + strings.TrimSuffix(per, "ps"))
	if err != nil {
		return 0, err
	}
	return d.Seconds() / unit, nil
}

// args gives typed access to a directive's key=value arguments.
type args struct {
	t *testing.T
	d *datadriven.TestData
}

func (a args) raw(key string) (string, bool) {
	arg, ok := a.d.Arg(key)
	if !ok {
		return "", false
	}
	return strings.Join(arg.Vals, ","), true
}

func (a args) str(key, def string) string {
	if v, ok := a.raw(key); ok {
		return v
	}
	return def
}

func (a args) float(key string, def float64) float64 {
	v, ok := a.raw(key)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, v, err)
	}
	return f
}

func (a args) int(key string, def int) int {
	return int(a.float(key, float64(def)))
}

func (a args) dur(key string, def time.Duration) time.Duration {
	v, ok := a.raw(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, v, err)
	}
	return d
}

func (a args) durs(key string) []time.Duration {
	v, ok := a.raw(key)
	if !ok {
		return nil
	}
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(f)
		if err != nil {
			a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, v, err)
		}
		out = append(out, d)
	}
	return out
}

func (a args) rate(key string, def float64) float64 {
	v, ok := a.raw(key)
	if !ok {
		return def
	}
	r, err := parseRate(v)
	if err != nil {
		a.t.Fatalf("%s: %s: %v", a.d.Pos, key, err)
	}
	return r
}

func (a args) gains(key string) []float64 {
	v, ok := a.raw(key)
	if !ok {
		return nil
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		g, err := parseGain(f)
		if err != nil {
			a.t.Fatalf("%s: %s: %v", a.d.Pos, key, err)
		}
		out = append(out, g)
	}
	return out
}

// linearPlant is a deterministic stand-in for a server: the latency of store i
// in the window after a step at rate r is base_i + gain_i·r (+ a burst while
// one is scripted, + seeded Gaussian noise). It is Aqueduct's model (eq. 1)
// with a one-step delay: the rate chosen at step k shows in the latency
// measured at step k+1.
//
// With cap= the plant is a queue instead: latency = base_i/(1 − r/cap_i),
// with 1 − r/cap floored at 0.01 (100× base at or past capacity).
type linearPlant struct {
	base  []time.Duration
	gain  []float64 // seconds per byte/s
	cap   []float64 // bytes/s; nil: linear
	noise float64   // relative standard deviation of latency
	rng   *rand.Rand
	burst struct {
		from, to int // steps [from, to)
		add      time.Duration
	}
	// stalls: each step, with probability stallP (its own seeded stream,
	// so the noise's draws do not move), every store's latency is
	// stallLat higher whatever the rate — a server out of its CPU quota.
	stallP   float64
	stallLat time.Duration
	stallRng *rand.Rand
}

// latency returns the latency of every store at step k after rate r.
func (p *linearPlant) latency(k int, r float64) []time.Duration {
	out := make([]time.Duration, len(p.base))
	stall := p.stallP > 0 && p.stallRng.Float64() < p.stallP
	for i := range p.base {
		s := p.base[i].Seconds() + p.gain[i]*r
		if p.cap != nil {
			s = p.base[i].Seconds() / math.Max(1-r/p.cap[i], 0.01)
		}
		if k >= p.burst.from && k < p.burst.to {
			s += p.burst.add.Seconds()
		}
		if stall {
			s += p.stallLat.Seconds()
		}
		if p.noise > 0 {
			s *= 1 + p.noise*p.rng.NormFloat64()
		}
		out[i] = time.Duration(math.Max(s, 1e-6) * float64(time.Second))
	}
	return out
}

// newPlant builds a plant from run arguments: base=, gain= or cap= (lists,
// one per store; a single value applies to every store), noise=, seed=,
// burst=from-to and burstlat=, stalls= (probability per step) and
// stalllat=.
func newPlant(a args) *linearPlant {
	p := &linearPlant{base: a.durs("base"), gain: a.gains("gain"), noise: a.float("noise", 0)}
	if c, ok := a.raw("cap"); ok {
		for _, f := range strings.Split(c, ",") {
			r, err := parseRate(f)
			if err != nil || r <= 0 {
				a.t.Fatalf("%s: cap=%q: want rates > 0", a.d.Pos, c)
			}
			p.cap = append(p.cap, r)
		}
		for len(p.cap) < len(p.base) {
			p.cap = append(p.cap, p.cap[0])
		}
		p.gain = []float64{0}
	}
	if len(p.base) == 0 || len(p.gain) == 0 {
		a.t.Fatalf("%s: run needs base= and gain= (or cap=)", a.d.Pos)
	}
	for len(p.gain) < len(p.base) {
		p.gain = append(p.gain, p.gain[0])
	}
	p.rng = rand.New(rand.NewSource(int64(a.int("seed", 1))))
	p.stallP, p.stallLat = a.float("stalls", 0), a.dur("stalllat", 0)
	p.stallRng = rand.New(rand.NewSource(int64(a.int("seed", 1)) + 1))
	if b, ok := a.raw("burst"); ok {
		from, to, _ := strings.Cut(b, "-")
		f, err1 := strconv.Atoi(from)
		tt, err2 := strconv.Atoi(to)
		if err1 != nil || err2 != nil {
			a.t.Fatalf("%s: burst=%q: want from-to steps", a.d.Pos, b)
		}
		p.burst.from, p.burst.to = f, tt
		p.burst.add = a.dur("burstlat", 0)
	}
	return p
}

// trace is what a closed-loop run recorded, one entry per step.
type trace struct {
	lat   []float64 // worst latency seen by the controller, ms
	rate  []float64 // decided rate, MB/s
	holds int
}

// plots renders a latency chart (with a reference line at ref ms, if > 0)
// and a rate chart, as the transcript of a run.
func (tr trace) plots(ref float64, refName string, maxRate float64) string {
	var refs []asciiplot.Ref
	if ref > 0 {
		refs = []asciiplot.Ref{{Name: refName, Y: ref, Mark: '-'}}
	}
	var b strings.Builder
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "latency ms", Y: tr.lat, Mark: '*'}},
		asciiplot.Options{Width: 60, Height: 8, Refs: refs}))
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "rate MB/s", Y: tr.rate, Mark: '#'}},
		asciiplot.Options{Width: 60, Height: 8, YMin: 0, YMax: maxRate / mb}))
	return b.String()
}

// stats summarises the last half of a run: mean latency and rate.
func (tr trace) stats() (meanLat, meanRate float64) {
	h := len(tr.lat) / 2
	for i := h; i < len(tr.lat); i++ {
		meanLat += tr.lat[i]
		meanRate += tr.rate[i]
	}
	n := float64(len(tr.lat) - h)
	return meanLat / n, meanRate / n
}

// meanFrom is the mean latency from step k to the end of the run.
func (tr trace) meanFrom(k int) float64 {
	var sum float64
	for _, l := range tr.lat[k:] {
		sum += l
	}
	return sum / float64(len(tr.lat)-k)
}

// settle returns the first step from which the latency stays within ±tol
// (relative) of ref until the end, or -1.
func (tr trace) settle(ref, tol float64) int {
	k := -1
	for i := len(tr.lat) - 1; i >= 0; i-- {
		if math.Abs(tr.lat[i]-ref) > tol*ref {
			break
		}
		k = i
	}
	return k
}

// fmtDecision prints one decision on a line.
func fmtDecision(d Decision) string {
	return fmt.Sprintf("rate=%.3fMB/s prefetch=%.3fMB/s hold=%t %s", d.Rate/mb, d.Prefetch/mb, d.Hold, d.Reason)
}

// slackerParams is the slacker profile's PID parameters (the paper's law,
// each option off), setpoint and max rate left 0.
func slackerParams() PIDParams {
	p, err := ProfileNamed("slacker")
	if err != nil {
		panic(err)
	}
	return p.PID(0, 0, StatMean)
}
