package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicedb/sluice/control"
)

// Interference-model training settings.
const (
	TrainDuration = 300 * time.Second // length of the training run
	TrainHold     = 5                 // steps each random rate is held
	TrainFolds    = 5                 // k of the k-fold cross-validation (the thesis: 5)
	streamTrain   = 3                 // RNG stream of the training rates
)

// randomRates plays uniformly random rates in [0, max], each held for hold
// steps, and records what it was shown.
type randomRates struct {
	rng  *rand.Rand
	max  float64
	hold int
	k    int
	r    float64
	obs  []control.Observation
}

func (c *randomRates) Name() string { return "random" }

func (c *randomRates) Initial() float64 { return 0 }

func (c *randomRates) Next(o control.Observation) control.Decision {
	c.obs = append(c.obs, o)
	if c.k%c.hold == 0 {
		c.r = c.rng.Float64() * c.max
	}
	c.k++
	return control.Decision{Rate: c.r, Prefetch: c.r, Reason: "training"}
}

// InterferenceFit is a model trained on a scenario, with its figures.
type InterferenceFit struct {
	Model    control.Model
	CV       control.CVReport
	Samples  int
	Positive int // samples labelled interfering
}

// FitInterference trains the thesis's logistic interference model on
// scenario s, the way the thesis trained it on its host: a run of random
// fixed rates (each held TrainHold steps, drawn from opt.Seed) is recorded,
// every control step is labelled interfering when its worst window latency
// exceeded the setpoint (control.LabelByLatency), and control.Fit fits the
// model with TrainFolds-fold cross-validation.
//
// The thesis's own coefficients (control.DefaultModel) describe its host: a
// disk "busy with few operations". This plant's disk serves thousands of
// small page reads per second, which that model reads as calm (p ≈ 0 at any
// load), so a model fitted to the plant is the honest default here.
func FitInterference(s Scenario, opt Options) (InterferenceFit, error) {
	o, err := opt.resolve(s)
	if err != nil {
		return InterferenceFit{}, err
	}
	c := &randomRates{rng: rand.New(rand.NewPCG(o.Seed, streamTrain)), max: s.Plant.MaxRate, hold: TrainHold}
	big := s
	big.Plant.Size = math.MaxInt64 / 4
	o.MaxDuration = TrainDuration
	e := newEngine(big, c, o)
	e.run()
	samples := control.LabelByLatency(c.obs, control.StatMean, o.Setpoint)
	f := InterferenceFit{Samples: len(samples)}
	for _, x := range samples {
		if x.Interfering {
			f.Positive++
		}
	}
	f.Model, f.CV, err = control.Fit(samples, TrainFolds, int64(o.Seed))
	if err != nil {
		return f, fmt.Errorf("sim: fit interference model on %s: %w", s.Name, err)
	}
	return f, nil
}
