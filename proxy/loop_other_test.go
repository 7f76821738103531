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

// bothRelays runs f once: with the netpoller, all there is off Linux.
func bothRelays(t *testing.T, f func(t *testing.T)) {
	t.Run("netpoller", f)
}
