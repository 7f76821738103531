package control

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestBuiltinProfiles: every built-in profile is valid and round-trips
// through JSON (the agent API and the catalog carry it so); the default is
// sluice; an unknown name is refused naming the built-ins.
func TestBuiltinProfiles(t *testing.T) {
	for _, name := range Profiles() {
		p, err := ProfileNamed(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		b, _ := json.Marshal(p)
		q, err := ProfileFromJSON(b)
		if err != nil || q != p {
			t.Errorf("%s through JSON: %+v (%v), want %+v", name, q, err, p)
		}
		if l := p.Label(); l != name {
			t.Errorf("%s: label %q, want the bare name", name, l)
		}
	}
	if d := DefaultProfile(); d.Name != DefaultProfileName || d.Name != Profiles()[0] {
		t.Errorf("default profile %q, want %q listed first", d.Name, DefaultProfileName)
	}
	if p, _ := ProfileNamed(""); p != DefaultProfile() {
		t.Error(`ProfileNamed("") is not the default`)
	}
	if _, err := ProfileNamed("turbo"); err == nil || !strings.Contains(err.Error(), "sluice or slacker") {
		t.Errorf("unknown profile: %v", err)
	}
}

// TestSlackerProfileIsThePaper: the slacker profile is Slacker's law — its
// gains, a tenth of full speed, no slow start, each window against the
// setpoint — and the PID it makes validates with every option off.
func TestSlackerProfileIsThePaper(t *testing.T) {
	p, _ := ProfileNamed("slacker")
	pp := p.PID(40*time.Millisecond, 10e6, StatMean)
	if pp.Kp != 0.025 || pp.Ki != 0.005 || pp.Kd != 0.015 || pp.Initial != 0.1 || pp.StartGrowth > 1 || pp.MeanHorizon != 0 || pp.StartBackoff != 0 || pp.IdleFloor != 0 {
		t.Fatalf("slacker's PID %+v", pp)
	}
	if _, err := NewPID(pp); err != nil {
		t.Fatal(err)
	}
}

// TestLoadProfile: a file names a base and the fields it changes, in YAML
// or JSON; the rest keep the base's values. Unknown fields, wrong types and
// out-of-range values are refused with one line naming the field.
func TestLoadProfile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		check    func(p Profile) bool
		label    string
	}{
		{"yaml over the default", "ki: 0.1\nmean_horizon: 0\n", func(p Profile) bool {
			return p.Name == "sluice" && p.Ki == 0.1 && p.MeanHorizon == 0 && p.Kp == sluiceProfile.Kp
		}, "sluice(ki=0.1,mean_horizon=0)"},
		{"json over slacker", `{"name": "slacker", "initial": 0.3}`, func(p Profile) bool {
			return p.Name == "slacker" && p.Initial == 0.3 && p.Ki == 0.005
		}, "slacker(initial=0.3)"},
		{"nested field", "catch_up:\n  boost: 2\n", func(p Profile) bool {
			return p.CatchUp.Boost == 2 && p.CatchUp.Patience == sluiceProfile.CatchUp.Patience
		}, "sluice(catch_up.boost=2)"},
		{"empty file", "", func(p Profile) bool { return p == DefaultProfile() }, "sluice"},
	} {
		p, err := LoadProfile(strings.NewReader(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(p) {
			t.Errorf("%s: %+v", tc.name, p)
		}
		if tc.label != "" && p.Label() != tc.label {
			t.Errorf("%s: label %q, want %q", tc.name, p.Label(), tc.label)
		}
	}
	for _, tc := range []struct{ name, in, want string }{
		{"unknown field", "kq: 1\n", "field kq not found"},
		{"unknown base", "name: turbo\n", `unknown profile "turbo"`},
		{"wrong type", "ki: fast\n", "ki"},
		{"zero ki", "ki: 0\n", "ki must be > 0"},
		{"growth out of range", "start_growth: 9\n", "start_growth"},
		{"rearm without slow start", "start_growth: 1\n", "rearm_growth 1.5 needs a slow start"},
		{"step too short", "step_ms: 5\n", "step_ms 5"},
		{"catch-up boost", "catch_up:\n  boost: 0.5\n", "catch_up.boost 0.5"},
		{"max rate", "max_rate: -1\n", "max_rate -1"},
		{"not yaml", "ki: [1\n", "profile"},
	} {
		_, err := LoadProfile(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := ProfileFromJSON([]byte(`{"kq": 1}`)); err == nil || !strings.Contains(err.Error(), "kq") {
		t.Errorf("JSON with an unknown field: %v", err)
	}
}

// TestProfileGovernor: the governor's parameters come from the profile; a
// controller that does not steer by latency does not settle.
func TestProfileGovernor(t *testing.T) {
	p := DefaultProfile()
	g := p.Governor(7*time.Millisecond, 80e6, true)
	if g.Settle != 3*time.Second || g.Period != time.Second || g.CatchUp != p.CatchUp || g.Setpoint != 7*time.Millisecond || g.MaxRate != 80e6 {
		t.Errorf("governor params %+v", g)
	}
	if g := p.Governor(0, 80e6, false); g.Settle != 0 {
		t.Errorf("fixed rate: settle %v, want none", g.Settle)
	}
}
