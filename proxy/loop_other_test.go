//go:build !linux

package proxy

import "testing"

const relayLoopSupported = false

// useRelayLoop: there is no relay loop off Linux; off is all there is.
func useRelayLoop(tb testing.TB, on bool) {
	if on {
		tb.Skip("no relay loop on this system")
	}
}
