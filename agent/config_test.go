package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCPUStat(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "cpu.stat")
	if err := os.WriteFile(good, []byte("nr_periods 12\nnr_throttled 3\nthrottled_time 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "memory.stat")
	if err := os.WriteFile(other, []byte("cache 4096\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stat, err string // err: "" = accepted
	}{
		{"", ""},
		{"off", ""},
		{good, ""},
		{filepath.Join(dir, "missing"), "cpu_stat"},
		{other, "not a cgroup's cpu.stat"},
	} {
		_, err := Config{Name: "a", Root: dir, CPUStat: c.stat}.withDefaults()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("cpu_stat %q: %v", c.stat, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("cpu_stat %q: error %v, want one saying %q", c.stat, err, c.err)
		}
	}
}
