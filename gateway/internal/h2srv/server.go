// Package h2srv is the gateway's HTTP/2 server: it serves an
// http.Handler on a handshaken TLS connection whose ALPN chose "h2".
//
// Why not net/http's: its HTTP/2 server hands every frame between the
// stream's goroutine and the connection's serve loop on channels, and
// writes each HEADERS frame from a goroutine of its own; it spent more
// CPU a request, answering by itself, than nginx spends proxying (see
// docs/benchmarks.md). Here one reader goroutine per connection parses
// frames (x/net/http2's Framer and HPACK) and starts a goroutine per
// stream for the handler; handlers write their frames into the
// connection's buffered writer under the connection's mutex, and the
// last writer flushes: one write(2) carries every frame ready at the
// time, whether the reader's (SETTINGS and PING acknowledgements, window
// updates) or the handlers' (responses).
package h2srv

import (
	"bufio"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Server serves HTTP/2 connections; the zero value with a Handler works.
type Server struct {
	Handler http.Handler
	// Log gets handler panics and protocol errors worth a line (nil: the
	// default logger).
	Log *slog.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool

	wmu     sync.Mutex
	idle    []*worker // parked handler goroutines, last parked first
	retired bool      // Shutdown: workers end after their stream
}

// worker is a handler goroutine kept between streams: a new goroutine's
// stack starts small and grows (copied) to the handler's depth for
// every stream, a tenth of the gateway's CPU under h2load; a parked
// worker keeps its grown stack.
type worker struct{ next chan *stream }

const maxIdleWorkers = 256

// dispatch runs st's handler on a parked worker, or a new one.
func (s *Server) dispatch(st *stream) {
	s.wmu.Lock()
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.wmu.Unlock()
		w.next <- st
		return
	}
	s.wmu.Unlock()
	w := &worker{next: make(chan *stream, 1)}
	go w.run(s, st)
}

func (w *worker) run(s *Server, st *stream) {
	for {
		st.c.runHandler(st)
		s.wmu.Lock()
		if len(s.idle) >= maxIdleWorkers || s.retired {
			s.wmu.Unlock()
			return
		}
		s.idle = append(s.idle, w)
		s.wmu.Unlock()
		if st = <-w.next; st == nil {
			return
		}
	}
}

// ConnOptions are one connection's limits, read from the live config
// when it starts.
type ConnOptions struct {
	// Idle closes a connection with no open stream for this long.
	Idle time.Duration
	// Preface bounds the wait for the client's connection preface.
	Preface time.Duration
	// Send bounds each write to the socket, and is the write deadline a
	// handler gets when it sets none (0: none).
	Send time.Duration
	// MaxHeaderList bounds a request's decoded header list (HPACK's
	// size: name, value and 32 bytes per field); 0: 1 MiB.
	MaxHeaderList uint32
	// MaxConcurrentStreams is advertised and enforced; 0: 250.
	MaxConcurrentStreams uint32
}

// Protocol constants.
const (
	defaultMaxStreams  = 250     // as net/http
	defaultHeaderList  = 1 << 20 // as net/http's default
	recvWindow         = 1 << 20 // per stream and per connection, as net/http
	maxFrame           = 16384   // the frames we send and accept (the protocol's default)
	creditThreshold    = 16 << 10
	initialPeerWindow  = 65535
	maxWindow          = 1<<31 - 1
	rapidResetMin      = 100      // resets tolerated before the ratio applies
	readBufSize        = 16 << 10 // per connection, idle ones too: a frame larger than it is read through
	writeBufSize       = 16 << 10 // a TLS record's worth: a larger buffer is written as several records anyway
	maxPendingHandlers = 2        // × MaxConcurrentStreams: handlers still running after their stream was reset
)

// ServeConn serves HTTP/2 on tc, whose handshake negotiated "h2", until
// the client leaves, the connection idles out, or Shutdown drains it. It
// returns once the connection's reader is done; handlers still running
// see their contexts cancelled, and tc is closed.
func (s *Server) ServeConn(tc *tls.Conn, o ConnOptions) {
	st := tc.ConnectionState()
	s.serve(tc, tc.NetConn(), &st, o)
}

// serve serves nc (raw: the connection under it, closed to end it).
func (s *Server) serve(nc, raw net.Conn, st *tls.ConnectionState, o ConnOptions) {
	c := newConn(s, nc, raw, st, o)
	if !s.track(c, true) {
		raw.Close()
		return
	}
	defer s.track(c, false)
	c.serve()
}

func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.draining {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

// Shutdown starts a graceful drain: every connection gets a GOAWAY
// naming the last stream it will serve, finishes its streams and
// closes; connections served later are refused. It does not wait: the
// caller waits for ServeConn to return (the gateway's connection group).
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.draining = true
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		// Concurrently: a client that stopped reading holds its GOAWAY's
		// write (up to the send timeout), not every other connection's.
		go c.goAway(http2.ErrCodeNo, true)
	}
	// Parked workers end; streams still running keep theirs to the end.
	s.wmu.Lock()
	s.retired = true
	idle := s.idle
	s.idle = nil
	s.wmu.Unlock()
	for _, w := range idle {
		w.next <- nil
	}
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// dateCache is the Date header, made at most once a second.
type dateCache struct {
	mu   sync.Mutex
	sec  int64
	text string
}

var date dateCache

func (d *dateCache) get(now time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := now.Unix(); s != d.sec {
		d.sec = s
		d.text = now.UTC().Format(http.TimeFormat)
	}
	return d.text
}

var (
	errStreamClosed = errors.New("h2srv: stream closed")
	errConnClosed   = errors.New("h2srv: connection closed")
)

// bufConn is what the reader reads: the TLS connection through a buffer.
func newReader(c net.Conn) *bufio.Reader { return bufio.NewReaderSize(c, readBufSize) }
