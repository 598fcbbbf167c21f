package gateway

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// The request path, file by file: accept (this file: connections and
// their read loop) → parse (parse.go: the head, checked strictly) →
// route (route.go: host and path to an upstream) → attempt loop
// (attempt.go: pick, exchange, decide, report) over a transport
// (transport_fast.go, transport_slow.go) → relay (relay.go: the response
// to the client) → log (log.go: one access line).

func (g *Gateway) acceptLoop(ln net.Listener) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if g.draining.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off a little.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.log.Warn("accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if g.tlsConf != nil {
			// The handshake runs on the connection's own goroutine
			// (serveConn), not here: a slow client must not stall Accept.
			c = g.tlsServer(c)
		}
		cc := g.newClientConn(c)
		if cc == nil {
			c.Close()
			continue
		}
		go g.serveConn(cc)
	}
}

// clientConn is one client connection on the fast path with its reusable
// buffers; the whole struct is pooled between connections.
type clientConn struct {
	g    *Gateway
	c    net.Conn // the client's connection: a *tls.Conn over TLS
	raw  net.Conn // the TCP connection under c (c itself in cleartext)
	tls  bool     // c is a *tls.Conn: X-Forwarded-Proto is https
	br   *bufio.Reader
	bw   *bufio.Writer // writes into sp
	sp   spool
	idle atomic.Bool
	// busy is the target connection of the exchange in flight, so a
	// shutdown past its grace can end a wait on a target too.
	busy atomic.Pointer[upConn]

	ip    []byte // client IP, for X-Forwarded-For and client_ip keys
	ipStr string // made on first use by a hash key
	req   h1.Request
	lc    *liveConfig // the config req was routed with (parse.go)
	rte   *route      // req's route, nil when none matched
	up    *upstream   // rte's upstream
	res   h1.Response
	out   []byte // the head sent upstream
	body  []byte // a buffered request body
	rid   []byte // request ID
	tried []*balance.Endpoint
	scr   []byte // scratch for local responses
	scr2  []byte // scratch for a local response's extra fields

	// The request in flight, as the fast transport's exchange needs it.
	n          int64   // body length (0: none)
	buffered   bool    // the body is in body (or there is none)
	streamed   bool    // an unbuffered body started going to a target
	isHead     bool    // HEAD: the response has no body
	idemKey    bool    // the request carries an Idempotency-Key
	replayable bool    // see request.replayable
	uc         *upConn // the connection whose response head was just read

	deadline time.Time // the read deadline set on c
	now      time.Time // when the last request ended; zero: not read
	linger   bool      // answered and closing with the request unread: see lingerClose
}

func (g *Gateway) newClientConn(c net.Conn) *clientConn {
	cfg := g.cfg()
	size := int(cfg.MaxHeaderSize)
	cc, _ := g.ccPool.Get().(*clientConn)
	if cc == nil || cc.br.Size() != size {
		cc = &clientConn{g: g, br: bufio.NewReaderSize(nil, size), bw: bufio.NewWriterSize(nil, 4<<10)}
	}
	cc.c, cc.raw, cc.tls = c, c, false
	if tc, ok := c.(*tls.Conn); ok { // a handed-back one sets these itself (loop_linux.go's handOff)
		cc.raw, cc.tls = tc.NetConn(), true
	}
	cc.deadline = time.Time{}
	cc.linger = false
	cc.br.Reset(c)
	cc.sp.reset(c, cfg)
	cc.bw.Reset(&cc.sp)
	cc.ip = cc.ip[:0]
	cc.ipStr = ""
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cc.ip = ta.AddrPort().Addr().Unmap().AppendTo(cc.ip)
	}
	g.connMu.Lock()
	if g.draining.Load() {
		g.connMu.Unlock()
		return nil
	}
	g.conns[cc] = struct{}{}
	g.connWG.Add(1)
	g.connMu.Unlock()
	return cc
}

func (g *Gateway) release(cc *clientConn, handedOff bool) {
	if cc.linger && !handedOff {
		cc.lingerClose(g)
	}
	g.connMu.Lock()
	delete(g.conns, cc)
	g.connMu.Unlock()
	g.connWG.Done()
	if handedOff {
		return // net/http owns the conn and its reader now
	}
	cc.c.Close()
	cc.c, cc.raw = nil, nil
	cc.sp.drop()
	cc.sp.c = nil
	cc.br.Reset(nil)
	cc.bw.Reset(nil)
	if cap(cc.body) > 1<<20 {
		cc.body = nil
	}
	g.ccPool.Put(cc)
}

// Lingering close, after nginx's lingering_close: how long a refused
// connection is read from, and how much of it, before it is closed.
const (
	lingerTime = 5 * time.Second // in all
	lingerIdle = time.Second     // without a byte from the client
	lingerMax  = 16 << 20        // bytes read and thrown away
)

// lingerClose ends a connection that was answered while the client was
// still sending (a refused head, a body over max_body_size). Closing it
// with input unread makes the kernel reset it: the client's send fails
// before it reads the answer, and a reset can destroy an answer not yet
// read. So the gateway half-closes (the client reads the answer to its
// end) and reads what the client still sends, throwing it away, until
// the client closes, falls silent for lingerIdle, or lingerTime or
// lingerMax runs out; a hostile client holds the connection no longer.
// A lingering connection counts as idle: Shutdown ends it at once.
func (cc *clientConn) lingerClose(g *Gateway) {
	cw, ok := cc.c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	cc.idle.Store(true)
	end := time.Now().Add(lingerTime)
	buf := make([]byte, 32<<10)
	for read := 0; read < lingerMax; {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		_ = cc.c.SetReadDeadline(now.Add(min(lingerIdle, end.Sub(now))))
		// After the deadline is set: a Shutdown that began before it sees
		// draining here, one that begins after it moves the deadline to
		// the past.
		if g.draining.Load() {
			return
		}
		n, err := cc.br.Read(buf)
		read += n
		if err != nil {
			return
		}
	}
}

// bufferedConn is a connection whose first bytes sit in a bufio.Reader:
// how a connection the fast path peeked at is handed to net/http.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
	// tls is the connection state when Conn is a *tls.Conn: net/http
	// sees only the wrapper, so the gateway gives each request its r.TLS
	// back (handedOffTLS in accept_tls.go).
	tls *tls.ConnectionState
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// serveConn is a client connection's read loop: wait for a head, parse
// it (parse.go), serve it on the fast path or hand the connection to
// net/http.
func (g *Gateway) serveConn(cc *clientConn) {
	handedOff := false
	defer func() { g.release(cc, handedOff) }()
	cfg := g.cfg()
	if tc, ok := cc.c.(*tls.Conn); ok { // not yet handshaken
		switch cc.handshake(tc, cfg.Timeouts.ReadHeader.D()) {
		case handshakeFailed:
			return
		case handshakeH2:
			if g.h2 != nil { // our own server, on this goroutine (accept_tls.go)
				g.serveH2(tc, cfg)
				return
			}
			// The *tls.Conn itself, unwrapped: net/http recognises it
			// and runs its HTTP/2 server (TLSNextProto) on it.
			handedOff = g.handoff.give(cc.c)
			return
		}
		if g.adoptTLS(cc) { // HTTP/1.1 on an event loop (loop_tls_linux.go)
			handedOff = true
			return
		}
	}
	idleTO := cfg.Timeouts.Idle.D()
	// A new connection gets read_header for its first byte, not idle: a
	// client that connects and sends nothing is not a keep-alive client
	// between requests, and would otherwise hold a connection for idle.
	now := time.Now()
	cc.deadline = now.Add(cfg.Timeouts.ReadHeader.D())
	_ = cc.c.SetReadDeadline(cc.deadline)
	// Deadlines are moved only when less than half of them is left: a
	// keep-alive connection then costs a deadline update every idle/2
	// instead of two per request (timers are a visible share of a proxy's
	// CPU), and a timeout fires between half and all of its length.
	for first := true; ; first = false {
		if cc.br.Buffered() == 0 {
			if !first && cc.deadline.Sub(now) < idleTO/2 {
				cc.deadline = now.Add(idleTO)
				_ = cc.c.SetReadDeadline(cc.deadline)
			}
			cc.idle.Store(true)
			if g.draining.Load() {
				return
			}
			if _, err := cc.br.Peek(1); err != nil {
				return
			}
			cc.idle.Store(false)
		}
		switch cc.parse(cfg.Timeouts.ReadHeader.D()) {
		case parseClose:
			return
		case parseHandOff:
			handedOff = g.handOff(cc)
			return
		}
		if !cc.serveOne() || g.draining.Load() {
			return
		}
		if now = cc.now; now.IsZero() {
			now = time.Now()
		}
	}
}

// handOff gives the connection, with what is buffered, to net/http.
func (g *Gateway) handOff(cc *clientConn) bool {
	if cc.flushOut() != nil { // a pipelined answer before it goes first
		return false
	}
	_ = cc.c.SetReadDeadline(time.Time{})
	_ = cc.c.SetWriteDeadline(time.Time{})
	br := cc.br
	cc.br = bufio.NewReaderSize(nil, br.Size()) // the pooled struct needs a fresh one
	bc := &bufferedConn{Conn: cc.c, r: br}
	if tc, ok := cc.c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := tc.ConnectionState()
		bc.tls = &st
	}
	return g.handoff.give(bc)
}

// handoffListener feeds connections the fast path will not serve to the
// net/http server.
type handoffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}
