package sim

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sluicedb/sluice/control"
)

// fixedRate is a local constant-rate controller: the plant's tests must not
// depend on control's constructors.
type fixedRate float64

func (f fixedRate) Name() string     { return "fixed" }
func (f fixedRate) Initial() float64 { return float64(f) }
func (f fixedRate) Next(control.Observation) control.Decision {
	return control.Decision{Rate: float64(f), Prefetch: float64(f)}
}

// recorder wraps a controller and keeps every observation it was shown.
type recorder struct {
	control.Controller
	obs []control.Observation
}

func (r *recorder) Next(o control.Observation) control.Decision {
	r.obs = append(r.obs, o)
	return r.Controller.Next(o)
}

var _ control.Controller = fixedRate(0)

func mustLookup(t *testing.T, name string) Scenario {
	t.Helper()
	s, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustRun(t *testing.T, s Scenario, c control.Controller, o Options) Result {
	t.Helper()
	r, err := Run(s, c, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDeterministic(t *testing.T) {
	s := mustLookup(t, "bursty")
	a := mustRun(t, s, fixedRate(7e6), Options{Seed: 7})
	b := mustRun(t, s, fixedRate(7e6), Options{Seed: 7})
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results: %+v vs %+v", a.Summary(), b.Summary())
	}
	c := mustRun(t, s, fixedRate(7e6), Options{Seed: 8})
	if a.MeanLatency == c.MeanLatency {
		t.Fatalf("seeds 7 and 8 gave the same mean latency %v", a.MeanLatency)
	}
}

// A migration at rate 0 changes nothing, so its latency is exactly the idle
// twin's: the twin sees the same transactions.
func TestIdleTwinMatchesPausedRun(t *testing.T) {
	s := mustLookup(t, "steady")
	r := mustRun(t, s, fixedRate(0), Options{Seed: 3, MaxDuration: 40 * time.Second})
	if r.Completed {
		t.Fatal("a paused migration completed")
	}
	if r.MigrationSeconds != 40 || r.MeanRate != 0 {
		t.Fatalf("paused run: %v s at %v B/s, want 40 s at 0", r.MigrationSeconds, r.MeanRate)
	}
	if r.MeanLatency != r.IdleLatency {
		t.Fatalf("paused run mean %v != idle twin %v", r.MeanLatency, r.IdleLatency)
	}
}

func TestMigrationTimeAndLatencyRiseWithRate(t *testing.T) {
	s := mustLookup(t, "steady")
	var prev time.Duration
	for _, rate := range []float64{2e6, 6e6, 9e6} {
		r := mustRun(t, s, fixedRate(rate), Options{Seed: 1})
		want := float64(s.Plant.Size) / rate
		if !r.Completed || math.Abs(r.MigrationSeconds-want) > 0.02 {
			t.Fatalf("rate %v: %v s (completed %v), want %.2f s", rate, r.MigrationSeconds, r.Completed, want)
		}
		if r.MeanLatency <= prev || r.MeanLatency <= r.IdleLatency {
			t.Fatalf("rate %v: mean %v not above %v and idle %v", rate, r.MeanLatency, prev, r.IdleLatency)
		}
		prev = r.MeanLatency
	}
}

// Unthrottled, the migration takes more than the server has: latency grows
// without bound (Slacker Fig. 6), and the idle twin stays put.
func TestUnthrottledOverloads(t *testing.T) {
	s := mustLookup(t, "steady")
	r := mustRun(t, s, fixedRate(s.Plant.MaxRate), Options{Seed: 1})
	if r.MeanLatency < 100*r.IdleLatency {
		t.Fatalf("unthrottled mean %v, idle %v: want a runaway queue", r.MeanLatency, r.IdleLatency)
	}
	if r.ViolationFraction < 0.9 {
		t.Fatalf("unthrottled violation fraction %v", r.ViolationFraction)
	}
}

func TestControllerSeesWindowAndHostIO(t *testing.T) {
	s := mustLookup(t, "multitenant")
	rec := &recorder{Controller: fixedRate(8e6)}
	r := mustRun(t, s, rec, Options{Seed: 2})
	if len(rec.obs) != r.Steps || r.Steps < int(r.MigrationSeconds) {
		t.Fatalf("%d observations, %d steps, %v s", len(rec.obs), r.Steps, r.MigrationSeconds)
	}
	for i, o := range rec.obs {
		if len(o.Signals) != len(s.Stores) {
			t.Fatalf("step %d: %d signals", i, len(o.Signals))
		}
		for j, sig := range o.Signals {
			if sig.Err != nil || sig.Mean <= 0 || sig.P99 < sig.P95 || sig.Count == 0 || sig.Contract != s.Stores[j].Contract {
				t.Fatalf("step %d signal %d: %+v", i, j, sig)
			}
		}
		h := o.Host
		if h == nil || h.Err != nil || h.IOPS <= 0 || h.Util < 0 || h.Util > 1 || h.IOTicks < 0 || h.IOTicks > 1000 || h.Throughput <= 0 {
			t.Fatalf("step %d host %+v", i, h)
		}
		if i > 0 && !o.At.After(rec.obs[i-1].At) {
			t.Fatalf("step %d time %v not after %v", i, o.At, rec.obs[i-1].At)
		}
	}
	// Mid-migration the disk is busier than before it.
	if first, mid := rec.obs[0].Host, rec.obs[len(rec.obs)/2].Host; mid.Util <= first.Util || mid.Throughput <= first.Throughput {
		t.Fatalf("host before %+v, during %+v", first, mid)
	}
}

// A controller that prefetches into the buffer and then sends from it
// moves the data with fewer disk reads while it sends from memory.
func TestPrefetchBuffer(t *testing.T) {
	s := mustLookup(t, "steady")
	c := &prefetcher{}
	r := mustRun(t, s, c, Options{Seed: 1})
	if !r.Completed {
		t.Fatal("not completed")
	}
	var sawBuffer, sentFromMemory bool
	for _, p := range r.Points {
		if p.Buffered > 0 {
			sawBuffer = true
		}
		if p.Phase == "migrating" && p.Rate > 0 && p.Read == 0 {
			sentFromMemory = true
		}
	}
	if !sawBuffer || !sentFromMemory {
		t.Fatalf("buffer used %v, sent from memory %v", sawBuffer, sentFromMemory)
	}
}

// prefetcher reads ahead for 20 steps without sending, then sends without
// reading.
type prefetcher struct{ k int }

func (p *prefetcher) Name() string     { return "prefetcher" }
func (p *prefetcher) Initial() float64 { return 0 }
func (p *prefetcher) Next(control.Observation) control.Decision {
	p.k++
	if p.k <= 20 {
		return control.Decision{Rate: 0, Prefetch: 8e6}
	}
	return control.Decision{Rate: 8e6, Prefetch: 0}
}

func TestBadOptions(t *testing.T) {
	s := mustLookup(t, "steady")
	for name, o := range map[string]Options{
		"negative setpoint": {Setpoint: -time.Millisecond},
		"fractional step":   {Step: 1500 * time.Millisecond},
		"fractional window": {Window: 500 * time.Millisecond},
		"tick":              {Tick: 7 * time.Millisecond},
		"negative contract": {Contract: -1},
		"nan noise":         {Noise: math.NaN()},
	} {
		if _, err := Run(s, fixedRate(1e6), o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Run(s, nil, Options{}); err == nil {
		t.Error("nil controller: no error")
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("unknown scenario: no error")
	}
	if _, err := NewController(s, ControllerConfig{Kind: "nope"}, Options{}); err == nil {
		t.Error("unknown controller: no error")
	}
	slow := control.DefaultProfile()
	slow.StepMs = 2000
	if _, err := NewController(s, ControllerConfig{Kind: "pid", Profile: slow}, Options{}); err == nil {
		t.Error("profile stepping every 2 s in a run stepping every 1 s: no error")
	}
	if _, err := NewController(s, ControllerConfig{Kind: "pid", Profile: slow}, Options{Step: 2 * time.Second}); err != nil {
		t.Errorf("profile and run stepping every 2 s: %v", err)
	}
}

func TestEveryScenarioAndControllerRuns(t *testing.T) {
	for _, sc := range Scenarios() {
		for _, kind := range ControllerNames {
			c, err := NewController(sc, ControllerConfig{Kind: kind, Rate: 6e6}, Options{Seed: 1})
			if err != nil {
				t.Fatalf("%s/%s: %v", sc.Name, kind, err)
			}
			r, err := Run(sc, c, Options{Seed: 1, MaxDuration: 5 * time.Minute})
			if err != nil {
				t.Fatalf("%s/%s: %v", sc.Name, kind, err)
			}
			if r.Controller != kind || r.Steps == 0 || len(r.Points) == 0 || r.IdleLatency <= 0 {
				t.Fatalf("%s/%s: %+v", sc.Name, kind, r.Summary())
			}
			t.Logf("%-11s %-12s %s", sc.Name, kind, summaryLine(r))
		}
	}
}

func summaryLine(r Result) string {
	return fmt.Sprintf("%6.1f s, mean %v, idle %v, violations %.3f", r.MigrationSeconds,
		r.MeanLatency.Round(10*time.Microsecond), r.IdleLatency.Round(10*time.Microsecond), r.ViolationFraction)
}

func TestProfileFitsConvexPlant(t *testing.T) {
	s := mustLookup(t, "steady")
	p, err := ProfilePlant(s, ProfileOptions{}, Options{Seed: 1, Setpoint: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	last := p.Points[len(p.Points)-1]
	if !last.Over || last.Latency <= 30*time.Millisecond {
		t.Fatalf("profile should stop at the first step over the contract, last %+v", last)
	}
	if p.Local.G <= 2*p.Global.G || p.Local.R2 < 0.9 || p.Global.R2 <= 0 || p.Global.R2 > 1 {
		t.Fatalf("global %+v local %+v: want a local gain well above the global one, R² in range", p.Global, p.Local)
	}
	t.Logf("global G=%.3g R²=%.3f, local G=%.3g R²=%.3f over %d steps", p.Global.G, p.Global.R2, p.Local.G, p.Local.R2, p.Local.Points)
}

func TestRecovery(t *testing.T) {
	mk := func(lat ...float64) []Point {
		var ps []Point
		for i, l := range lat {
			ps = append(ps, Point{T: float64(i + 1), Latency: time.Duration(l * float64(time.Millisecond)), Count: 100})
		}
		return ps
	}
	sp := 30 * time.Millisecond
	for name, tc := range map[string]struct {
		lat  []float64
		want float64
		ok   bool
	}{
		"never left":      {[]float64{30, 31, 29, 30}, 0, true},
		"spike then back": {[]float64{30, 90, 60, 10, 20, 29, 30}, 6, true},
		"never back":      {[]float64{30, 90, 60, 40, 40}, math.Inf(1), false},
	} {
		got, ok := Recovery(mk(tc.lat...), 0, 1, sp, 0.1, 100)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %v %v, want %v %v", name, got, ok, tc.want, tc.ok)
		}
	}
}

// The plant's host I/O figures separate calm from interfering steps well
// enough for the thesis's logistic model, fitted on the plant.
func TestFitInterferenceOnPlant(t *testing.T) {
	s := mustLookup(t, "steady")
	f, err := FitInterference(s, Options{Seed: 1, Setpoint: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples, %d interfering: %d-fold CV accuracy %.3f (folds %v), F1 %.3f", f.Samples, f.Positive, f.CV.Folds, f.CV.MeanAccuracy, f.CV.Accuracy, f.CV.MeanF1)
	if f.Positive == 0 || f.Positive == f.Samples || f.CV.MeanAccuracy < 0.8 {
		t.Fatalf("fit: %+v", f.CV)
	}
	// The default (thesis) model reads this plant as calm at any load: that
	// is why the fitted one is the default here.
	rec := &recorder{Controller: fixedRate(s.Plant.MaxRate)}
	mustRun(t, s, rec, Options{Seed: 1, MaxDuration: 30 * time.Second})
	busy := *rec.obs[len(rec.obs)-1].Host
	if p := control.DefaultModel().Prob(busy); p > 0.01 {
		t.Fatalf("thesis model on an overloaded plant: p=%.3f (host %+v)", p, busy)
	}
	if p := f.Model.Prob(busy); p < 0.5 {
		t.Fatalf("fitted model on an overloaded plant: p=%.3f (host %+v)", p, busy)
	}
}
