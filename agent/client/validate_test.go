package client

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestStartMigrationValidate: each bad field is refused as a FieldError
// naming it; good requests pass.
func TestStartMigrationValidate(t *testing.T) {
	ok := StartMigration{Tenant: 1, To: "b"}
	for _, good := range []StartMigration{
		ok,
		{Tenant: 1, To: "b", Mode: "stop-and-copy", Rate: 1e6, Checkpoint: "3s", WALRelay: "source", CatchUpTimeout: "30m", Deadline: "2h"},
		{Tenant: 1, To: "b", Control: &Control{SetpointMs: 40}},
		{Tenant: 1, To: "b", Control: &Control{Controller: "fixed", Rate: 1e6}},
		{Tenant: 1, To: "b", Control: &Control{SetpointMs: 40, Stat: "p99", Profile: json.RawMessage(`{"name":"slacker","ki":0.01}`)}},
	} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
	with := func(f func(r *StartMigration)) StartMigration { r := ok; f(&r); return r }
	ctl := func(c Control) StartMigration { r := ok; r.Control = &c; return r }
	for _, tc := range []struct {
		req   StartMigration
		field string
		want  string
	}{
		{with(func(r *StartMigration) { r.Tenant = 0 }), "tenant", "positive"},
		{with(func(r *StartMigration) { r.To = " " }), "to", "peer name"},
		{with(func(r *StartMigration) { r.Mode = "teleport" }), "mode", `"teleport"`},
		{with(func(r *StartMigration) { r.Rate = -1 }), "rate", "-1"},
		{with(func(r *StartMigration) { r.Rate = 0.001 }), "rate", "under the least rate"},
		{with(func(r *StartMigration) { r.Rate = MinRate - 1 }), "rate", "65535 bytes/s"},
		{with(func(r *StartMigration) { r.Checkpoint = "gentle" }), "checkpoint", `"gentle"`},
		{with(func(r *StartMigration) { r.Checkpoint = "28s" }), "checkpoint", "pace 28s"},
		{with(func(r *StartMigration) { r.WALRelay = "middle" }), "wal_relay", `"middle"`},
		{with(func(r *StartMigration) { r.CatchUpTimeout = "10ms" }), "catch_up_timeout", `"10ms"`},
		{with(func(r *StartMigration) { r.HoldDeadline = "2m" }), "hold_deadline", `"2m"`},
		{with(func(r *StartMigration) { r.HoldDeadline = "-1ms" }), "hold_deadline", `"-1ms"`},
		{with(func(r *StartMigration) { r.HoldDeadline = "soon" }), "hold_deadline", `"soon"`},
		{with(func(r *StartMigration) { r.Deadline = "-1h" }), "deadline", `"-1h"`},
		{ctl(Control{Controller: "bangbang", SetpointMs: 40}), "control.controller", `"bangbang"`},
		{ctl(Control{}), "control.setpoint_ms", "missing"},
		{ctl(Control{SetpointMs: -1}), "control.setpoint_ms", "-1"},
		{ctl(Control{SetpointMs: 40, MaxRate: -1}), "control.max_rate", "-1"},
		{ctl(Control{SetpointMs: 40, MaxRate: 1000}), "control.max_rate", "under the least rate"},
		{ctl(Control{Controller: "fixed", Rate: 10}), "control.rate", "under the least rate"},
		{ctl(Control{SetpointMs: 40, Stat: "p50"}), "control.stat", `"p50"`},
		{ctl(Control{SetpointMs: 40, Profile: json.RawMessage(`{"name":"turbo"}`)}), "control.profile", `"turbo"`},
		{ctl(Control{SetpointMs: 40, Profile: json.RawMessage(`{"ki":0}`)}), "control.profile", "ki must be > 0"},
		{ctl(Control{SetpointMs: 40, ClientLatencyURL: "127.0.0.1:7433"}), "control.client_latency_url", "http://"},
	} {
		err := tc.req.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a FieldError on %s containing %q", tc.field, err, tc.field, tc.want)
		}
	}
}

// TestSetRateValidate: a rate change is 0 (unlimited) or at least MinRate
// bytes/s; anything else is a FieldError on rate.
func TestSetRateValidate(t *testing.T) {
	for _, tc := range []struct {
		rate float64 // bytes/s
		want string  // "" = accepted, else in the error
	}{
		{0, ""},
		{MinRate, ""},
		{50e6, ""},
		{0.001, "under the least rate"},
		{MinRate - 1, "under the least rate"},
		{-1, "want 0 (unlimited)"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "+Inf"},
	} {
		err := SetRate{Rate: tc.rate}.Validate()
		var fe *FieldError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("rate %v: %v", tc.rate, err)
		case tc.want != "" && (!errors.As(err, &fe) || fe.Field != "rate" || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("rate %v: %v, want a FieldError on rate containing %q", tc.rate, err, tc.want)
		}
	}
}
