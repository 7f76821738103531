package control

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata/. Each file starts with no
// controller. Directives:
//
//	fixed rate=<rate>
//	pid setpoint=<dur> max=<rate> [kp= ki= kd= initial= stat=]
//	integral max=<rate> k=<rate>/<dur> [p= contract=<dur> initial=<rate>]
//	step [lat=<dur>,...|err] [contract=<dur>,...]     one observation
//	run steps=N base=<dur>,... gain=<dur>/<unit>ps,... [contract=...]
//	    [noise=<rel sd> seed=N burst=<from>-<to> burstlat=<dur>]
//	                                                 closed loop on a linear plant
//
// (interference directives are in interference_test.go).
// Regenerate the expected output with `go test ./control -rewrite` and review
// the diff.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.do(t, d)
		})
	})
}

// script is the state of one testdata file.
type script struct {
	ctl      Controller
	rate     float64 // last decided rate, bytes/s (initial rate before any step)
	maxRate  float64
	ref      float64 // reference latency for plots and settling, ms
	refName  string
	contract []time.Duration
	k        int // steps taken
	inter    *interferenceScript
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
		p := DefaultPIDParams()
		p.Setpoint = a.dur("setpoint", 0)
		p.MaxRate = a.rate("max", 0)
		p.Kp, p.Ki, p.Kd = a.float("kp", p.Kp), a.float("ki", p.Ki), a.float("kd", p.Kd)
		p.Initial = a.float("initial", p.Initial)
		p.Stat = Statistic(a.str("stat", string(p.Stat)))
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
	if contracts == nil {
		contracts = s.contract
	}
	s.contract = contracts
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
			sigs = append(sigs, s.signals(a, []time.Duration{d})[0])
			sigs[len(sigs)-1].Name = fmt.Sprintf("s%d", len(sigs)-1)
			if c := s.contract; len(c) >= len(sigs) {
				sigs[len(sigs)-1].Contract = c[len(sigs)-1]
			}
		}
	}
	dec := s.ctl.Next(Observation{At: s.at(), Signals: sigs})
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
	var tr trace
	lats := plant.latency(0, s.rate)
	for range steps {
		dec := s.ctl.Next(Observation{At: s.at(), Signals: s.signals(a, lats)})
		worst := lats[0]
		for _, l := range lats {
			worst = max(worst, l)
		}
		tr.lat = append(tr.lat, ms(worst))
		tr.rate = append(tr.rate, dec.Rate/mb)
		if dec.Hold {
			tr.holds++
		}
		s.rate = dec.Rate
		s.k++
		lats = plant.latency(s.k, dec.Rate)
	}
	ml, mr := tr.stats()
	var b strings.Builder
	fmt.Fprintf(&b, "steps=%d last half: mean worst latency=%.2fms mean rate=%.2fMB/s", steps, ml, mr)
	if s.ref > 0 {
		fmt.Fprintf(&b, " (%s %.2fms, %+.1f%%)", s.refName, s.ref, 100*(ml-s.ref)/s.ref)
		if k := tr.settle(s.ref, 0.05); k >= 0 {
			fmt.Fprintf(&b, "; within ±5%% from step %d", k)
		} else {
			b.WriteString("; not settled within ±5%")
		}
	}
	fmt.Fprintf(&b, "; holds=%d\n", tr.holds)
	b.WriteString(tr.plots(s.ref, s.refName, s.maxRate))
	return b.String()
}

// ms converts d to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
