package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/control"
)

func TestProfile(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	slacker, _ := control.ProfileNamed("slacker")
	for name, tc := range map[string]struct {
		arg   string
		label string // want this profile's Label, or
		err   string // an error containing this
	}{
		"default":      {arg: "", label: control.DefaultProfileName},
		"built-in":     {arg: "slacker", label: slacker.Label()},
		"yaml file":    {arg: file("a.yaml", "name: sluice\nki: 0.1\n"), label: "sluice(ki=0.1)"},
		"json file":    {arg: file("b.json", `{"name": "slacker", "initial": 0.5}`), label: "slacker(initial=0.5)"},
		"no such file": {arg: filepath.Join(dir, "missing.yaml"), err: "neither a profile (sluice, slacker) nor a readable file"},
		"unknown base": {arg: file("c.yaml", "name: fast\n"), err: `unknown profile "fast"`},
		"out of range": {arg: file("d.yaml", "kp: -1\n"), err: "kp"},
		"unknown key":  {arg: file("e.yaml", "kq: 1\n"), err: "kq"},
	} {
		p, err := Profile(tc.arg)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: error %v, want one line containing %q", name, err, tc.err)
		case tc.err == "" && (err != nil || p.Label() != tc.label):
			t.Errorf("%s: %q, %v; want %q", name, p.Label(), err, tc.label)
		}
	}
}
