package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestProxyUsageErrors: bad usage of `sluice proxy` and `sluice bench proxy`
// exits 2 with one line naming the problem, before anything is started.
// (Cobra keeps flag values between runs in one process, so each case sets
// what it relies on.)
func TestProxyUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"proxy"}, "--auth-file"},
		{[]string{"proxy", "--trust", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key"},
		{[]string{"proxy", "--trust", "--tls-cert", "", "--route", "nonsense"}, "tenant=host:port"},
		{[]string{"proxy", "--trust", "--window", "0s"}, "--window"},
		{[]string{"proxy", "--trust", "--window", "3s", "--catalog", "etcd://nohost/fleet"}, "endpoint \"nohost\": want host:port"},
		{[]string{"bench", "proxy", "--duration", "0s"}, "--duration"},
		{[]string{"bench", "proxy", "--duration", "5s", "--clients", "0"}, "must be positive"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		msg := errOut.String()
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(c.args, " "), code, msg, c.want)
		}
	}
	proxyFlags.catalogs = nil // a repeatable flag's values add up across runs
}
