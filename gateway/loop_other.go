//go:build !linux

package gateway

import (
	"crypto/tls"
	"errors"
	"net"
)

// The event loop is Linux's (loop_linux.go); elsewhere every connection
// takes the goroutine path.
type evloop struct{}

func (g *Gateway) loopServes() bool { return false }

func (g *Gateway) startTLSLoops() error { return nil }

func (g *Gateway) tlsServer(c net.Conn) net.Conn { return tls.Server(c, g.tlsConf) }

func (g *Gateway) adoptTLS(*clientConn) bool { return false }

func (g *Gateway) listenLoops(string) (net.Addr, error) {
	return nil, errors.New("event loop: Linux only")
}

func (g *Gateway) drainLoops(bool) {}
func (g *Gateway) stopLoops(bool)  {}
func (g *Gateway) runLoops()       {}
func (g *Gateway) closeLoops()     {}
