package experiment

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/control"
)

// TestParseVariant: a variant changes the named fields of its base profile
// (nested ones dotted) and the trial's own settings, and its label says
// which; everything else stays the base's.
func TestParseVariant(t *testing.T) {
	base := control.DefaultProfile()
	v, err := ParseVariant(base, "ki=0.04, mean_horizon=0,catch_up.boost=2,learn_reserve=false,latency=client,wal_relay=source,checkpoint=3s")
	if err != nil {
		t.Fatal(err)
	}
	want := base
	want.Ki, want.MeanHorizon, want.CatchUp.Boost, want.LearnReserve = 0.04, 0, 2, false
	if v.Profile != want || !v.ClientLatency || v.WALRelay != "source" || v.Checkpoint != "3s" {
		t.Fatalf("variant %+v, want profile %+v, client latency, source relay, 3s checkpoint", v, want)
	}
	if l := v.Label(); !strings.HasPrefix(l, "sluice(ki=0.04,mean_horizon=0,learn_reserve=false,catch_up.boost=2") || !strings.HasSuffix(l, ",latency=client,wal_relay=source,checkpoint=3s)") {
		t.Errorf("label %q: want the profile's changes, then the trial's", l)
	}
	if v.LatencySource() != "client" {
		t.Errorf("latency source %q, want client", v.LatencySource())
	}
	// The base of a variant may be changed itself (a profile file).
	slacker, _ := control.ProfileNamed("slacker")
	v, err = ParseVariant(slacker, "latency=proxy")
	if err != nil || v.Profile != slacker || v.Label() != "slacker" || v.LatencySource() != "proxy" {
		t.Errorf("slacker with latency=proxy: %+v (%q), %v; want the slacker profile, labelled slacker", v, v.Label(), err)
	}
	if (Variant{Profile: base}).Label() != "sluice" {
		t.Errorf("the base's label %q, want sluice", Variant{Profile: base}.Label())
	}
}

// TestParseVariantErrors: a bad variant is one error naming its key.
func TestParseVariantErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"kx=1":                "unknown key kx",
		"catch_up.x=1":        "unknown key catch_up.x",
		"ki.x=1":              "unknown key ki.x",
		"catch_up=2":          "catch_up: name one of its fields",
		"ki=fast":             "ki=fast: want a value of type float64",
		"mean_horizon=2.5":    "mean_horizon=2.5: want a value of type int",
		"ki=-1":               "ki",
		"start_growth=9":      "start_growth",
		"catch_up.boost=0.5":  "catch_up.boost",
		"ki":                  `"ki": want key=value`,
		"ki=0.1,,kp=0":        `"": want key=value`,
		"ki=0.1,ki=0.2":       "ki given twice",
		"latency=server":      "latency=server: want client or proxy",
		"wal_relay=middle":    "wal_relay=middle",
		"checkpoint=slow":     "checkpoint=slow",
		"name=slacker":        "name",
		"step_ms=5":           "step_ms",
		"learn_reserve=maybe": "learn_reserve=maybe",
	} {
		_, err := ParseVariant(control.DefaultProfile(), spec)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseVariant(%q) = %v; want one line containing %q", spec, err, want)
		}
	}
}

// TestVariantKeys: every profile field a file may name is a key, nested
// ones dotted, and the trial's own follow.
func TestVariantKeys(t *testing.T) {
	keys := VariantKeys()
	for _, k := range []string{"kp", "ki", "kd", "initial", "mean_horizon", "learn_reserve", "catch_up.boost", "catch_up.min_floor", "max_rate", "latency", "wal_relay", "checkpoint"} {
		if !slices.Contains(keys, k) {
			t.Errorf("keys %v lack %s", keys, k)
		}
	}
	for _, k := range []string{"name", "catch_up"} {
		if slices.Contains(keys, k) {
			t.Errorf("keys %v hold %s", keys, k)
		}
	}
}

// TestPIDRequest: a PID trial's request is what `sluice migrate
// --setpoint` sends: the pid controller, the loop's whole profile (which
// the agent reads back as it is), the top speed, no fixed rate; a variant
// adds its mechanism.
func TestPIDRequest(t *testing.T) {
	c := Common{Out: t.TempDir()}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	v, err := ParseVariant(c.Profile, "ki=0.04,max_rate=50e6,wal_relay=source")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		v       Variant
		maxRate float64
		relay   string
	}{{Variant{Profile: c.Profile}, control.DefaultProfile().MaxRate, ""}, {v, 50e6, "source"}} {
		req := c.pidRequest(x.v, 12.5)
		ctl := req.Control
		if ctl == nil || ctl.Controller != "pid" || ctl.SetpointMs != 12.5 || ctl.MaxRate != x.maxRate || req.Rate != 0 || req.WALRelay != x.relay {
			t.Fatalf("%s: request %+v, control %+v", x.v.Label(), req, ctl)
		}
		if p, err := control.ProfileFromJSON(ctl.Profile); err != nil || p != x.v.Profile {
			t.Errorf("%s: the agent reads the profile as %+v, %v; want %+v", x.v.Label(), p, err, x.v.Profile)
		}
	}
	// The operator's top speed holds for every loop.
	c.MaxRate = 30e6
	if got := c.pidRequest(v, 12.5).Control.MaxRate; got != 30e6 {
		t.Errorf("with MaxRate 30 MB/s: the variant's top speed %v", got)
	}
}
