package pgcluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/pgcluster"
)

// TestCheckSettings: PostgreSQL 15's own parser judges each setting, with
// no server running; the first bad one in name order is a SettingError
// naming it, in one line.
func TestCheckSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name     string
		settings map[string]string
		bad      string // the SettingError's parameter; "" = accepted
		want     string // in its message
	}{
		{"none", nil, "", ""},
		{"good", map[string]string{"shared_buffers": "128MB", "work_mem": "1.5MB", "fsync": "off", "statement_timeout": "2min", "wal_level": "logical", "myext.knob": "anything"}, "", ""},
		{"memory in words", map[string]string{"shared_buffers": "lots"}, "shared_buffers", `invalid value for parameter "shared_buffers": "lots"`},
		{"time unit for memory", map[string]string{"shared_buffers": "10s"}, "shared_buffers", `Valid units for this parameter are "B", "kB"`},
		{"out of range", map[string]string{"max_connections": "0"}, "max_connections", "outside the valid range"},
		{"not a boolean", map[string]string{"fsync": "maybe"}, "fsync", "requires a Boolean value"},
		{"not in the enum", map[string]string{"wal_level": "banana"}, "wal_level", "Available values: minimal, replica, logical"},
		{"unknown name", map[string]string{"shared_bufers": "128MB"}, "shared_bufers", "unrecognized configuration parameter"},
		{"first bad in name order", map[string]string{"work_mem": "x", "fsync": "maybe", "port": "5432"}, "fsync", "Boolean"},
	} {
		err := pgcluster.CheckSettings(ctx, pgcluster.Options{}, tc.settings)
		var se *pgcluster.SettingError
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.bad != "" && (!errors.As(err, &se) || se.Name != tc.bad || !strings.Contains(se.Msg, tc.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: %v, want a one-line SettingError on %s containing %q", tc.name, err, tc.bad, tc.want)
		}
	}
}

// TestBrief: PostgreSQL tool output, or an error carrying it, as one line.
func TestBrief(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "pg_ctl: could not start server", "pg_ctl: could not start server"},
		{"message first", "2026-11-28 01:51:08.094 GMT [17664] FATAL:  invalid value for parameter \"shared_buffers\": \"10s\"\n2026-11-28 01:51:08.094 GMT [17664] HINT:  Valid units are \"kB\".\n",
			`FATAL: invalid value for parameter "shared_buffers": "10s" (Valid units are "kB".)`},
		{"pg_ctl start", "pgcluster: start /r/tenants/3: exit status 1\nwaiting for server to start.... stopped waiting\npg_ctl: could not start server\nExamine the log output.\n2026-11-28 01:51:08 GMT [1] LOG:  starting PostgreSQL 15\n2026-11-28 01:51:08 GMT [1] FATAL:  could not map anonymous shared memory: Cannot allocate memory\n2026-11-28 01:51:08 GMT [1] HINT:  This error usually means that PostgreSQL's request exceeded your kernel's limit.\n2026-11-28 01:51:08 GMT [1] LOG:  database system is shut down\n",
			"pgcluster: start /r/tenants/3: exit status 1: FATAL: could not map anonymous shared memory: Cannot allocate memory (This error usually means that PostgreSQL's request exceeded your kernel's limit.)"},
		{"no message", "agent: create tenant 3: copy template: exit status 1: cp: cannot stat\nmore", "agent: create tenant 3: copy template: exit status 1: cp: cannot stat"},
	} {
		if got := pgcluster.Brief(tc.in); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
