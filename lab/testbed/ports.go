package testbed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// freeBase returns a tenant base port with n free ports above it, taken
// below the kernel's ephemeral range: every other test process (clusters on
// pgcluster.FreePort, client connections) gets its ports from that range, so
// a tenant port free at the bed's start cannot be taken before a migration
// reserves it (in the ephemeral range it was, now and then, by a concurrent
// package's test: "port … for tenant 1 is in use").
func freeBase(n int) (int, error) {
	const lo = 10000
	hi := ephemeralLow() - n - 1
	if hi <= lo {
		return 0, errors.New("testbed: no room for tenant ports below the ephemeral range")
	}
	for try := 0; try < 100; try++ {
		p := lo + rand.IntN(hi-lo)
		ok := true
		for k := 0; k <= n && ok; k++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+k))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("testbed: no free range of tenant ports")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 0 {
		return 32768
	}
	return p
}
