package control

import (
	"math/rand"
	"os"
	"strings"
	"testing"
)

// otherHost labels synthetic hosts as a disk unlike the thesis's would: the
// foreground suffers once the disk moves more than 30 MiB/s, however many
// operations carry it (a throttled shared disk, as the lab's testbed).
func otherHost(rng *rand.Rand, n int) []Sample {
	var out []Sample
	for _, h := range syntheticHosts(rng, n) {
		out = append(out, Sample{IO: h, Interfering: h.Throughput > 30*(1<<20)})
	}
	return out
}

func TestTrainBeatsDefaultOnOtherHost(t *testing.T) {
	samples := otherHost(rand.New(rand.NewSource(7)), 600)
	m, ev, err := Train(samples, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Train+ev.Test != len(samples) || ev.Test < 140 || ev.Test > 160 {
		t.Fatalf("split %d/%d of %d, want about 25%% held out", ev.Train, ev.Test, len(samples))
	}
	if ev.CV.Folds != TrainFolds || len(ev.CV.Accuracy) != TrainFolds {
		t.Fatalf("cv %+v", ev.CV)
	}
	if ev.Accuracy < 0.9 || ev.F1 < 0.85 {
		t.Errorf("held-out accuracy %.3f f1 %.3f: want >= 0.9, 0.85", ev.Accuracy, ev.F1)
	}
	if ev.Accuracy <= ev.DefaultAccuracy || ev.F1 <= ev.DefaultF1 {
		t.Errorf("fitted %.3f/%.3f does not beat the thesis's coefficients %.3f/%.3f on this host", ev.Accuracy, ev.F1, ev.DefaultAccuracy, ev.DefaultF1)
	}
	// Deterministic: the same samples and seed give the same model.
	m2, ev2, err := Train(otherHost(rand.New(rand.NewSource(7)), 600), 3)
	if err != nil || m2 != m || ev2.Accuracy != ev.Accuracy {
		t.Fatalf("second fit differs: %v %+v vs %+v", err, m2, m)
	}
}

func TestTrainNeedsBothClasses(t *testing.T) {
	var samples []Sample
	for _, h := range syntheticHosts(rand.New(rand.NewSource(1)), 50) {
		samples = append(samples, Sample{IO: h})
	}
	samples[0].Interfering = true
	if _, _, err := Train(samples, 1); err == nil || !strings.Contains(err.Error(), "1 interfering and 49 calm") {
		t.Fatalf("err = %v", err)
	}
}

func TestModelFileRoundTrip(t *testing.T) {
	m, ev, err := Train(otherHost(rand.New(rand.NewSource(2)), 300), 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewModelFile(m, &ev).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f, got, err := ParseModelFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != m || f.Evaluation == nil || f.Evaluation.Accuracy != ev.Accuracy {
		t.Fatalf("round trip: %+v %+v, want %+v", got, f.Evaluation, m)
	}
}

func TestModelFileRejects(t *testing.T) {
	good := `"kind":"sluice-interference-model","features":["iops^2","ln(iops)","ticks^2","ln(MiB/s)","util%^2"],"intercept":-1`
	vec := `,"coef":[1,2,3,4,5],"mean":[0,0,0,0,0],"scale":[1,1,1,1,1]`
	for _, tc := range []struct{ name, body, want string }{
		{"empty", ``, "not a model file: EOF"},
		{"malformed", `{"kind":`, "not a model file: unexpected EOF"},
		{"unknown field", `{` + good + vec + `,"bias":2}`, `unknown field "bias"`},
		{"other kind", `{"kind":"x","features":[]}`, `kind "x"`},
		{"other features", `{"kind":"sluice-interference-model","features":["iops","util"],"coef":[1,2]}`, "model is for features [iops, util]; this sluice's are [iops^2,"},
		{"short coef", `{` + good + `,"coef":[1,2],"mean":[0,0,0,0,0],"scale":[1,1,1,1,1]}`, "coef has 2 numbers, want 5"},
		{"no scale", `{` + good + `,"coef":[1,2,3,4,5],"mean":[0,0,0,0,0]}`, "scale has 0 numbers"},
		{"negative scale", `{` + good + `,"coef":[1,2,3,4,5],"mean":[0,0,0,0,0],"scale":[1,-1,1,1,1]}`, "feature ln(iops)"},
	} {
		_, _, err := ParseModelFile([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
	if _, m, err := ParseModelFile([]byte(`{` + good + vec + `}`)); err != nil || m.Coef[4] != 5 || m.Intercept != -1 {
		t.Fatalf("good file: %v %+v", err, m)
	}
}

// throttledFixture is testdata/model-throttled.json: the model Train fits to
// otherHost's labels (seed 7, 600 hosts; split seed 3), which the
// interference transcript's trained-model case loads.
const throttledFixture = "testdata/model-throttled.json"

func TestModelFixtureIsTrainOutput(t *testing.T) {
	m, ev, err := Train(otherHost(rand.New(rand.NewSource(7)), 600), 3)
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewModelFile(m, &ev).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SLUICE_REWRITE_FIXTURES") != "" {
		if err := os.WriteFile(throttledFixture, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(throttledFixture)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is not Train's output (SLUICE_REWRITE_FIXTURES=1 rewrites it):\n%s", throttledFixture, want)
	}
}
