package sim

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/control/tune"
)

// Controller kinds NewController knows.
var ControllerNames = []string{"fixed", "pid", "integral", "interference"}

// SteersToSetpoint reports whether controller kind steers to a latency
// setpoint (pid, interference); the others are judged by the contract
// alone, and a run of theirs has no setpoint to report.
func SteersToSetpoint(kind string) bool { return kind == "pid" || kind == "interference" }

// ControllerConfig selects and parameterises a controller for a scenario.
type ControllerConfig struct {
	Kind     string        // one of ControllerNames
	Setpoint time.Duration // PID setpoint; default the scenario's
	// Profile is the loop's tuning, as for `sluice migrate --profile`: the
	// PID's gains and options, and the governor's settling; the zero value
	// is control.DefaultProfile(). Its top speed gives way to the plant's
	// (Plant.MaxRate), and its step must be the run's (Options.Step).
	Profile control.Profile
	Rate    float64 // fixed: the rate, bytes/s; < 0 or +Inf: Plant.MaxRate (unthrottled)
	// Integral: K and Initial; 0 means from the tune path (profile the
	// scenario, fit the local gain, K = (1−Pole)/G, start at Tuned.Start).
	K       float64
	Pole    float64 // integral pole for the tuned K; default DefaultPole
	P       float64 // integral reference fraction; default control's 0.9
	Initial float64 // bytes/s; integral only
	// Model is the interference model; nil means one fitted to the scenario
	// (FitInterference).
	Model *control.Model
}

// DefaultPole is the integral pole the simulator tunes K for: 0.7, a
// monotone approach that settles in ~10 steps (Aqueduct used 0.49 for its
// bursty OpenMail trace; the plant here is steeper near the contract).
const DefaultPole = 0.7

// Tuned is the tune path's answer for a scenario.
type Tuned struct {
	Profile Profile
	K       float64 // (1−pole)/G_local, (bytes/s) per second of error
	Pole    float64
	Start   float64 // suggested starting rate, bytes/s
	PID     tune.PIDProposal
}

// Tune profiles s, fits the local gain and proposes K for pole and PID gains
// for the setpoint (spectral radius radius, window of opt.Window steps). It
// refuses an unstable pole unless force.
func Tune(s Scenario, opt Options, pole, radius float64, force bool) (Tuned, error) {
	o, err := opt.resolve(s)
	if err != nil {
		return Tuned{}, err
	}
	prof, err := ProfilePlant(s, ProfileOptions{}, o)
	if err != nil {
		return Tuned{}, err
	}
	t := Tuned{Profile: prof, Pole: pole}
	G := prof.Local.G
	if force {
		t.K = tune.KForPole(G, pole)
	} else if t.K, err = tune.ProposeK(G, pole); err != nil {
		return t, err
	}
	t.Start = prof.StartRate()
	win := int(o.Window / o.Step)
	if t.PID, err = tune.ProposePID(G, o.Setpoint, s.Plant.MaxRate, win, radius); err != nil {
		return t, err
	}
	return t, nil
}

// StartRate is the highest rung within the contracts whose binding-store
// latency is at most StartFraction of its contract: a rate known to be safe
// from which a controller need not ramp far. Under a contract so tight that
// no rung is that far below it, it is the lowest non-zero rung within the
// contracts: never 0 while one exists, as a controller that starts paused
// never sees its copy start, and a governed one then waits for ever.
func (p Profile) StartRate() float64 {
	var r, lowest float64
	for _, pt := range p.Points {
		if pt.Over {
			break
		}
		if lowest == 0 && pt.Rate > 0 {
			lowest = pt.Rate
		}
		if lat := p.bindingLatency(pt); lat <= time.Duration(StartFraction*float64(p.BindingContract)) {
			r = pt.Rate
		}
	}
	if r == 0 {
		return lowest
	}
	return r
}

// StartFraction bounds the starting rate: the binding store at no more than
// 75% of its contract.
const StartFraction = 0.75

func (p Profile) bindingLatency(pt ProfilePoint) time.Duration {
	for i, name := range p.StoreNames {
		if name == p.Binding {
			return pt.Stores[i]
		}
	}
	return pt.Latency
}

// NewController builds the controller cfg names for scenario s run with
// opt, as the agent builds a migration's: the controller inside a
// control.Governor with the profile's policy (settling for the controllers
// that steer by latency). The simulated migration is one copy, so the
// governor's catch-up floor never acts.
func NewController(s Scenario, cfg ControllerConfig, opt Options) (control.Controller, error) {
	sp := cfg.Setpoint
	if sp == 0 {
		sp = s.Setpoint
	}
	prof := cfg.Profile
	if prof.Name == "" {
		prof = control.DefaultProfile()
	}
	ctl, err := newController(s, cfg, opt, sp, prof)
	if err != nil {
		return nil, err
	}
	byLatency := cfg.Kind == "pid" || cfg.Kind == "integral"
	return control.NewGovernor(ctl, prof.Governor(sp, s.Plant.MaxRate, byLatency)), nil
}

// newController is NewController's controller, ungoverned, at setpoint sp.
func newController(s Scenario, cfg ControllerConfig, opt Options, sp time.Duration, prof control.Profile) (control.Controller, error) {
	max := s.Plant.MaxRate
	switch cfg.Kind {
	case "fixed":
		r := cfg.Rate
		if r < 0 || math.IsInf(r, 1) {
			r = max
		}
		return control.NewFixed(math.Min(r, max))
	case "pid":
		step := opt.Step
		if step == 0 {
			step = DefaultStep
		}
		if prof.Step() != step {
			return nil, fmt.Errorf("sim: profile %s steps every %v, the run every %v: its gains are per step", prof.Label(), prof.Step(), step)
		}
		return control.NewPID(prof.PID(sp, max, control.StatMean))
	case "integral":
		p := control.DefaultIntegralParams()
		p.MaxRate, p.K, p.Initial = max, cfg.K, cfg.Initial
		if cfg.P != 0 {
			p.P = cfg.P
		}
		if p.K == 0 || p.Initial == 0 {
			pole := cfg.Pole
			if pole == 0 {
				pole = DefaultPole
			}
			o := opt
			o.Setpoint = sp
			t, err := Tune(s, o, pole, 0.5, false)
			if err != nil {
				return nil, fmt.Errorf("sim: integral: tune: %w", err)
			}
			if p.K == 0 {
				p.K = t.K
			}
			if p.Initial == 0 {
				p.Initial = t.Start
			}
		}
		return control.NewIntegral(p)
	case "interference":
		p := control.DefaultInterferenceParams()
		p.MaxRate = max
		if cfg.Model != nil {
			p.Model = *cfg.Model
		} else {
			o := opt
			o.Setpoint = sp
			f, err := FitInterference(s, o)
			if err != nil {
				return nil, err
			}
			p.Model = f.Model
		}
		return control.NewInterference(p)
	}
	return nil, fmt.Errorf("unknown controller %q (want one of %s)", cfg.Kind, strings.Join(ControllerNames, ", "))
}
