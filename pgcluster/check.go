package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// SettingError is a parameter PostgreSQL refuses: Name is the parameter,
// Msg PostgreSQL's one-line reason, e.g. `invalid value for parameter
// "shared_buffers": "lots"`.
type SettingError struct {
	Name string
	Msg  string
}

func (e *SettingError) Error() string { return e.Name + ": " + e.Msg }

// CheckSettings asks PostgreSQL itself, without a server or a cluster,
// whether settings (parameter name → raw value, as Options.Settings) are
// values it would start with: `postgres -C port -c name=value …` on an empty
// configuration in a scratch directory parses each value as the server does
// at start (units, ranges, enumerations, booleans, unknown names; a name
// with a dot is an extension's placeholder and takes any value). It cannot
// see what only a starting server finds, such as shared memory the host will
// not give. It runs o.BinDir's postgres as o.OSUser when the caller is root.
// The error is a *SettingError for the first bad parameter in name order,
// else a one-line error of its own. Takes about 25 ms per run; a bad setting
// costs one more run per setting to find it.
func CheckSettings(ctx context.Context, o Options, settings map[string]string) error {
	if len(settings) == 0 {
		return nil
	}
	c := &Cluster{opts: o.withDefaults()}
	dir, err := MkdirTemp("sluice-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "postgresql.conf"), nil, 0o644); err != nil {
		return fmt.Errorf("pgcluster: check settings: %w", err)
	}
	names := slices.Sorted(maps.Keys(settings))
	run := func(names ...string) (string, bool, error) {
		args := []string{"-D", dir, "-C", "port"}
		for _, k := range names {
			args = append(args, "-c", k+"="+settings[k])
		}
		out, err := c.Run(ctx, "postgres", args...)
		var exit *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return "", false, ctx.Err()
		case err == nil:
			return "", true, nil
		case !errors.As(err, &exit) || strings.TrimSpace(string(out)) == "":
			// postgres did not run, or failed without a word: not a verdict.
			return "", false, fmt.Errorf("pgcluster: check settings: %s/postgres: %v", c.opts.BinDir, err)
		}
		return Brief(string(out)), false, nil
	}
	if _, ok, err := run(names...); ok || err != nil {
		return err
	}
	for _, k := range names {
		msg, ok, err := run(k)
		if err != nil {
			return err
		}
		if !ok {
			return &SettingError{Name: k, Msg: strings.TrimPrefix(msg, "FATAL: ")}
		}
	}
	// Each setting passes alone but not all together: report the whole run.
	msg, _, _ := run(names...)
	return fmt.Errorf("pgcluster: check settings: %s", msg)
}

// severityRE finds a PostgreSQL message in a line of a tool's output or a
// server log, after any log-line prefix ("2026-11-28 01:51:08 GMT [17662] ").
var severityRE = regexp.MustCompile(`\b(FATAL|PANIC|ERROR|HINT):\s+(.*)$`)

// Brief returns PostgreSQL tool output (pg_ctl's, postgres's, initdb's, or
// an error carrying it after its first line) as one line: its first line,
// then the first FATAL, PANIC or ERROR message of the lines after it without
// its log-line prefix, and that message's HINT if one follows it. A first
// line that is itself such a message is the head alone, with its hint.
func Brief(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	msg := func(i int) (string, bool) {
		m := severityRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil || m[1] == "HINT" {
			return "", false
		}
		out := m[1] + ": " + m[2]
		if i+1 < len(lines) {
			if h := severityRE.FindStringSubmatch(strings.TrimSpace(lines[i+1])); h != nil && h[1] == "HINT" {
				out += " (" + h[2] + ")"
			}
		}
		return out, true
	}
	if m, ok := msg(0); ok {
		return m
	}
	head := strings.TrimSpace(lines[0])
	for i := 1; i < len(lines); i++ {
		if m, ok := msg(i); ok {
			return head + ": " + m
		}
	}
	return head
}
