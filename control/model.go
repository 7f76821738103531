package control

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"

	"gonum.org/v1/gonum/optimize"
)

// Feature indexes of the interference model: the thesis's final logistic
// regression (migration-buffering thesis §4.1) uses five transforms of four
// host I/O metrics.
const (
	FeatIOPSSq    = iota // IOPS², IOPS in operations completed per second
	FeatLogIOPS          // ln(max(IOPS, 1))
	FeatTicksSq          // IOTicks², IOTicks in seconds busy per second (0..1)
	FeatLogTput          // ln(max(Throughput, 1 KiB/s)), Throughput in MiB/s
	FeatUtilPctSq        // Util², Util in percent (0..100)
	NumFeatures
)

// FeatureNames names the features in index order, for reports.
var FeatureNames = [NumFeatures]string{"iops^2", "ln(iops)", "ticks^2", "ln(MiB/s)", "util%^2"}

// Features returns the model's features of h in the units the constants
// above document. HostIO.IOTicks (ms per second) is divided by 1000 and
// HostIO.Util (a fraction) multiplied by 100. The logarithms' arguments are
// floored (1 op/s, 1 KiB/s) so that an idle disk has finite features.
func Features(h HostIO) [NumFeatures]float64 {
	ticks := h.IOTicks / 1000
	tput := math.Max(h.Throughput/(1<<20), 1.0/1024)
	util := h.Util * 100
	return [NumFeatures]float64{
		FeatIOPSSq:    h.IOPS * h.IOPS,
		FeatLogIOPS:   math.Log(math.Max(h.IOPS, 1)),
		FeatTicksSq:   ticks * ticks,
		FeatLogTput:   math.Log(tput),
		FeatUtilPctSq: util * util,
	}
}

// Model is a logistic regression of the probability that the host's disk is
// in interference (the foreground suffers from the migration's I/O):
//
//	z_i  = (Features(h)_i − Mean_i) / Scale_i     (Scale_i = 0 means 1)
//	Prob = σ(Intercept + Σ_i Coef_i·z_i),  σ(x) = 1/(1+e⁻ˣ)
//
// The zero Mean and Scale of DefaultModel use raw features; Fit stores the
// standardisation of its training set.
type Model struct {
	Intercept float64              `json:"intercept"`
	Coef      [NumFeatures]float64 `json:"coef"`
	Mean      [NumFeatures]float64 `json:"mean"`
	Scale     [NumFeatures]float64 `json:"scale"`
}

// DefaultModel returns the thesis's final model (§4.1): coefficients
// −2.27e−5·IOPS², −0.780·ln(IOPS), 2.10e−2·IOTicks², 0.55·ln(Throughput),
// 6.87e−4·Util%², intercept −0.296.
//
// The excerpt gives the coefficients but neither the units nor the log base,
// so these are sluice's reading, chosen so that the model says what the
// thesis says it means ("interference is the host spending a large portion of
// time doing I/O while the number of operations stays small"): natural log,
// IOPS in ops/s, Throughput in MiB/s, Util in percent, and IO ticks in seconds
// busy per second — with milliseconds the ticks² term alone would reach
// 21000 and swamp every other feature. With these units the ticks term adds
// at most 0.021: the model effectively steers by utilisation against IOPS and
// throughput. For example (see testdata/model):
// an idle-ish disk (10% util, 50 IOPS, 1 MiB/s) gives p ≈ 0.04; a disk
// saturated by few large operations (100%, 200 IOPS, 100 MiB/s) p ≈ 0.98; a
// disk saturated by many small ones (100%, 2000 IOPS, 20 MiB/s) p ≈ 0.
// Fit a model to your own labelled samples for anything that matters.
func DefaultModel() Model {
	return Model{
		Intercept: -0.296,
		Coef: [NumFeatures]float64{
			FeatIOPSSq:    -2.27e-5,
			FeatLogIOPS:   -7.80e-1,
			FeatTicksSq:   2.10e-2,
			FeatLogTput:   0.55,
			FeatUtilPctSq: 6.87e-4,
		},
	}
}

// checkHostIO returns an error if a figure of h is negative or not finite.
func checkHostIO(h HostIO) error {
	for _, v := range []float64{h.IOPS, h.IOTicks, h.Throughput, h.Util} {
		if !finite(v) || v < 0 {
			return fmt.Errorf("host I/O figures out of range (iops=%v ticks=%v throughput=%v util=%v)",
				h.IOPS, h.IOTicks, h.Throughput, h.Util)
		}
	}
	return nil
}

// Logit returns the model's log-odds of interference for h.
func (m Model) Logit(h HostIO) float64 {
	f := Features(h)
	z := m.Intercept
	for i, v := range f {
		s := m.Scale[i]
		if s == 0 {
			s = 1
		}
		z += m.Coef[i] * (v - m.Mean[i]) / s
	}
	return z
}

// Prob returns the model's probability of interference for h, in [0, 1].
func (m Model) Prob(h HostIO) float64 { return sigmoid(m.Logit(h)) }

// Validate reports a model with non-finite numbers or negative scales.
func (m Model) Validate() error {
	if !finite(m.Intercept) {
		return fmt.Errorf("control: model: intercept %v is not finite", m.Intercept)
	}
	for i := range NumFeatures {
		if !finite(m.Coef[i]) || !finite(m.Mean[i]) || !finite(m.Scale[i]) || m.Scale[i] < 0 {
			return fmt.Errorf("control: model: feature %s: coef %v, mean %v, scale %v must be finite (scale >= 0)",
				FeatureNames[i], m.Coef[i], m.Mean[i], m.Scale[i])
		}
	}
	return nil
}

// Sample is one labelled observation for fitting a Model: the host's I/O over
// a step and whether the foreground was suffering interference in it.
type Sample struct {
	IO          HostIO
	Interfering bool
}

// LabelByLatency turns recorded observations into labelled samples for Fit:
// an observation is interfering when the worst of its signals' statistic
// exceeds threshold (the foreground suffered in that window). Observations
// without usable host I/O or latency are skipped, so a recorded control loop
// (or a simulator run) can be handed over as is. The thesis labelled its
// samples by whether a workload ran next to the migration; on a live system
// the latency the proxy measures is the label that matters.
func LabelByLatency(obs []Observation, stat Statistic, threshold time.Duration) []Sample {
	var out []Sample
	for _, o := range obs {
		if o.Host == nil || o.Host.Err != nil || checkHostIO(*o.Host) != nil {
			continue
		}
		worst, _, err := worstLatency(o.Signals, stat)
		if err != nil {
			continue
		}
		out = append(out, Sample{IO: *o.Host, Interfering: worst > threshold})
	}
	return out
}

// CVReport is the k-fold cross-validation of Fit.
type CVReport struct {
	Folds         int       `json:"folds"`          // k
	Accuracy      []float64 `json:"accuracy"`       // held-out accuracy of each fold, at threshold 0.5
	MeanAccuracy  float64   `json:"mean_accuracy"`  // mean of Accuracy
	F1            []float64 `json:"f1"`             // held-out F1 score of each fold (positive = interfering)
	MeanF1        float64   `json:"mean_f1"`        // mean of F1
	TrainAccuracy float64   `json:"train_accuracy"` // accuracy of the final model on all samples
	Iterations    int       `json:"iterations"`     // LBFGS iterations of the final fit
}

// Fit settings.
const (
	// FitMaxIterations caps LBFGS major iterations per fit.
	FitMaxIterations = 500
	// FitL2 is the ridge penalty on the standardised coefficients (not the
	// intercept), per sample. It keeps weights finite when the classes are
	// separable and changes little otherwise.
	FitL2 = 1e-3
)

// Fit fits a logistic Model to samples by maximum likelihood, and estimates
// its accuracy by stratified k-fold cross-validation (folds >= 2).
//
// Method: features (Features) are standardised by the training set's mean and
// standard deviation; the negative log-likelihood per sample plus FitL2/2·|w|²
// is minimised by LBFGS (gonum/optimize) with gradient Xᵀ(σ(Xw) − y)/n + λw,
// at most FitMaxIterations iterations. For cross-validation the samples of
// each class are shuffled with seed and dealt round-robin into folds; each
// fold is predicted by a model fitted on the others. The returned model is fit
// on all samples. Fit fails on a sample with an error, too few samples for
// the folds (each fold needs a sample of each class), or an optimiser failure.
func Fit(samples []Sample, folds int, seed int64) (Model, CVReport, error) {
	var pos, neg []int
	for i, s := range samples {
		if s.IO.Err != nil {
			return Model{}, CVReport{}, fmt.Errorf("control: fit: sample %d has no data: %v", i, s.IO.Err)
		}
		if err := checkHostIO(s.IO); err != nil {
			return Model{}, CVReport{}, fmt.Errorf("control: fit: sample %d: %v", i, err)
		}
		if s.Interfering {
			pos = append(pos, i)
		} else {
			neg = append(neg, i)
		}
	}
	if folds < 2 {
		return Model{}, CVReport{}, fmt.Errorf("control: fit: need at least 2 folds, got %d", folds)
	}
	if len(pos) < folds || len(neg) < folds {
		return Model{}, CVReport{}, fmt.Errorf("control: fit: %d folds need at least %d samples of each class, got %d interfering and %d not",
			folds, folds, len(pos), len(neg))
	}
	rng := rand.New(rand.NewSource(seed))
	rng.Shuffle(len(pos), func(i, j int) { pos[i], pos[j] = pos[j], pos[i] })
	rng.Shuffle(len(neg), func(i, j int) { neg[i], neg[j] = neg[j], neg[i] })
	fold := make([]int, len(samples))
	for k, i := range pos {
		fold[i] = k % folds
	}
	for k, i := range neg {
		fold[i] = k % folds
	}

	rep := CVReport{Folds: folds}
	for f := range folds {
		var train, test []Sample
		for i, s := range samples {
			if fold[i] == f {
				test = append(test, s)
			} else {
				train = append(train, s)
			}
		}
		m, _, err := fitAll(train)
		if err != nil {
			return Model{}, CVReport{}, fmt.Errorf("control: fit: fold %d: %w", f, err)
		}
		acc, f1 := score(m, test)
		rep.Accuracy = append(rep.Accuracy, acc)
		rep.F1 = append(rep.F1, f1)
		rep.MeanAccuracy += acc / float64(folds)
		rep.MeanF1 += f1 / float64(folds)
	}
	m, iters, err := fitAll(samples)
	if err != nil {
		return Model{}, CVReport{}, fmt.Errorf("control: fit: %w", err)
	}
	rep.TrainAccuracy, _ = score(m, samples)
	rep.Iterations = iters
	return m, rep, nil
}

// fitAll fits one model on all of samples and returns it with the number of
// LBFGS iterations used.
func fitAll(samples []Sample) (Model, int, error) {
	n := len(samples)
	var m Model
	x := make([][NumFeatures]float64, n)
	y := make([]float64, n)
	for i, s := range samples {
		x[i] = Features(s.IO)
		if s.Interfering {
			y[i] = 1
		}
		for j, v := range x[i] {
			m.Mean[j] += v / float64(n)
		}
	}
	for i := range x {
		for j, v := range x[i] {
			d := v - m.Mean[j]
			m.Scale[j] += d * d / float64(n)
		}
	}
	for j := range m.Scale {
		m.Scale[j] = math.Sqrt(m.Scale[j])
		if m.Scale[j] == 0 {
			m.Scale[j] = 1 // constant feature: leave it centred, unscaled
		}
	}
	for i := range x {
		for j := range x[i] {
			x[i][j] = (x[i][j] - m.Mean[j]) / m.Scale[j]
		}
	}
	// w[0] is the intercept, w[1+j] the coefficient of feature j.
	logit := func(w []float64, i int) float64 {
		z := w[0]
		for j, v := range x[i] {
			z += w[1+j] * v
		}
		return z
	}
	prob := optimize.Problem{
		Func: func(w []float64) float64 {
			var f float64
			for i := range x {
				z := logit(w, i)
				f += softplus(z) - y[i]*z
			}
			f /= float64(n)
			for _, v := range w[1:] {
				f += FitL2 / 2 * v * v
			}
			return f
		},
		Grad: func(g, w []float64) {
			clear(g)
			for i := range x {
				r := (sigmoid(logit(w, i)) - y[i]) / float64(n)
				g[0] += r
				for j, v := range x[i] {
					g[1+j] += r * v
				}
			}
			for j := 1; j < len(w); j++ {
				g[j] += FitL2 * w[j]
			}
		},
	}
	res, err := optimize.Minimize(prob, make([]float64, 1+NumFeatures),
		&optimize.Settings{MajorIterations: FitMaxIterations, GradientThreshold: 1e-9}, &optimize.LBFGS{})
	if res == nil {
		return Model{}, 0, fmt.Errorf("lbfgs: %v", err)
	}
	if err != nil && !errors.Is(err, optimize.ErrLinesearcherFailure) {
		return Model{}, 0, fmt.Errorf("lbfgs: %v", err)
	}
	m.Intercept = res.X[0]
	copy(m.Coef[:], res.X[1:])
	if err := m.Validate(); err != nil {
		return Model{}, 0, err
	}
	return m, res.MajorIterations, nil
}

// score returns the accuracy and F1 (positive = interfering) of m on
// samples at probability threshold 0.5.
func score(m Model, samples []Sample) (acc, f1 float64) {
	var tp, fp, fn, ok int
	for _, s := range samples {
		pred := m.Prob(s.IO) >= 0.5
		if pred == s.Interfering {
			ok++
		}
		switch {
		case pred && s.Interfering:
			tp++
		case pred && !s.Interfering:
			fp++
		case !pred && s.Interfering:
			fn++
		}
	}
	acc = float64(ok) / float64(len(samples))
	if tp > 0 {
		f1 = 2 * float64(tp) / float64(2*tp+fp+fn)
	}
	return acc, f1
}

// sigmoid is the logistic function, computed without overflow.
func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// softplus is ln(1 + eᶻ), computed without overflow.
func softplus(z float64) float64 {
	if z > 0 {
		return z + math.Log1p(math.Exp(-z))
	}
	return math.Log1p(math.Exp(z))
}
