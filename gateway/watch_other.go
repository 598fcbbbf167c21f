//go:build !unix

package gateway

import (
	"context"
	"net"
	"time"
)

// watch is a no-op where the socket cannot be peeked: waits end by
// their own timeouts.
func (cc *clientConn) watch(parent context.Context) (context.Context, func()) {
	return parent, func() {}
}

func (cc *clientConn) watchAfter(parent context.Context, _ time.Duration) (context.Context, func()) {
	return parent, func() {}
}

// peekOpen cannot tell here: the connection is taken as open.
func peekOpen(net.Conn) bool { return true }
