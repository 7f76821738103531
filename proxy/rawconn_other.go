//go:build !linux

package proxy

import "net"

// fastConn returns c: the raw-syscall relay (rawconn_linux.go) is Linux-only.
func fastConn(c net.Conn) net.Conn { return c }
