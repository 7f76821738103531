package pg

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAdmitHBA(t *testing.T) {
	orig := `# a comment
local   all          all                       peer
local   replication  all                       peer
host    replication  all   10.0.0.0/8          scram-sha-256
host    app          app   10.1.0.0/16         md5   # the app's subnet
hostssl all          all   10.0.0.0  255.0.0.0 scram-sha-256 clientcert=verify-full
host    all          all   db.example.com      md5
host    all          all   samenet             trust
host    "odd db"     all   10.0.0.0/8          trust
host    all          all   ::1/128             trust
host    all          all   all                 reject
`
	ip := netip.MustParseAddr
	got, err := admitHBA(orig, []netip.Addr{ip("10.1.2.3"), ip("::1")})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(got, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	want := []string{
		"local all all peer",
		"local replication all peer",
		"host replication all 10.0.0.0/8 scram-sha-256",
		// Narrowed, in the original order: 10.1.2.3 still meets md5 first.
		"host app app 10.1.2.3/32 md5",
		"hostssl all all 10.1.2.3/32 scram-sha-256 clientcert=verify-full",
		"host all all ::1/128 trust",
		"host all all 10.1.2.3/32 reject",
		"host all all ::1/128 reject",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("admitHBA:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// An address only a host name (or nothing) covers cannot be admitted.
	if _, err := admitHBA("host all all db.example.com md5\n", []netip.Addr{ip("10.1.2.3")}); err == nil {
		t.Fatal("admitHBA admitted an address no readable line covers")
	}
	// Without addresses to admit it is the plain fence.
	got, err = admitHBA(orig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "host all") || strings.Contains(got, "hostssl") {
		t.Fatalf("admitHBA with no addresses kept host lines:\n%s", got)
	}
}
