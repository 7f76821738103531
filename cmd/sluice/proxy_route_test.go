package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestParseRouteFlag: --route values, including a Unix socket directory as the host.
func TestParseRouteFlag(t *testing.T) {
	cases := []struct {
		in, addr, db string
		aliases      int
		bad          bool
	}{
		{in: "acme=127.0.0.1:5432", addr: "127.0.0.1:5432"},
		{in: "acme=127.0.0.1:5432/appdb", addr: "127.0.0.1:5432", db: "appdb"},
		{in: "acme=db.example:5432/appdb,a1,a2", addr: "db.example:5432", db: "appdb", aliases: 3},
		{in: "acme=/var/run/postgresql:5432", addr: "/var/run/postgresql:5432"},
		{in: "acme=/tmp/x/data:5433/postgres", addr: "/tmp/x/data:5433", db: "postgres"},
		{in: "acme=[::1]:5432/d", addr: "[::1]:5432", db: "d"},
		{in: "acme=/no/port/db", bad: true},
		{in: "acme=", bad: true},
		{in: "=h:1", bad: true},
	}
	for _, c := range cases {
		r, err := parseRouteFlag(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("%q: accepted as %+v", c.in, r)
			}
			continue
		}
		if err != nil || r.Addr != c.addr || r.Database != c.db || len(r.Aliases) != c.aliases {
			t.Errorf("%q: %+v, %v; want addr %q db %q, %d aliases", c.in, r, err, c.addr, c.db, c.aliases)
		}
	}
}

// TestProxySpeedFlagUsage: bad --procs / --proxy-procs / --server-transport
// exit 2 with one line, before anything starts. (Cobra keeps flag values
// between runs in one process, so each case sets what it relies on.)
func TestProxySpeedFlagUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"proxy", "--trust", "--tls-cert", "", "--window", "3s", "--max-message", "65536", "--route", "a=127.0.0.1:1", "--procs", "-1"}, "--procs"},
		{[]string{"bench", "proxy", "--duration", "5s", "--clients", "8", "--scale", "1", "--rounds", "1", "--proxy-procs", "-2"}, "--proxy-procs"},
		{[]string{"bench", "proxy", "--duration", "5s", "--clients", "8", "--scale", "1", "--rounds", "1", "--proxy-procs", "1", "--server-transport", "udp"}, "--server-transport"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		msg := errOut.String()
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(c.args, " "), code, msg, c.want)
		}
	}
}
