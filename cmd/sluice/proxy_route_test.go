package main

import "testing"

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
