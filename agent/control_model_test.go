package agent

import (
	"testing"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/control"
)

// The interference controller runs the agent's model
// (Config.InterferenceModel) with the profile's tuning, and its read-ahead
// buffer is the profile's cap; without a model, the thesis's coefficients.
func TestInterferenceUsesAgentModel(t *testing.T) {
	m := control.DefaultModel()
	m.Intercept, m.Coef[control.FeatLogTput] = -7, 2
	spec := client.Control{Controller: "interference", Device: "vda", MaxRate: 16e6, Profile: []byte(`{"interference":{"ki":0.2,"buffer_mb":64}}`)}
	cp, err := resolveControl(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model *control.Model
		want  control.Model
	}{{&m, m}, {nil, control.DefaultModel()}} {
		cp.model = tc.model
		c, err := cp.controller(0)
		if err != nil {
			t.Fatal(err)
		}
		p := c.(*control.Interference).Params()
		if p.Model != tc.want || p.Ki != 0.2 || p.MaxRate != 16e6 || p.Threshold != 0.5 {
			t.Fatalf("params %+v, want model %+v, ki 0.2 from the profile", p, tc.want)
		}
	}
	stored, _ := resolveControl(spec)
	raw := []byte(`{"controller":"interference","device":"vda","max_rate":16000000,"profile":` + string(stored.spec.Profile) + `}`)
	if got := readAhead(catalog.Migration{Control: raw}); got != 64<<20 {
		t.Fatalf("read-ahead %d, want 64 MiB", got)
	}
	if got := readAhead(catalog.Migration{Control: []byte(`{"controller":"pid","setpoint_ms":10}`)}); got != 0 {
		t.Fatalf("pid read-ahead %d, want 0 (the transfer's default)", got)
	}
}
