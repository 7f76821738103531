package control

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicedb/sluice/control/tune"
)

// TestDataDriven runs the scripts in testdata/. Each file starts with no
// controller. Directives:
//
//	fixed rate=<rate>
//	pid setpoint=<dur> max=<rate> [kp= ki= kd= initial= stat= error= tuned]
//	integral max=<rate> k=<rate>/<dur> [p= contract=<dur> initial=<rate>]
//	step [lat=<dur>,...|err] [contract=<dur>,...]     one observation
//	run steps=N base=<dur>,... (gain=<dur>/<unit>ps,... | cap=<rate>,...) [contract=...]
//	    [noise=<rel sd> seed=N burst=<from>-<to> burstlat=<dur> window=<steps>
//	     plot=<store index> ref=<dur>]
//	                                                 closed loop on a linear plant
//	    (the plot shows the plant's worst latency each step; the controller
//	    sees each store's mean over the last window steps)
//	propose-pid gain=<dur>/<unit>ps setpoint=<dur> max=<rate> window=<steps> radius=<r>
//	    control/tune's gains for that plant; "pid ... tuned" then uses them
//	profile rates=<rate>,... steps=N <plant args as run>
//	    fixed-rate runs, one per rate: the profile `sluice tune` measures
//	recommend setpoint=<dur> max=<rate> [window= pole= radius=]
//	    tune.Recommend on the profile; "pid/integral ... recommended" use it
//
// (interference directives are in interference_test.go).
// Regenerate the expected output with `go test ./control -rewrite` and review
// the diff.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.HasSuffix(path, ".json") {
			return // a fixture the scripts load (model files)
		}
		s := &script{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.do(t, d)
		})
	})
}

// script is the state of one testdata file.
type script struct {
	ctl     Controller
	rate    float64 // last decided rate, bytes/s (initial rate before any step)
	maxRate float64
	ref     float64 // reference latency for plots and settling, ms
	refName string
	k       int // steps taken
	inter   *interferenceScript
	tuned   *tune.PIDProposal
	rec     *tune.Recommendation
	// profile: mean latency (s) of a fixed-rate run at each rate (bytes/s)
	profRates, profLats []float64
}

func (s *script) do(t *testing.T, d *datadriven.TestData) string {
	a := args{t, d}
	var err error
	switch d.Cmd {
	case "fixed":
		var f *Fixed
		if f, err = NewFixed(a.rate("rate", -1)); err == nil {
			s.ctl, s.rate, s.maxRate, s.ref = f, f.rate, f.rate, 0
		}
	case "pid":
		// profile= picks the base (default slacker: the paper's law, each
		// option off); the other arguments override it.
		prof, perr := ProfileNamed(a.str("profile", "slacker"))
		if perr != nil {
			return "error: " + perr.Error()
		}
		p := prof.PID(a.dur("setpoint", 0), a.rate("max", 0), StatMean)
		if d.HasArg("recommended") {
			if s.rec == nil {
				t.Fatalf("%s: pid recommended before recommend", d.Pos)
			}
			p.Kp, p.Ki, p.Kd = s.rec.PID.Kp, s.rec.PID.Ki, s.rec.PID.Kd
		}
		if d.HasArg("tuned") {
			if s.tuned == nil {
				t.Fatalf("%s: pid tuned before propose-pid", d.Pos)
			}
			p.Kp, p.Ki, p.Kd = s.tuned.Kp, s.tuned.Ki, s.tuned.Kd
		}
		p.Kp, p.Ki, p.Kd = a.float("kp", p.Kp), a.float("ki", p.Ki), a.float("kd", p.Kd)
		p.Initial = a.float("initial", p.Initial)
		p.Stat = Statistic(a.str("stat", string(p.Stat)))
		p.StartGrowth, p.StartExit = a.float("growth", p.StartGrowth), a.float("exit", p.StartExit)
		p.MeanHorizon, p.MeanBand = a.int("horizon", p.MeanHorizon), a.float("band", p.MeanBand)
		p.Reserve = a.dur("reserve", p.Reserve)
		var c *PID
		if c, err = NewPID(p); err == nil {
			s.ctl, s.rate, s.maxRate = c, p.Initial*p.MaxRate, p.MaxRate
			s.ref, s.refName = ms(p.Setpoint), "setpoint"
		}
	case "integral":
		p := DefaultIntegralParams()
		p.MaxRate = a.rate("max", 0)
		p.P = a.float("p", p.P)
		p.DefaultContract = a.dur("contract", p.DefaultContract)
		p.Initial = a.rate("initial", p.Initial)
		if d.HasArg("recommended") {
			if s.rec == nil {
				t.Fatalf("%s: integral recommended before recommend", d.Pos)
			}
			p.K = s.rec.K
		}
		if k, ok := a.raw("k"); ok {
			i := strings.LastIndex(k, "/")
			r, err1 := parseRate(k[:i])
			per, err2 := time.ParseDuration("1" + k[i+1:])
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: k=%q: want <rate>/<duration unit>", d.Pos, k)
			}
			p.K = r / per.Seconds()
		}
		var c *Integral
		if c, err = NewIntegral(p); err == nil {
			s.ctl, s.rate, s.maxRate = c, p.Initial, p.MaxRate
			s.ref, s.refName = ms(time.Duration(p.P*float64(p.DefaultContract))), "P*LC"
		}
	case "propose-pid":
		g := a.gains("gain")
		if len(g) != 1 {
			t.Fatalf("%s: propose-pid needs one gain=", d.Pos)
		}
		pr, err := tune.ProposePID(g[0], a.dur("setpoint", 0), a.rate("max", 0), a.int("window", 1), a.float("radius", 0.6))
		if err != nil {
			return "error: " + err.Error()
		}
		s.tuned = &pr
		return fmt.Sprintf("g=%.3f kp=%.4f ki=%.4f kd=%.4f radius=%.3f settle≈%d steps", pr.NormGain, pr.Kp, pr.Ki, pr.Kd, pr.Radius, pr.SettleSteps)
	case "profile":
		return s.profile(a)
	case "recommend":
		rec, err := tune.Recommend(s.profRates, s.profLats, a.dur("setpoint", 0), a.rate("max", 0),
			a.int("window", 1), a.float("pole", 0.5), a.float("radius", 0.6))
		if err != nil {
			return "error: " + err.Error()
		}
		s.rec = &rec
		var b strings.Builder
		fmt.Fprintf(&b, "line: G=%.3gms/MBps intercept=%.2fms R²=%.4f\n", rec.Line.G*1e9, rec.Line.Intercept*1e3, rec.Line.R2)
		if rec.Queue != nil {
			fmt.Fprintf(&b, "queue: L0=%.2fms capacity=%.2fMB/s R²(1/L)=%.4f\n", rec.Queue.L0*1e3, rec.Queue.Capacity/mb, rec.Queue.R2)
		}
		fmt.Fprintf(&b, "model=%s idle=%.2fms gain@setpoint=%.3gms/MBps rate@setpoint=%.2fMB/s\n", rec.Model, rec.IdleLatency*1e3, rec.Gain*1e9, rec.RateAtSetpoint/mb)
		fmt.Fprintf(&b, "integral: pole=%.2f K=%.3gMB/s per ms (stable below %.3g)\n", rec.Pole, rec.K/mb/1e3, 2/rec.Gain/mb/1e3)
		fmt.Fprintf(&b, "pid: kp=%.4f ki=%.4f kd=%.4f radius=%.3f settle≈%d steps\n", rec.PID.Kp, rec.PID.Ki, rec.PID.Kd, rec.PID.Radius, rec.PID.SettleSteps)
		for _, w := range rec.Warnings {
			fmt.Fprintf(&b, "warning: %s\n", w)
		}
		return b.String()
	case "step":
		return s.step(a)
	case "run":
		return s.run(a)
	default:
		if out, ok := s.interference(t, d); ok {
			return out
		}
		t.Fatalf("%s: unknown directive %q", d.Pos, d.Cmd)
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// signals builds the observation's signals from latencies, with contracts
// from the directive (or the script's) when given.
func (s *script) signals(a args, lats []time.Duration) []Signal {
	contracts := a.durs("contract")
	out := make([]Signal, len(lats))
	for i, l := range lats {
		out[i] = Signal{Name: fmt.Sprintf("s%d", i), Mean: l, P95: 2 * l, P99: 3 * l, Count: 100}
		if i < len(contracts) {
			out[i].Contract = contracts[i]
		}
	}
	return out
}

func (s *script) step(a args) string {
	if s.ctl == nil {
		a.t.Fatalf("%s: step before a controller", a.d.Pos)
	}
	var sigs []Signal
	if v, ok := a.raw("lat"); ok {
		for _, f := range strings.Split(v, ",") {
			if f == "err" {
				sigs = append(sigs, Signal{Name: fmt.Sprintf("s%d", len(sigs)), Err: errors.New("probe timed out")})
				continue
			}
			d, err := time.ParseDuration(f)
			if err != nil {
				a.t.Fatalf("%s: lat=%q: %v", a.d.Pos, v, err)
			}
			sigs = append(sigs, Signal{Name: fmt.Sprintf("s%d", len(sigs)), Mean: d, P95: 2 * d, P99: 3 * d, Count: 100})
		}
	}
	for i, c := range a.durs("contract") {
		if i < len(sigs) {
			sigs[i].Contract = c
		}
	}
	obs := Observation{At: s.at(), Signals: sigs, Remaining: a.dur("remaining", 0)}
	if a.d.HasArg("settling") { // as loop.Loop marks its Settle steps
		obs.Settling = true
		for i := range sigs {
			if sigs[i].Err == nil {
				sigs[i].Err = ErrSettling
			}
		}
	}
	dec := s.ctl.Next(obs)
	s.k++
	s.rate = dec.Rate
	return fmtDecision(dec)
}

// at is the time of the current step on the fixed 1 s grid.
func (s *script) at() time.Time {
	return time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).Add(time.Duration(s.k) * time.Second)
}

func (s *script) run(a args) string {
	if s.ctl == nil {
		a.t.Fatalf("%s: run before a controller", a.d.Pos)
	}
	plant := newPlant(a)
	steps := a.int("steps", 30)
	window := max(1, a.int("window", 1))
	plot := a.int("plot", -1) // store whose latency is plotted; -1: the worst
	ref := s.ref
	if r := a.dur("ref", 0); r > 0 {
		ref = ms(r)
	}
	// mb=N: the run is a copy of N MB at the decided rates, and ends with
	// it; each step tells the controller the time it has left at its
	// present rate (Observation.Remaining) unless untold is given.
	size := a.float("mb", 0) * mb
	// startup=N startuplat=D: the first N steps' latency is D at every
	// store (a migration's start-up: the snapshot's checkpoint), and the
	// steps while it is in the window are Settling, as loop.Loop marks them.
	startup, startupLat := a.int("startup", 0), a.dur("startuplat", 0)
	var moved float64
	copied := -1
	var tr trace
	var hist [][]time.Duration // per-step latencies of every store, newest last
	if startup > 0 {           // the window before the migration holds the idle server
		for range window - 1 {
			hist = append(hist, plant.latency(0, 0))
		}
	}
	lats := plant.latency(0, s.rate)
	for k := range steps {
		moved += s.rate // this step's copy, at the rate decided before it
		if k < startup {
			lats = slices.Repeat([]time.Duration{startupLat}, len(lats))
		}
		// The controller sees each store's mean over the last window steps.
		hist = append(hist, lats)
		if len(hist) > window {
			hist = hist[1:]
		}
		seen := make([]time.Duration, len(lats))
		for _, h := range hist {
			for i, l := range h {
				seen[i] += l / time.Duration(len(hist))
			}
		}
		obs := Observation{At: s.at(), Signals: s.signals(a, seen)}
		if size > 0 && s.rate > 0 && !a.d.HasArg("untold") {
			obs.Remaining = time.Duration(max(0, size-moved) / s.rate * float64(time.Second))
		}
		if k < startup+window-1 {
			obs.Settling = true
			for i := range obs.Signals {
				obs.Signals[i].Err = ErrSettling
			}
		}
		dec := s.ctl.Next(obs)
		shown := lats[0]
		if plot >= 0 {
			shown = lats[plot]
		} else {
			for _, l := range lats {
				shown = max(shown, l)
			}
		}
		tr.lat = append(tr.lat, ms(shown))
		tr.rate = append(tr.rate, dec.Rate/mb)
		if dec.Hold {
			tr.holds++
		}
		s.rate = dec.Rate
		s.k++
		lats = plant.latency(k+1, dec.Rate) // burst steps count from the run's start
		if size > 0 && moved >= size {
			copied = k + 1
			break
		}
	}
	ml, mr := tr.stats()
	var b strings.Builder
	what := "worst latency"
	if plot >= 0 {
		what = fmt.Sprintf("s%d latency", plot)
	}
	fmt.Fprintf(&b, "steps=%d last half: mean %s=%.2fms mean rate=%.2fMB/s", steps, what, ml, mr)
	if ref > 0 {
		fmt.Fprintf(&b, " (%s %.2fms, %+.1f%%)", s.refName, ref, 100*(ml-ref)/ref)
		if k := tr.settle(ref, 0.05); k >= 0 {
			fmt.Fprintf(&b, "; within ±5%% from step %d", k)
		} else {
			b.WriteString("; not settled within ±5%")
		}
	}
	fmt.Fprintf(&b, "; holds=%d\n", tr.holds)
	if size > 0 {
		if copied > 0 {
			fmt.Fprintf(&b, "copied %.0f MB in %d steps\n", size/mb, copied)
		} else {
			fmt.Fprintf(&b, "copied %.0f of %.0f MB in %d steps\n", moved/mb, size/mb, steps)
		}
	}
	if a.d.HasArg("whole") {
		wl := tr.meanFrom(a.int("whole", 0))
		fmt.Fprintf(&b, "from step %d: mean %s=%.2fms", a.int("whole", 0), what, wl)
		if ref > 0 {
			fmt.Fprintf(&b, " (%s %.2fms, %+.1f%%)", s.refName, ref, 100*(wl-ref)/ref)
		}
		b.WriteString("\n")
	}
	b.WriteString(tr.plots(ref, s.refName, s.maxRate))
	return b.String()
}

// ms converts d to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// profile runs a fixed rate for steps on the plant at each of rates= and
// records the mean latency of each run, as `sluice tune` profiles a plant.
func (s *script) profile(a args) string {
	s.profRates, s.profLats = nil, nil
	steps := a.int("steps", 30)
	v, _ := a.raw("rates")
	var b strings.Builder
	for _, f := range strings.Split(v, ",") {
		r, err := parseRate(f)
		if err != nil {
			a.t.Fatalf("%s: rates: %v", a.d.Pos, err)
		}
		plant := newPlant(a)
		var sum float64
		for k := range steps {
			l := plant.latency(k, r)
			worst := l[0]
			for _, x := range l {
				worst = max(worst, x)
			}
			sum += worst.Seconds()
		}
		mean := sum / float64(steps)
		s.profRates = append(s.profRates, r)
		s.profLats = append(s.profLats, mean)
		fmt.Fprintf(&b, "fixed %6.2fMB/s: mean latency %.2fms\n", r/mb, mean*1e3)
	}
	return b.String()
}
