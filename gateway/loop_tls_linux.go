//go:build linux

package gateway

import (
	"crypto/tls"
	"errors"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// HTTP/1.1 over TLS on the event loops. The handshake runs on the
// connection's goroutine, as before (accept_tls.go): it is rare next to
// requests on a kept-alive connection, and crypto/tls cannot resume a
// handshake that met a would-block. Once it is done, the connection is
// adopted by a loop, and crypto/tls works on buffers from then on: its
// records come from the loop's non-blocking reads and its output goes
// into a buffer the loop writes (tlsIO). crypto/tls keeps a partial
// record across a temporary error, so a would-block read simply ends a
// Read until the next event. The loop then serves the connection as any
// cleartext one: same parser, attempt loop, pools and queue; only the
// client's bytes pass through tc. Compared with a goroutine per
// connection, a request costs no goroutine park and wake-up, and no
// EAGAIN read (the ready flag carries over), as nginx's worker does.

// tlsIO is the connection under a *tls.Conn: the TCP connection while a
// goroutine owns it (the handshake; after a handoff back), and the
// loop's socket in between.
type tlsIO struct {
	*net.TCPConn
	fd   int    // the loop's socket once adopted; -1 while a goroutine owns the connection
	c    *lconn // the loop's connection, for its ready flag
	wire []byte // encrypted bytes the socket has not taken yet
	wr   int    // of wire, written

	// The record framing of what was read, from the first byte, so the
	// loop knows when crypto/tls holds no whole record it has not
	// decrypted: then a drained socket means nothing to read, and the
	// loop skips the would-block Read (which costs crypto/tls an
	// allocation) as it skips an EAGAIN read in cleartext.
	hdr      [5]byte
	hdrN     int   // bytes of the current record's header seen
	rem      int   // bytes of the current record's body not seen yet
	recs     int64 // whole records read
	consumed int64 // records crypto/tls took, as far as Reads show
	drained  bool  // the last Read left no plaintext behind in crypto/tls
}

// frame follows the record framing over p, bytes just read.
func (t *tlsIO) frame(p []byte) {
	for len(p) > 0 {
		if t.rem > 0 {
			k := min(t.rem, len(p))
			t.rem -= k
			p = p[k:]
			if t.rem == 0 {
				t.recs++
			}
			continue
		}
		k := copy(t.hdr[t.hdrN:], p)
		t.hdrN += k
		p = p[k:]
		if t.hdrN == len(t.hdr) {
			t.hdrN = 0
			if t.rem = int(t.hdr[3])<<8 | int(t.hdr[4]); t.rem == 0 {
				t.recs++
			}
		}
	}
}

// read notes what a Read of crypto/tls into a buffer of size room gave,
// and reports whether crypto/tls may hold more: plaintext left from a
// record, or a whole record not decrypted yet.
func (t *tlsIO) read(n, room int, err error) bool {
	switch {
	case err != nil && errors.Is(err, errWouldBlock):
		t.consumed, t.drained = t.recs, true // it took every whole record there was
		return false
	case n > 0:
		if t.drained {
			t.consumed++ // at least one record; more (empty ones) only means a Read more
		}
		t.drained = n < room
	}
	return !t.drained || t.consumed < t.recs
}

// wouldBlock is a read's "nothing now" for crypto/tls: a temporary
// net.Error, which it does not keep as the connection's error.
type wouldBlock struct{}

func (wouldBlock) Error() string   { return "would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

var errWouldBlock net.Error = wouldBlock{}

func (t *tlsIO) Read(p []byte) (int, error) {
	if t.fd < 0 {
		n, err := t.TCPConn.Read(p)
		t.frame(p[:max(n, 0)])
		return n, err
	}
	c := t.c
	for {
		if !c.readable {
			return 0, errWouldBlock // drained since the last event: no EAGAIN read
		}
		n, err := rawRead(t.fd, p)
		switch {
		case n > 0:
			if n < len(p) {
				c.readable = false
			}
			t.frame(p[:n])
			return n, nil
		case n == 0 && err == nil:
			return 0, io.EOF
		case errors.Is(err, unix.EAGAIN):
			c.readable = false
		case errors.Is(err, unix.EINTR):
		default:
			return 0, err
		}
	}
}

// Write, adopted, only buffers: the loop writes wire as the socket takes
// it (flushTLS), so crypto/tls never sees a short write.
func (t *tlsIO) Write(p []byte) (int, error) {
	if t.fd < 0 {
		return t.TCPConn.Write(p)
	}
	t.wire = append(t.wire, p...)
	return len(p), nil
}

// Close, adopted, leaves the socket to the loop.
func (t *tlsIO) Close() error {
	if t.fd >= 0 {
		return nil
	}
	return t.TCPConn.Close()
}

// tlsServer wraps an accepted connection for TLS: over a tlsIO where
// loops can adopt it.
func (g *Gateway) tlsServer(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok && len(g.loops) > 0 {
		return tls.Server(&tlsIO{TCPConn: tc, fd: -1}, g.tlsConf)
	}
	return tls.Server(c, g.tlsConf)
}

// adoptTLS gives a connection whose handshake chose HTTP/1.1 to a loop;
// false leaves it to the goroutine path. The connection stays counted
// in connWG across the move, so a Shutdown waits for it.
func (g *Gateway) adoptTLS(cc *clientConn) bool {
	tc, ok := cc.c.(*tls.Conn)
	if !ok || len(g.loops) == 0 {
		return false
	}
	t, ok := tc.NetConn().(*tlsIO)
	if !ok || t.fd >= 0 {
		return false
	}
	fd, err := dupFD(t.TCPConn)
	if err != nil {
		return false
	}
	g.connMu.Lock()
	if g.draining.Load() {
		g.connMu.Unlock()
		_ = unix.Close(fd)
		return false
	}
	g.connWG.Add(1) // the loop's; release takes the goroutine's
	// Out of the goroutine path's set now: a Shutdown past its grace
	// closes what is there, and this *tls.Conn is the loop's from here.
	delete(g.conns, cc)
	g.connMu.Unlock()
	_ = t.TCPConn.Close() // the loop holds the socket's duplicate
	t.fd = fd
	ip := append([]byte(nil), cc.ip...)
	l := g.place(nil)
	if !l.post(func(l *evloop) { l.adopt(fd, tc, t, ip) }) {
		l.clients.Add(-1)
		_ = unix.Close(fd) // the loop is gone: so is the gateway
		g.connWG.Done()
	}
	return true
}

// adopt serves a TLS connection from its first request on.
func (l *evloop) adopt(fd int, tc *tls.Conn, t *tlsIO, ip []byte) {
	cfg := l.g.cfg()
	c := l.newConn(fd, int(cfg.MaxHeaderSize))
	c.tc, c.tio, t.c = tc, t, c
	c.cc.tls = true
	c.cc.ip = append(c.cc.ip[:0], ip...)
	c.cc.ipStr = ""
	c.q.reset(cfg)
	if !l.admit(c, !l.draining && !l.g.draining.Load()) {
		return
	}
	// The client may have sent its first request with its last handshake
	// flight: crypto/tls may hold it already, and no event would say so.
	// The first Read that would block tells how many records the
	// handshake took.
	c.readable, c.tlsMore = true, true
	t.drained, t.consumed = true, 0
	l.readTLS(c)
}

// readTLS is readClient through crypto/tls: it reads while TLS has
// plaintext or the socket has bytes.
func (l *evloop) readTLS(c *lconn) {
	for !c.closed && (c.state == csHead || c.state == csBody) {
		if !l.makeRoom(c) {
			if c.w == len(c.in) && c.r == 0 {
				return
			}
			continue
		}
		room := len(c.in) - c.w
		n, err := c.tc.Read(c.in[c.w:])
		c.tlsMore = c.tio.read(n, room, err)
		if t := c.tio; t.wr < len(t.wire) && !c.q.pending() {
			// crypto/tls answered something while reading (a KeyUpdate):
			// send it now. A client that asks for more of that than it
			// reads is not a client: its answers are bounded.
			if len(t.wire)-t.wr > tlsWireMax {
				l.closeClient(c)
				return
			}
			if l.flushTLS(c); c.closed {
				return
			}
		}
		if n > 0 {
			c.w += n
			l.process(c)
		}
		if err != nil {
			switch {
			case errors.Is(err, errWouldBlock):
			case n > 0 && errors.Is(err, io.EOF) && !c.closed && c.state != csHead && c.state != csBody:
				// Its last request came with close_notify (crypto/tls
				// reads a following alert with the record, TLS 1.2):
				// answer it, then close, as the goroutine path does.
				c.closeAfter, c.tlsMore = true, false
			default:
				l.closeClient(c) // the client left, or broke the TLS stream
			}
			return
		}
		if !c.canRead() {
			return // drained, and crypto/tls holds no record: as a short read in cleartext
		}
	}
}

// tlsChunk is how much of the queue is encrypted at once: records of
// up to 16 KiB each, written with one write(2).
const tlsChunk = 32 << 10

// tlsWireMax bounds what crypto/tls may leave unwritten on its own
// account (answers to the client's post-handshake messages).
const tlsWireMax = 256 << 10

// flushTLS is flushQ through crypto/tls: it encrypts the queue a chunk
// at a time and writes the records while the client takes them.
func (l *evloop) flushTLS(c *lconn) bool {
	t := c.tio
	progressed := false
	for c.writable {
		if t.wr < len(t.wire) {
			n, err := writeFD(c.fd, t.wire[t.wr:])
			t.wr += n
			if n > 0 {
				progressed = true
			}
			if t.wr == len(t.wire) {
				t.wire, t.wr = t.wire[:0], 0
				if cap(t.wire) > 4*tlsChunk {
					t.wire = nil
				}
			}
			if err != nil {
				if errors.Is(err, unix.EAGAIN) {
					c.writable = false
					break
				}
				if !errors.Is(err, unix.EINTR) {
					l.closeClient(c)
					return progressed
				}
			}
			continue
		}
		if !c.q.pending() {
			break
		}
		p, err := c.q.next()
		if err == nil {
			p = p[:min(len(p), tlsChunk)]
			_, err = c.tc.Write(p)
		}
		if err != nil {
			l.closeClient(c)
			return progressed
		}
		c.q.advance(len(p))
	}
	return progressed
}

// tlsPrefixConn is a handed-off TLS connection whose first plaintext
// bytes the loop already read.
type tlsPrefixConn struct {
	*tls.Conn
	pending []byte
}

func (c *tlsPrefixConn) Read(p []byte) (int, error) { return readPending(&c.pending, p, c.Conn) }
