package h2srv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// conn is one HTTP/2 connection. The reader goroutine (serve) owns br
// and the frame parsing; everything else — the streams, both windows,
// the writer, the HPACK encoder — is under mu, which handlers take to
// write their frames.
type conn struct {
	srv      *Server
	nc       net.Conn // the TLS connection: frames are read and written through it
	raw      net.Conn // the connection under it, closed to end this one
	o        ConnOptions
	tlsState *tls.ConnectionState
	remote   string
	ctx      context.Context
	cancel   context.CancelFunc
	br       *bufio.Reader
	fr       *http2.Framer // reads from br, writes into bw (under mu)

	// waiters counts goroutines about to take mu to write: the last one
	// in flushes (see endWrite).
	waiters atomic.Int32

	mu         sync.Mutex
	cond       sync.Cond // on mu: writers waiting for a window
	bw         *bufio.Writer
	readerBusy bool // the reader has input to process: it flushes before it waits
	dirty      bool // bw holds frames not flushed
	closed     bool // writes fail from here on
	linger     bool // closed after an error GOAWAY: close lingers
	wdeadline  time.Time
	rdeadline  time.Time
	hbuf       bytes.Buffer
	enc        *hpack.Encoder
	streams    map[uint32]*stream // open and half-closed streams
	lastID     uint32             // the highest stream the client opened
	goAwaySent bool
	sendWin    int64 // what the client lets us send on the connection
	peerInit   int64 // its SETTINGS_INITIAL_WINDOW_SIZE
	recvWin    int64 // what we let the client send, less what it sent
	connCredit int64 // body bytes consumed and not yet credited back
	handlers   int   // handlers running, reset streams' included
	opened     int   // streams opened, for the reset ratio
	resets     int   // streams the client reset before their response ended
	maxStreams uint32
	headerList uint32
}

func newConn(s *Server, nc, raw net.Conn, st *tls.ConnectionState, o ConnOptions) *conn {
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = defaultMaxStreams
	}
	if o.MaxHeaderList == 0 {
		o.MaxHeaderList = defaultHeaderList
	}
	c := &conn{srv: s, nc: nc, raw: raw, o: o, tlsState: st, remote: nc.RemoteAddr().String(),
		br: newReader(nc), bw: bufio.NewWriterSize(nc, writeBufSize),
		streams: map[uint32]*stream{}, sendWin: initialPeerWindow, peerInit: initialPeerWindow,
		recvWin: recvWindow, maxStreams: o.MaxConcurrentStreams, headerList: o.MaxHeaderList}
	c.cond.L = &c.mu
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = c.headerList
	c.fr.SetMaxReadFrameSize(maxFrame)
	c.fr.SetReuseFrames()
	c.enc = hpack.NewEncoder(&c.hbuf)
	return c
}

// serve is the reader: the preface, then frames until the connection
// ends.
func (c *conn) serve() {
	defer c.close()
	c.mu.Lock()
	c.beginFrames()
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.maxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.headerList},
	)
	_ = c.fr.WriteWindowUpdate(0, recvWindow-initialPeerWindow)
	c.flushLocked()
	c.mu.Unlock()
	if c.o.Preface > 0 {
		c.rdeadline = time.Now().Add(c.o.Preface)
		_ = c.nc.SetReadDeadline(c.rdeadline)
	}
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil || string(pre[:]) != http2.ClientPreface {
		return
	}
	for first := true; ; first = false {
		if !c.waitInput() {
			return
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			if !c.readError(err) {
				return
			}
			continue
		}
		if first {
			// The client's preface ends with a SETTINGS frame (RFC 9113 3.4).
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				c.goAway(http2.ErrCodeProtocol, false)
				return
			}
		}
		if !c.handle(f) {
			return
		}
	}
}

// waitInput returns when a whole frame is buffered, or the reader must
// wait for the socket: then it first flushes what is written (the last
// writer's duty passes to it while it has input), and applies the idle
// timeout while no stream is open. false: the connection is done.
func (c *conn) waitInput() bool {
	n := c.br.Buffered()
	if n >= 9 {
		h, _ := c.br.Peek(9)
		if need := 9 + (int(h[0])<<16 | int(h[1])<<8 | int(h[2])); need <= n {
			return true
		}
	}
	c.mu.Lock()
	c.readerBusy = false
	c.flushLocked()
	if c.closed || (c.goAwaySent && len(c.streams) == 0) {
		c.mu.Unlock()
		return false
	}
	c.armRead(time.Now())
	c.mu.Unlock()
	if n > 0 {
		return true // part of a frame: ReadFrame waits for the rest
	}
	for {
		_, err := c.br.Peek(1)
		if err == nil {
			return true
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		c.mu.Lock()
		if c.closed || (c.goAwaySent && len(c.streams) == 0) {
			c.mu.Unlock()
			return false
		}
		if len(c.streams) == 0 { // idle: say so and close
			c.writeGoAwayLocked(http2.ErrCodeNo)
			c.mu.Unlock()
			return false
		}
		// Streams are open: idle does not apply, keep waiting.
		c.rdeadline = time.Time{}
		c.armRead(time.Now())
		c.mu.Unlock()
	}
}

// armRead moves the read deadline to now+idle when less than half of
// it is left (a deadline update per idle/2, not per frame). Under mu, so
// a handler setting it to the past to end a drained connection is not
// overwritten.
func (c *conn) armRead(now time.Time) {
	if c.o.Idle > 0 && c.rdeadline.Sub(now) < c.o.Idle/2 {
		c.rdeadline = now.Add(c.o.Idle)
		_ = c.nc.SetReadDeadline(c.rdeadline)
	}
}

// readError handles an error from ReadFrame: a stream error resets that
// stream and reading goes on; anything else ends the connection.
func (c *conn) readError(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		c.mu.Lock()
		c.readerBusy = true
		if se.StreamID%2 == 1 && se.StreamID > c.lastID {
			c.lastID = se.StreamID // a refused new stream still uses its number
		}
		c.resetLocked(se.StreamID, c.streams[se.StreamID], se.Code)
		c.mu.Unlock()
		return true
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		c.goAway(http2.ErrCode(ce), false)
	}
	return false
}

// close ends the connection when the reader is done: writes fail,
// bodies end, handlers' contexts are cancelled.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.streams {
		if st.body != nil {
			st.body.closeWith(errConnClosed)
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.cancel()
	if c.linger {
		// After an error GOAWAY: half-close, and throw away what the
		// client still sends for a while (at most 1 s, 1 MiB), as
		// lingering closes do.
		if cw, ok := c.raw.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = c.raw.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.CopyN(io.Discard, c.raw, 1<<20)
		}
	}
	// The TCP connection, not the TLS one: tls.Conn.Close would write a
	// close_notify alert, which can wait on a client that stopped reading.
	_ = c.raw.Close()
}

// endLocked ends the connection after the reader sent an error GOAWAY:
// writes fail from here on, and the reader, returning, closes it with a
// lingering close (close), so the client reads the GOAWAY rather than a
// reset from input left unread.
func (c *conn) endLocked() {
	if !c.closed {
		c.closed = true
		c.linger = true
		c.cond.Broadcast()
	}
}

// fail ends the connection after a write error (under mu).
func (c *conn) failLocked() {
	if !c.closed {
		c.closed = true
		c.cond.Broadcast()
		_ = c.raw.Close() // wakes the reader
	}
}

// beginFrames is called before writing frames (under mu): the first
// frames since a flush arm the write deadline, so a client that stops
// reading cannot hold a writer (and mu) past timeouts.send.
func (c *conn) beginFrames() {
	if c.dirty {
		return
	}
	c.dirty = true
	if c.o.Send > 0 {
		now := time.Now()
		if c.wdeadline.Sub(now) < c.o.Send/2 {
			c.wdeadline = now.Add(c.o.Send)
			_ = c.nc.SetWriteDeadline(c.wdeadline)
		}
	}
}

func (c *conn) flushLocked() {
	if !c.dirty || c.closed {
		return
	}
	c.dirty = false
	if c.bw.Flush() != nil {
		c.failLocked()
	}
}

// lockWrite takes mu for a writer other than the reader; unlockWrite
// releases it, flushing first unless another writer is about to take
// it or the reader has input left (either flushes after).
func (c *conn) lockWrite() {
	c.waiters.Add(1)
	c.mu.Lock()
	c.waiters.Add(-1)
}

func (c *conn) unlockWrite() {
	if !c.dirty || c.waiters.Load() != 0 || c.readerBusy {
		c.mu.Unlock()
		return
	}
	if c.handlers > 1 {
		// Other streams' handlers are running, and those whose target
		// has answered are runnable: yield once so that they write
		// their responses first, and the last of them flushes them all
		// in one write, rather than a write each.
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		if c.waiters.Load() != 0 || c.readerBusy {
			c.mu.Unlock()
			return
		}
	}
	c.flushLocked()
	c.mu.Unlock()
}

// writeGoAwayLocked sends GOAWAY naming the last stream served, once
// (an error code replaces an earlier graceful one).
func (c *conn) writeGoAwayLocked(code http2.ErrCode) {
	if c.closed || (c.goAwaySent && code == http2.ErrCodeNo) {
		return
	}
	c.goAwaySent = true
	c.beginFrames()
	_ = c.fr.WriteGoAway(c.lastID, code, nil)
	c.flushLocked()
}

// goAway sends GOAWAY. graceful: the streams open finish, then the
// connection closes (the reader is woken if none is open); otherwise
// the connection ends now.
func (c *conn) goAway(code http2.ErrCode, graceful bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeGoAwayLocked(code)
	if !graceful {
		c.endLocked()
		return
	}
	if len(c.streams) == 0 {
		_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

// resetLocked sends RST_STREAM for id and ends st (nil: no stream
// state, e.g. a refused one).
func (c *conn) resetLocked(id uint32, st *stream, code http2.ErrCode) {
	if !c.closed {
		c.beginFrames()
		_ = c.fr.WriteRSTStream(id, code)
	}
	if st != nil {
		c.endStreamLocked(st, errStreamReset{code})
	}
}

// endStreamLocked forgets a reset stream: its writes fail, its body
// reads fail with err, its context ends.
func (c *conn) endStreamLocked(st *stream, err error) {
	st.reset = true
	st.recvOpen = false
	if st.inMap {
		st.inMap = false
		delete(c.streams, st.id)
		c.afterStreamGone()
	}
	if st.body != nil {
		if n := st.body.closeWith(err); n > 0 {
			c.creditConnLocked(n)
		}
	}
	c.cond.Broadcast()
	st.cancel()
}

// afterStreamGone wakes the reader of a drained connection to close it.
func (c *conn) afterStreamGone() {
	if c.goAwaySent && len(c.streams) == 0 {
		_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

// creditConnLocked gives the client back n bytes of the connection's
// window, in batches.
func (c *conn) creditConnLocked(n int64) {
	c.connCredit += n
	if c.connCredit >= creditThreshold && !c.closed {
		c.beginFrames()
		_ = c.fr.WriteWindowUpdate(0, uint32(c.connCredit))
		c.recvWin += c.connCredit
		c.connCredit = 0
	}
}

type errStreamReset struct{ code http2.ErrCode }

func (e errStreamReset) Error() string { return "h2srv: stream reset: " + e.code.String() }
