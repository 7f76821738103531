//go:build !linux

package proxy

import (
	"context"
	"net"
)

// fastConn returns c: the raw-syscall relay (rawconn_linux.go) is Linux-only.
func fastConn(c net.Conn) net.Conn { return c }

type rawConn struct{ net.Conn }

func fastPair(client, server net.Conn) (c, sv *rawConn, ok bool) { return nil, nil, false }

func (s *session) serverLoopFast(sc *serverConn, src, dst *rawConn) bool {
	panic("proxy: serverLoopFast without raw sockets")
}

func (s *session) clientLoopFast(ctx context.Context, c *rawConn) error {
	panic("proxy: clientLoopFast without raw sockets")
}
