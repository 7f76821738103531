package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ModelFileKind is the "kind" of an interference model file.
const ModelFileKind = "sluice-interference-model"

// ModelFile is an interference Model as a file: what `sluice lab tune
// classifier` writes and an agent loads (agent config interference_model).
// The features are named, so a file fitted for other features (another
// sluice's, or a hand-edited one) is refused instead of misread; the
// scaling (Mean, Scale) travels with the coefficients.
//
//	{"kind": "sluice-interference-model", "features": ["iops^2", ...],
//	 "intercept": -1.2, "coef": [...], "mean": [...], "scale": [...],
//	 "evaluation": {...}}
//
// Evaluation is what the fit measured (held-out figures); it is carried for
// reports and ignored by the controller.
type ModelFile struct {
	Kind       string      `json:"kind"`
	Features   []string    `json:"features"`
	Intercept  float64     `json:"intercept"`
	Coef       []float64   `json:"coef"`
	Mean       []float64   `json:"mean"`
	Scale      []float64   `json:"scale"`
	Evaluation *Evaluation `json:"evaluation,omitempty"`
}

// NewModelFile returns m as a file with its evaluation ev (nil: none).
func NewModelFile(m Model, ev *Evaluation) ModelFile {
	return ModelFile{
		Kind: ModelFileKind, Features: FeatureNames[:],
		Intercept: m.Intercept, Coef: m.Coef[:], Mean: m.Mean[:], Scale: m.Scale[:],
		Evaluation: ev,
	}
}

// Marshal returns f as indented JSON with a trailing newline.
func (f ModelFile) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseModelFile reads a model file: unknown fields, another kind, feature
// names other than FeatureNames (in order), vectors of the wrong length and
// numbers out of range (Model.Validate) are errors, each on one line.
func ParseModelFile(b []byte) (ModelFile, Model, error) {
	var f ModelFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, Model{}, fmt.Errorf("not a model file: %v", err)
	}
	m, err := f.Model()
	return f, m, err
}

// Model checks f (its kind, feature names, vector lengths and numbers) and
// returns its model.
func (f ModelFile) Model() (Model, error) {
	if f.Kind != ModelFileKind {
		return Model{}, fmt.Errorf("kind %q: want %q", f.Kind, ModelFileKind)
	}
	if !slices.Equal(f.Features, FeatureNames[:]) {
		return Model{}, fmt.Errorf("model is for features [%s]; this sluice's are [%s]",
			strings.Join(f.Features, ", "), strings.Join(FeatureNames[:], ", "))
	}
	var m Model
	m.Intercept = f.Intercept
	for _, v := range []struct {
		name string
		src  []float64
		dst  *[NumFeatures]float64
	}{{"coef", f.Coef, &m.Coef}, {"mean", f.Mean, &m.Mean}, {"scale", f.Scale, &m.Scale}} {
		if len(v.src) != NumFeatures {
			return Model{}, fmt.Errorf("%s has %d numbers, want %d (one per feature)", v.name, len(v.src), NumFeatures)
		}
		copy(v.dst[:], v.src)
	}
	if err := m.Validate(); err != nil {
		return Model{}, err
	}
	return m, nil
}

// LoadModelFile reads and parses the model file at path; the error names
// the path.
func LoadModelFile(path string) (ModelFile, Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ModelFile{}, Model{}, fmt.Errorf("interference model: %w", err)
	}
	f, m, err := ParseModelFile(b)
	if err != nil {
		return f, m, fmt.Errorf("interference model %s: %v", path, err)
	}
	return f, m, nil
}
