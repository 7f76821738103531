//go:build !linux

package proxy

import "errors"

// EnableRelayLoop fails: the relay loop (loop_linux.go) is Linux-only.
func EnableRelayLoop() error { return errors.New("proxy: the relay loop needs Linux") }

// RelayLoopEnabled reports false: there is no relay loop on this system.
func RelayLoopEnabled() bool { return false }
