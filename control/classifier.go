package control

import (
	"fmt"
	"math"
	"math/rand"
)

// The thesis's protocol for its interference classifier (§4.1): 5-fold
// cross-validation on 75 % of the labelled samples, the chosen model judged
// by accuracy and F-score on the held-out 25 %.
const (
	// HoldoutShare is the share of each class's samples held out of the fit
	// and used only to test it.
	HoldoutShare = 0.25
	// TrainFolds is the cross-validation's number of folds on the rest.
	TrainFolds = 5
)

// Evaluation is a fitted model's test on samples held out of its fit, beside
// the thesis's coefficients (DefaultModel) on the same samples. Accuracy and
// F1 (positive = interfering) are at probability threshold 0.5.
type Evaluation struct {
	Seed             int64    `json:"seed"`
	Train            int      `json:"train_samples"`
	TrainInterfering int      `json:"train_interfering"`
	Test             int      `json:"test_samples"`
	TestInterfering  int      `json:"test_interfering"`
	CV               CVReport `json:"cv"`
	Accuracy         float64  `json:"accuracy"`
	F1               float64  `json:"f1"`
	DefaultAccuracy  float64  `json:"default_accuracy"`
	DefaultF1        float64  `json:"default_f1"`
}

// Train splits samples per class (shuffled with seed) into HoldoutShare held
// out and the rest, fits a Model on the rest with TrainFolds-fold
// cross-validation (Fit), and scores it and DefaultModel on the held-out
// samples. Each class needs at least TrainFolds samples in the fit and one
// held out.
func Train(samples []Sample, seed int64) (Model, Evaluation, error) {
	var pos, neg []Sample
	for _, s := range samples {
		if s.Interfering {
			pos = append(pos, s)
		} else {
			neg = append(neg, s)
		}
	}
	rng := rand.New(rand.NewSource(seed))
	var train, test []Sample
	for _, class := range [][]Sample{pos, neg} {
		rng.Shuffle(len(class), func(i, j int) { class[i], class[j] = class[j], class[i] })
		k := int(math.Round(HoldoutShare * float64(len(class))))
		if k < 1 || len(class)-k < TrainFolds {
			return Model{}, Evaluation{}, fmt.Errorf("control: train: %d interfering and %d calm samples: each class needs %d for the fit and one held out",
				len(pos), len(neg), TrainFolds)
		}
		test = append(test, class[:k]...)
		train = append(train, class[k:]...)
	}
	m, cv, err := Fit(train, TrainFolds, seed)
	if err != nil {
		return Model{}, Evaluation{}, err
	}
	ev := Evaluation{Seed: seed, Train: len(train), Test: len(test), CV: cv}
	for _, s := range train {
		if s.Interfering {
			ev.TrainInterfering++
		}
	}
	for _, s := range test {
		if s.Interfering {
			ev.TestInterfering++
		}
	}
	ev.Accuracy, ev.F1 = Score(m, test)
	ev.DefaultAccuracy, ev.DefaultF1 = Score(DefaultModel(), test)
	return m, ev, nil
}

// Score returns the accuracy and F1 (positive = interfering) of m on samples
// at probability threshold 0.5; F1 is 0 when m finds no true positive.
func Score(m Model, samples []Sample) (acc, f1 float64) { return score(m, samples) }
