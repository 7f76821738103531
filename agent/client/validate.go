package client

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/snapshot"
)

// FieldError is a request's first bad field: Field is its JSON name
// ("mode", "control.setpoint_ms"), Msg what is wrong with its value. The
// agent answers it with a 400; the CLI names the flag that set the field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Msg }

func bad(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks a migration request by itself: every field's syntax and
// range (whether the tenant and the target exist is the agent's to say).
// It is the one place these rules live; the agent and the CLI both call it.
func (r StartMigration) Validate() error {
	switch {
	case r.Tenant <= 0:
		return bad("tenant", "%d: want a positive tenant id", r.Tenant)
	case strings.TrimSpace(r.To) == "":
		return bad("to", `"": want a peer name or an agent URL`)
	case r.Mode != "" && r.Mode != string(migration.Live) && r.Mode != string(migration.StopAndCopy):
		return bad("mode", "%q: want %s or %s", r.Mode, migration.Live, migration.StopAndCopy)
	case r.WALRelay != "" && r.WALRelay != WALRelayTarget && r.WALRelay != WALRelaySource:
		return bad("wal_relay", "%q: want %s or %s", r.WALRelay, WALRelayTarget, WALRelaySource)
	}
	if err := checkRate("rate", r.Rate, "unlimited"); err != nil {
		return err
	}
	if r.Checkpoint != "" {
		if _, _, err := snapshot.ParseCheckpoint(r.Checkpoint); err != nil {
			return bad("checkpoint", "%s", strings.TrimPrefix(err.Error(), "checkpoint "))
		}
	}
	if _, err := migration.ParseCatchUpTimeout(r.CatchUpTimeout); err != nil {
		return bad("catch_up_timeout", "%v", err)
	}
	if _, err := migration.ParseHoldDeadline(r.HoldDeadline); err != nil {
		return bad("hold_deadline", "%v", err)
	}
	if _, err := r.DeadlineAfter(); err != nil {
		return err
	}
	if r.Control != nil {
		return r.Control.Validate()
	}
	return nil
}

// DeadlineAfter is the request's deadline as a duration from its start; 0
// = none.
func (r StartMigration) DeadlineAfter() (time.Duration, error) {
	if r.Deadline == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(r.Deadline)
	if err != nil || d <= 0 {
		return 0, bad("deadline", "%q: want a positive duration such as 2h", r.Deadline)
	}
	return d, nil
}

// MinRate is the least positive copy rate a request may set, bytes/s: 64
// KiB/s, at which 1 GB takes 4.5 hours. Slower is a stalled copy (its
// snapshot holds the source's WAL and a backup open for days), not a pace;
// to stop a copy, abort it. 0 is not a rate but "unlimited".
const MinRate = 64 << 10

// checkRate refuses a rate (bytes/s) of field that is not finite, is
// negative, or is positive but under MinRate; zero says what 0 means.
func checkRate(field string, r float64, zero string) error {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0) || r < 0:
		return bad(field, "%v: want 0 (%s) or a rate of at least %d bytes/s (64 KiB/s)", r, zero, MinRate)
	case r > 0 && r < MinRate:
		return bad(field, "%v bytes/s is under the least rate, %d bytes/s (64 KiB/s): the copy would stall; want 0 (%s) or at least that", r, MinRate, zero)
	}
	return nil
}

// Validate checks a rate change by itself: 0 (unlimited) or at least
// MinRate bytes/s. The agent and the CLI both call it.
func (r SetRate) Validate() error { return checkRate("rate", r.Rate, "unlimited") }

// Controllers are the controllers a Control may name ("" is pid).
var Controllers = []string{"pid", "fixed", "integral", "interference"}

// Validate checks a control spec by itself. Its profile must resolve
// (control.ProfileFromJSON); the controller's own parameters are checked when
// it is built.
func (c Control) Validate() error {
	if c.Controller != "" && !slices.Contains(Controllers, c.Controller) {
		return bad("control.controller", "%q: want one of %s", c.Controller, strings.Join(Controllers, ", "))
	}
	switch {
	case math.IsNaN(c.SetpointMs) || math.IsInf(c.SetpointMs, 0) || c.SetpointMs < 0:
		return bad("control.setpoint_ms", "%v: want a positive number of ms", c.SetpointMs)
	case (c.Controller == "" || c.Controller == "pid") && c.SetpointMs == 0:
		return bad("control.setpoint_ms", "missing: the pid controller holds a setpoint")
	}
	if err := checkRate("control.max_rate", c.MaxRate, "the profile's"); err != nil {
		return err
	}
	if err := checkRate("control.rate", c.Rate, "max_rate's"); err != nil {
		return err
	}
	switch control.Statistic(c.Stat) {
	case "", control.StatMean, control.StatP95, control.StatP99:
	default:
		return bad("control.stat", "%q: want mean, p95 or p99", c.Stat)
	}
	if _, err := control.ProfileFromJSON(c.Profile); err != nil {
		return bad("control.profile", "%s", strings.TrimPrefix(err.Error(), "control: "))
	}
	if u := c.ClientLatencyURL; u != "" {
		if err := checkClientLatencyURL(u); err != nil {
			return bad("control.client_latency_url", "%v", err)
		}
	}
	return nil
}

// checkClientLatencyURL reports whether u can be a ClientLatencyURL: an
// http:// or https:// URL with a host.
func checkClientLatencyURL(u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL with a host, such as http://127.0.0.1:7433/", u)
	}
	return nil
}

// roleRE is a tenant user's name: a lower-case PostgreSQL identifier that
// needs no quoting.
var roleRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate checks a tenant creation's users: names PostgreSQL takes without
// quoting, none reserved (postgres, pg_*, sluice_*), none twice, each with a
// password of one line. The agent checks id, name and settings against its
// own configuration.
func (r CreateTenant) Validate() error {
	seen := map[string]bool{}
	for i, u := range r.Users {
		field := fmt.Sprintf("users[%d]", i)
		switch {
		case !roleRE.MatchString(u.Name):
			return bad(field+".name", "%q: want a lower-case identifier (letters, digits, _; at most 63)", u.Name)
		case u.Name == "postgres" || strings.HasPrefix(u.Name, "pg_") || strings.HasPrefix(u.Name, "sluice"):
			return bad(field+".name", "%q is reserved (postgres, pg_*, sluice*)", u.Name)
		case seen[u.Name]:
			return bad(field+".name", "%q is given twice", u.Name)
		case u.Password == "" || strings.ContainsAny(u.Password, "\r\n\x00"):
			return bad(field+".password", "for %s: want a non-empty password of one line", u.Name)
		}
		seen[u.Name] = true
	}
	return nil
}
