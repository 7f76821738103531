package control

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicedb/sluice/internal/asciiplot"
)

// interferenceScript is the interference part of a script's state.
type interferenceScript struct {
	hosts map[string]HostIO
	ctl   *Interference
}

// interference runs the interference directives; ok is false for others:
//
//	interference max=<rate> [threshold= high= low= lock= unlock= maxlocked= kp= ki= kd= factor= initial= model=<model file>]
//	host name=<n> iops=<ops/s> util=<0..1> tput=<rate> [ticks=<ms/s>]   (prints p)
//	feed <name>*<count> ...       steps; "none" = not measured, "fail" = failed read
//	fit n=<samples> folds=<k> seed=<s>
//	rundisk steps=N base=<host> bg=<host> from=<step> to=<step> disk=<rate> io=<bytes> buffer=<bytes>
//	    closed loop on a toy disk: the migration's disk reads add to the
//	    base host state (plus bg during [from, to)); sends drain a read-ahead
//	    buffer filled by those reads
func (s *script) interference(t *testing.T, d *datadriven.TestData) (string, bool) {
	if s.inter == nil {
		s.inter = &interferenceScript{hosts: map[string]HostIO{}}
	}
	in := s.inter
	a := args{t, d}
	switch d.Cmd {
	case "interference":
		p := DefaultInterferenceParams()
		p.MaxRate = a.rate("max", 0)
		p.Threshold = a.float("threshold", p.Threshold)
		p.High, p.Low = a.float("high", p.High), a.float("low", p.Low)
		p.LockAfter, p.UnlockAfter = a.int("lock", p.LockAfter), a.int("unlock", p.UnlockAfter)
		p.MaxLocked = a.int("maxlocked", p.MaxLocked)
		p.Kp, p.Ki, p.Kd = a.float("kp", p.Kp), a.float("ki", p.Ki), a.float("kd", p.Kd)
		p.PrefetchFactor = a.float("factor", p.PrefetchFactor)
		p.Initial = a.float("initial", p.Initial)
		if path := a.str("model", ""); path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				a.t.Fatalf("%s: %v", a.d.Pos, err)
			}
			if _, p.Model, err = ParseModelFile(b); err != nil {
				return "error: " + err.Error(), true
			}
		}
		c, err := NewInterference(p)
		if err != nil {
			return "error: " + err.Error(), true
		}
		in.ctl, s.ctl, s.maxRate = c, c, p.MaxRate
		return "ok", true
	case "host":
		name := a.str("name", "")
		util := a.float("util", 0)
		h := HostIO{IOPS: a.float("iops", 0), Util: util, Throughput: a.rate("tput", 0), IOTicks: a.float("ticks", util*1000)}
		in.hosts[name] = h
		return fmt.Sprintf("%s: p=%.3f logit=%+.2f", name, DefaultModel().Prob(h), DefaultModel().Logit(h)), true
	case "feed":
		return s.feed(a), true
	case "fit":
		return fitScript(a), true
	case "rundisk":
		return s.runDisk(a), true
	}
	return "", false
}

// feed steps the interference controller through named host states.
func (s *script) feed(a args) string {
	in := s.inter
	if in.ctl == nil {
		a.t.Fatalf("%s: feed before interference", a.d.Pos)
	}
	var b strings.Builder
	var probs, rates, prefetch []float64
	b.WriteString(" k state  p      lock rate MB/s prefetch MB/s hold\n")
	for _, arg := range a.d.CmdArgs {
		name, count := arg.Key, 1
		if n, c, ok := strings.Cut(arg.Key, "*"); ok {
			name = n
			if _, err := fmt.Sscanf(c, "%d", &count); err != nil {
				a.t.Fatalf("%s: %q: bad count", a.d.Pos, arg.Key)
			}
		}
		for range count {
			var host *HostIO
			switch name {
			case "none":
			case "fail":
				host = &HostIO{Err: errors.New("diskstats: read failed")}
			default:
				h, ok := in.hosts[name]
				if !ok {
					a.t.Fatalf("%s: unknown host state %q", a.d.Pos, name)
				}
				host = &h
			}
			dec := in.ctl.Next(Observation{At: s.at(), Host: host})
			p, _ := in.ctl.Prob()
			ps := fmt.Sprintf("%.3f", p)
			if dec.Hold {
				ps, p = "  -  ", math.NaN()
			}
			lock := "-"
			if in.ctl.Locked() {
				lock = "L"
			}
			fmt.Fprintf(&b, "%2d %-6s %s  %s    %7.2f   %7.2f       %t\n", s.k, name, ps, lock, dec.Rate/mb, dec.Prefetch/mb, dec.Hold)
			probs = append(probs, p)
			rates = append(rates, dec.Rate/mb)
			prefetch = append(prefetch, dec.Prefetch/mb)
			s.k++
		}
	}
	p := in.ctl.Params()
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "p(interference)", Y: probs, Mark: 'p'}},
		asciiplot.Options{Width: 60, Height: 6, YMin: 0, YMax: 1, Refs: []asciiplot.Ref{{Name: "high", Y: p.High, Mark: '-'}, {Name: "low", Y: p.Low, Mark: '.'}}}))
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "prefetch MB/s", Y: prefetch, Mark: 'f'}, {Name: "send MB/s", Y: rates, Mark: '#'}},
		asciiplot.Options{Width: 60, Height: 6, YMin: 0, YMax: p.PrefetchFactor * p.MaxRate / mb}))
	return b.String()
}

// syntheticHosts draws n host I/O samples over a wide range of loads, from
// rng: utilisation uniform in [0, 1], IOPS log-uniform in [10, 5000], request
// size log-uniform in [4 KiB, 1 MiB] (throughput = IOPS × size, capped at
// 500 MiB/s), io_ticks consistent with utilisation.
func syntheticHosts(rng *rand.Rand, n int) []HostIO {
	out := make([]HostIO, n)
	for i := range out {
		util := rng.Float64()
		iops := 10 * math.Pow(500, rng.Float64())
		size := 4096 * math.Pow(256, rng.Float64())
		out[i] = HostIO{IOPS: iops, Util: util, IOTicks: util * 1000, Throughput: math.Min(iops*size, 500*(1<<20))}
	}
	return out
}

// fitScript fits a model to a seeded synthetic set whose labels are drawn from
// the default model's probabilities, and reports cross-validation accuracy
// against the accuracy of the true model on the same samples (the best any
// classifier can expect on average).
func fitScript(a args) string {
	n, folds, seed := a.int("n", 400), a.int("folds", 5), int64(a.int("seed", 1))
	rng := rand.New(rand.NewSource(seed))
	truth := DefaultModel()
	samples := make([]Sample, n)
	for i, h := range syntheticHosts(rng, n) {
		samples[i] = Sample{IO: h, Interfering: rng.Float64() < truth.Prob(h)}
	}
	m, rep, err := Fit(samples, folds, seed)
	if err != nil {
		return "error: " + err.Error()
	}
	trueAcc, _ := score(truth, samples)
	// Agreement of the fitted and the true model's decisions on fresh hosts.
	fresh := syntheticHosts(rand.New(rand.NewSource(seed+1000)), 2000)
	agree, maxDiff := 0, 0.0
	for _, h := range fresh {
		pf, pt := m.Prob(h), truth.Prob(h)
		if (pf >= 0.5) == (pt >= 0.5) {
			agree++
		}
		maxDiff = math.Max(maxDiff, math.Abs(pf-pt))
	}
	pos := 0
	for _, s := range samples {
		if s.Interfering {
			pos++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "samples=%d interfering=%d folds=%d seed=%d lbfgs iterations=%d\n", n, pos, folds, seed, rep.Iterations)
	for i := range rep.Accuracy {
		fmt.Fprintf(&b, "fold %d: accuracy=%.3f f1=%.3f\n", i, rep.Accuracy[i], rep.F1[i])
	}
	fmt.Fprintf(&b, "cv mean accuracy=%.3f mean f1=%.3f; train accuracy=%.3f; true model on these samples=%.3f\n",
		rep.MeanAccuracy, rep.MeanF1, rep.TrainAccuracy, trueAcc)
	fmt.Fprintf(&b, "fitted vs true model on 2000 fresh hosts: same decision %.1f%%, max |Δp|=%.3f\n", 100*float64(agree)/2000, maxDiff)
	fmt.Fprintf(&b, "standardised coefficients: intercept=%+.3f", m.Intercept)
	for i, c := range m.Coef {
		fmt.Fprintf(&b, " %s=%+.3f", FeatureNames[i], c)
	}
	b.WriteByte('\n')
	return b.String()
}

// runDisk closes the interference loop around a toy host disk. Each step the
// migration reads R from disk into its buffer (the prefetch rate, or only
// what the sender takes once the buffer is full; nothing while locked), and
// sends min(rate, buffered). The host's I/O the controller sees next step is
// the base (and bg, while scripted) workload's plus the migration's reads:
// util += R/disk, IOPS += R/io, throughput += R.
func (s *script) runDisk(a args) string {
	in := s.inter
	if in.ctl == nil {
		a.t.Fatalf("%s: rundisk before interference", a.d.Pos)
	}
	base, ok1 := in.hosts[a.str("base", "")]
	bg, ok2 := in.hosts[a.str("bg", "")]
	if !ok1 || !ok2 {
		a.t.Fatalf("%s: rundisk needs base= and bg= host states", a.d.Pos)
	}
	steps, from, to := a.int("steps", 60), a.int("from", 0), a.int("to", 0)
	disk, io, capBytes := a.rate("disk", 200*mb), a.rate("io", 512<<10), a.rate("buffer", 1000*mb)
	var buf, read, sent float64
	var probs, sends, reads, bufs []float64
	locked := 0
	for k := range steps {
		w := base
		if k >= from && k < to {
			w = bg
		}
		h := HostIO{
			IOPS:       w.IOPS + read/io,
			Util:       math.Min(1, w.Util+read/disk),
			Throughput: w.Throughput + read,
		}
		h.IOTicks = h.Util * 1000
		d := in.ctl.Next(Observation{At: s.at(), Host: &h})
		s.k++
		p, _ := in.ctl.Prob()
		if in.ctl.Locked() {
			locked++
		}
		// This step's reads: prefetch while there is room, else only what
		// the sender takes.
		read = math.Min(d.Prefetch, capBytes-buf+d.Rate)
		read = math.Max(read, 0)
		buf += read
		out := math.Min(d.Rate, buf)
		buf -= out
		sent += out
		probs = append(probs, p)
		sends = append(sends, out/mb)
		reads = append(reads, read/mb)
		bufs = append(bufs, buf/mb)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "steps=%d sent=%.0fMB locked steps=%d final buffer=%.0fMB\n", steps, sent/mb, locked, buf/mb)
	p := in.ctl.Params()
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "p(interference)", Y: probs, Mark: 'p'}},
		asciiplot.Options{Width: 60, Height: 6, YMin: 0, YMax: 1, Refs: []asciiplot.Ref{{Name: "high", Y: p.High, Mark: '-'}, {Name: "low", Y: p.Low, Mark: '.'}}}))
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "disk read MB/s", Y: reads, Mark: 'r'}, {Name: "sent MB/s", Y: sends, Mark: '#'}},
		asciiplot.Options{Width: 60, Height: 8, YMin: 0}))
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "buffer MB", Y: bufs, Mark: 'b'}},
		asciiplot.Options{Width: 60, Height: 5, YMin: 0, YMax: capBytes / mb}))
	return b.String()
}
