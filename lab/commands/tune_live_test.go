package commands

import (
	"strings"
	"testing"
)

// TestTuneLiveBadInput: --live and the simulator's flags exclude each
// other, and --live needs its system named; each refusal is exit 2 with one
// line, before anything runs.
func TestTuneLiveBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"live without agent": {[]string{"tune", "--live", "--proxy", "x", "--tenant", "1", "--to", "b"}, "--agent, --proxy, --tenant and --to are required"},
		"live with scenario": {[]string{"tune", "--live", "--scenario", "steady"}, "--scenario profiles a simulator scenario"},
		"agent without live": {[]string{"tune", "--agent", "http://x"}, "--agent is for --live"},
		"live unstable pole": {[]string{"tune", "--live", "--agent", "a", "--proxy", "x", "--tenant", "1", "--to", "b", "--pole", "1.5"}, "outside (-1, 1)"},
		"live negative k":    {[]string{"tune", "--live", "--agent", "a", "--proxy", "x", "--tenant", "1", "--to", "b", "--k", "-3"}, "--k must be > 0"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errs := labRunCLI(t, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 with %q", code, errs, tc.want)
			}
		})
	}
}
