package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h2srv"
)

// TLS on the fast path: the listener is the same accept loop as in
// cleartext (accept.go), with each connection wrapped in a *tls.Conn.
// serveConn runs the handshake on the connection's goroutine; ALPN "h2"
// goes to the HTTP/2 server (our own, internal/h2srv, or net/http's with
// http2_server: net/http), everything else is HTTP/1.1 read by
// the same parser, attempt loop and target pools as cleartext, and what
// the fast path hands off still reaches net/http as TLS.

type handshakeOutcome int

const (
	handshakeHTTP1  handshakeOutcome = iota // serve on the fast path
	handshakeH2                             // ALPN chose h2: h2srv's, or net/http's
	handshakeFailed                         // or timed out: close
)

// handshake completes the TLS handshake within read_header, the time a
// client has to send a head: a client that connects and never sends a
// ClientHello (or never finishes) is closed then, as one that never sends
// a head is. The write deadline covers a client that never reads the
// server's flight.
func (cc *clientConn) handshake(tc *tls.Conn, to time.Duration) handshakeOutcome {
	cc.deadline = time.Now().Add(to)
	_ = tc.SetDeadline(cc.deadline)
	// No request yet: Shutdown may end the handshake at once. Marked
	// after the deadline is set, checked after marking (as lingerClose):
	// a Shutdown either sees idle and moves the deadline to the past, or
	// is seen here.
	cc.idle.Store(true)
	if cc.g.draining.Load() {
		return handshakeFailed
	}
	if err := tc.Handshake(); err != nil {
		return handshakeFailed
	}
	cc.idle.Store(false)
	_ = tc.SetWriteDeadline(time.Time{})
	// The read loop sets the idle deadline for the first request.
	cc.deadline = time.Time{}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		_ = tc.SetReadDeadline(time.Time{}) // net/http sets its own
		return handshakeH2
	}
	return handshakeHTTP1
}

// ownH2 reports whether HTTP/2 over TLS is served by internal/h2srv:
// http2_server (default own), or FULCRUM_GATEWAY_H2=net/http|own for a
// whole test run.
func (g *Gateway) ownH2() bool {
	switch os.Getenv("FULCRUM_GATEWAY_H2") {
	case "net/http":
		return false
	case "own":
		return true
	}
	return g.cfg().HTTP2Server != "net/http"
}

// serveH2 serves an h2 connection with our own server until it ends.
// The connection stays in g.conns (Shutdown's GOAWAY reaches it through
// g.h2, its forced close through the connection).
func (g *Gateway) serveH2(tc *tls.Conn, cfg *config.Config) {
	hl := uint32(cfg.MaxHeaderSize) + 320 // HPACK counts 32 bytes a field: room for ten, as net/http allows
	g.h2.ServeConn(tc, h2srv.ConnOptions{
		Idle:          cfg.Timeouts.Idle.D(),
		Preface:       cfg.Timeouts.ReadHeader.D(),
		Send:          cfg.Timeouts.Send.D(),
		MaxHeaderList: hl,
	})
}

type handedOffTLSKey struct{}

// handedOffConnContext notes, for each connection net/http accepts from
// the handoff listener, the TLS state of a wrapped *tls.Conn: net/http
// recognises only a bare *tls.Conn, and would otherwise take a TLS
// client's handed-off requests (chunked uploads, upgrades, Expect,
// HTTP/1.0) for cleartext ones (X-Forwarded-Proto: http).
func handedOffConnContext(ctx context.Context, c net.Conn) context.Context {
	if bc, ok := c.(*bufferedConn); ok && bc.tls != nil {
		return context.WithValue(ctx, handedOffTLSKey{}, bc.tls)
	}
	return ctx
}

// handedOffTLS gives such a request its r.TLS back before the handler
// (and ReverseProxy's X-Forwarded-Proto) looks at it.
func handedOffTLS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if st, ok := r.Context().Value(handedOffTLSKey{}).(*tls.ConnectionState); ok {
				r.TLS = st
			}
		}
		h.ServeHTTP(w, r)
	})
}
