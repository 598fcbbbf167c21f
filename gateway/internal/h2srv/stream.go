package h2srv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is one request and its response. The fields from sendWin on
// are under the connection's mu.
type stream struct {
	c      *conn
	id     uint32
	ctx    context.Context
	cancel context.CancelFunc
	req    *http.Request
	body   *reqBody // nil: the request had none
	rw     responseWriter

	sendWin   int64 // what the client lets us send on the stream
	recvWin   int64 // what we let it send, less what it sent
	credit    int64 // body bytes consumed and not yet credited back
	declCL    int64 // the request's Content-Length, -1: none
	recvd     int64 // body bytes received
	recvOpen  bool  // the client may still send DATA
	sendDone  bool  // the response ended (END_STREAM sent)
	reset     bool  // reset either way: writes fail
	inMap     bool  // in c.streams
	wdeadline time.Time
	timer     *time.Timer // wakes a writer waiting for a window at its deadline
}

// runHandler runs the handler for st on its own goroutine, then ends the
// response (or resets the stream when the handler panicked).
func (c *conn) runHandler(st *stream) {
	c.handlerDone(st, !c.serveStream(st))
}

// serveStream runs the handler and ends the response; false when either
// panicked. The response's end is inside the recover too: a fault of
// ours there resets a stream rather than ending the process.
func (c *conn) serveStream(st *stream) (ok bool) {
	defer func() {
		if e := recover(); e != nil {
			ok = false
			if e != http.ErrAbortHandler { // the handler's way to cut a response: no log
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.log().Error("http2: handler panic", "client", c.remote, "uri", st.req.RequestURI,
					"panic", fmt.Sprint(e), "stack", string(buf))
			}
		}
	}()
	c.srv.Handler.ServeHTTP(&st.rw, st.req)
	st.rw.finish()
	return true
}

func (c *conn) handlerDone(st *stream, abort bool) {
	c.lockWrite()
	c.handlers--
	switch {
	case st.reset:
	case abort || !st.sendDone:
		c.resetLocked(st.id, st, http2.ErrCodeInternal)
	case st.recvOpen:
		// Answered with the request body still coming: ask the client
		// to stop sending it (RFC 9113 8.1).
		c.resetLocked(st.id, st, http2.ErrCodeNo)
	case st.inMap:
		st.inMap = false
		delete(c.streams, st.id)
		c.afterStreamGone()
	}
	if st.body != nil {
		if n := st.body.closeWith(errBodyClosed); n > 0 {
			c.creditConnLocked(n) // read by no one
		}
	}
	if st.timer != nil {
		st.timer.Stop()
	}
	c.unlockWrite()
	st.cancel()
	st.rw.release()
}

var errBodyClosed = errors.New("h2srv: request body closed")

// reqBody is a request body: DATA frames' payloads, read by the handler,
// credited back to the client as read.
type reqBody struct {
	st     *stream
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	off    int
	err    error         // io.EOF at END_STREAM
	closed bool          // the handler is done with it: data is thrown away
	expect bool          // Expect: 100-continue, not answered yet
	gap    time.Duration // the longest wait for the client's next DATA (Idle; 0: none)
	timer  *time.Timer   // wakes a Read at gap
}

var errBodyTimeout = errors.New("h2srv: request body: no data within the idle timeout")

// push adds data (under c.mu); false when no one will read it.
func (b *reqBody) push(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.err != nil {
		return false
	}
	if b.off == len(b.buf) {
		b.buf, b.off = b.buf[:0], 0
	}
	b.buf = append(b.buf, p...)
	b.cond.Signal()
	return true
}

// closeWith ends the body (nil: io.EOF, the client's END_STREAM); an
// error other than EOF also drops what is unread, and says how much.
func (b *reqBody) closeWith(err error) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	if b.err == nil || b.err == io.EOF && err != io.EOF {
		b.err = err
	}
	var n int64
	if err != io.EOF {
		n = int64(len(b.buf) - b.off)
		b.buf, b.off = nil, 0
		b.closed = true
	}
	b.cond.Broadcast()
	return n
}

func (b *reqBody) setTrailer(tr http.Header, k, v string) {
	b.mu.Lock() // read by the handler after EOF, which this lock orders
	tr[k] = append(tr[k], v)
	b.mu.Unlock()
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.expect {
		b.expect = false
		b.st.rw.write100()
	}
	b.mu.Lock()
	var deadline time.Time
	for b.off == len(b.buf) && b.err == nil {
		// A client that opens a body and stops sending holds a handler
		// (and a target's permit) no longer than the idle timeout, as
		// on HTTP/1.1: the stream is reset.
		if b.gap > 0 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(b.gap)
			} else if !now.Before(deadline) {
				b.mu.Unlock()
				b.st.c.bodyTimedOut(b.st)
				return 0, errBodyTimeout
			}
			if b.timer == nil {
				b.timer = time.AfterFunc(deadline.Sub(now), b.wake)
			} else {
				b.timer.Reset(deadline.Sub(now))
			}
		}
		b.cond.Wait()
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.off == len(b.buf) {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	b.mu.Unlock()
	if n > 0 {
		b.st.c.consumed(b.st, int64(n))
	}
	return n, nil
}

func (b *reqBody) wake() {
	b.mu.Lock()
	b.cond.Broadcast()
	b.mu.Unlock()
}

// bodyTimedOut resets a stream whose body stalled past the idle timeout.
func (c *conn) bodyTimedOut(st *stream) {
	c.lockWrite()
	defer c.unlockWrite()
	if !st.reset {
		c.resetLocked(st.id, st, http2.ErrCodeCancel)
	}
}

func (b *reqBody) Close() error {
	if n := b.closeWith(errBodyClosed); n > 0 {
		c := b.st.c
		c.lockWrite()
		c.creditConnLocked(n)
		c.unlockWrite()
	}
	return nil
}

// consumed credits n bytes read back to the client, in batches.
func (c *conn) consumed(st *stream, n int64) {
	c.lockWrite()
	defer c.unlockWrite()
	if c.closed {
		return
	}
	st.credit += n
	if st.credit >= creditThreshold && st.recvOpen {
		c.beginFrames()
		_ = c.fr.WriteWindowUpdate(st.id, uint32(st.credit))
		st.recvWin += st.credit
		st.credit = 0
	}
	c.creditConnLocked(n)
}

// responseWriter is the handler's http.ResponseWriter. Its body writes
// gather in buf; frames go out when buf fills, at Flush, and when the
// handler returns — a small response is one HEADERS and one DATA frame
// written under one lock.
type responseWriter struct {
	st          *stream
	hdr         http.Header
	status      int
	wroteHeader bool
	headerSent  bool
	noBody      bool // HEAD, 204, 304: body writes are dropped
	isHead      bool
	declCL      int64 // the handler's Content-Length, -1: none
	written     int64
	buf         []byte
	bufp        *[]byte  // buf's home in bodyBufs (kept: putting &buf back would allocate)
	trailers    []string // declared in the Trailer header
	err         error    // a write failed: the stream is gone
}

var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, bodyBuf); return &b }}

const bodyBuf = 8 << 10

func (w *responseWriter) Header() http.Header {
	if w.hdr == nil {
		w.hdr = make(http.Header, 8)
	}
	return w.hdr
}

// WriteHeader decides the status; the head is encoded when it is first
// sent (the first frames out: a full buffer, a flush, the handler's
// return), so that a small response goes out as HEADERS and DATA under
// one lock. Unlike net/http, fields set between WriteHeader and then are
// sent too; trailers are kept out of the head either way.
func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 {
		if code != http.StatusSwitchingProtocols { // no 101 in HTTP/2
			w.writeInfo(code)
		}
		return
	}
	w.wroteHeader = true
	w.status = code
	w.noBody = w.isHead || code == http.StatusNoContent || code == http.StatusNotModified
	w.declCL = -1
	for _, v := range w.hdr["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	if vs := w.hdr["Content-Length"]; len(vs) == 1 {
		if n, err := strconv.ParseUint(vs[0], 10, 63); err == nil {
			w.declCL = int64(n)
		}
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.isHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.declCL >= 0 && w.written+int64(len(p)) > w.declCL {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.buf == nil {
		w.bufp = bodyBufs.Get().(*[]byte)
		w.buf = (*w.bufp)[:0]
	}
	if len(w.buf)+len(p) <= cap(w.buf) {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *responseWriter) WriteString(s string) (int, error) {
	if w.buf != nil && len(w.buf)+len(s) <= cap(w.buf) && w.wroteHeader && !w.noBody && w.err == nil &&
		(w.declCL < 0 || w.written+int64(len(s)) <= w.declCL) {
		w.written += int64(len(s))
		w.buf = append(w.buf, s...)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError sends the head and what is written (http.ResponseController
// calls it).
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	return w.send(nil, false)
}

// SetWriteDeadline bounds the wait for the client's flow-control window
// (http.ResponseController calls it; the gateway's spool sets it to
// timeouts.send).
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	c := w.st.c
	c.mu.Lock()
	w.st.wdeadline = t
	c.mu.Unlock()
	return nil
}

// finish ends the response when the handler returns.
func (w *responseWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		_ = w.send(nil, true)
	}
}

func (w *responseWriter) release() {
	if w.bufp != nil {
		w.buf = nil
		bodyBufs.Put(w.bufp) // buf only ever grew within its capacity: the same array
		w.bufp = nil
	}
}

// send writes what is buffered, then p; end: the response's end (with
// its trailers).
func (w *responseWriter) send(p []byte, end bool) error {
	st := w.st
	c := st.c
	c.lockWrite()
	defer c.unlockWrite()
	var trailers []hpack.HeaderField
	if end {
		trailers = w.trailerFields()
	}
	if w.noBody {
		p = nil
		w.buf = w.buf[:0]
	}
	endData := end && len(trailers) == 0
	if !w.headerSent {
		if err := w.checkLocked(); err != nil {
			return err
		}
		bodyless := len(w.buf) == 0 && len(p) == 0
		endNow := endData && bodyless
		w.writeHeadersLocked(end, p, endNow)
		if endNow {
			st.sendDone = true
			return nil
		}
	}
	parts := [2][]byte{w.buf, p}
	for i, b := range parts {
		last := i == 1
		if len(b) == 0 && !(last && endData) {
			continue
		}
		if err := w.dataLocked(b, last && endData); err != nil {
			return err
		}
	}
	w.buf = w.buf[:0]
	if len(trailers) > 0 {
		if err := w.checkLocked(); err != nil {
			return err
		}
		c.hbuf.Reset()
		for _, f := range trailers {
			_ = c.enc.WriteField(f)
		}
		c.writeBlockLocked(st.id, c.hbuf.Bytes(), true)
	}
	if end {
		st.sendDone = true
	}
	return nil
}

// checkLocked fails a write on a reset stream or a closed connection.
func (w *responseWriter) checkLocked() error {
	switch {
	case w.st.c.closed:
		w.err = errConnClosed
	case w.st.reset:
		w.err = errStreamClosed
	}
	return w.err
}

// dataLocked sends b in DATA frames as the windows allow, waiting for
// WINDOW_UPDATEs up to the write deadline (timeouts.send when the
// handler set none).
func (w *responseWriter) dataLocked(b []byte, end bool) error {
	st := w.st
	c := st.c
	if len(b) == 0 { // END_STREAM alone: no window needed (it may be negative)
		if err := w.checkLocked(); err != nil {
			return err
		}
		c.beginFrames()
		_ = c.fr.WriteData(st.id, end, nil)
		return nil
	}
	var dflt time.Time
	for {
		if err := w.checkLocked(); err != nil {
			return err
		}
		n := min(int64(len(b)), maxFrame, st.sendWin, c.sendWin)
		if n <= 0 {
			// Out of window: what is written goes out first (the client
			// may be waiting on it to send its WINDOW_UPDATE).
			c.flushLocked()
			dl := st.wdeadline
			now := time.Now()
			if dl.IsZero() && c.o.Send > 0 {
				if dflt.IsZero() {
					dflt = now.Add(c.o.Send)
				}
				dl = dflt
			}
			if !dl.IsZero() {
				if !now.Before(dl) {
					c.resetLocked(st.id, st, http2.ErrCodeCancel)
					w.err = os.ErrDeadlineExceeded
					return w.err
				}
				if st.timer == nil {
					st.timer = time.AfterFunc(dl.Sub(now), c.broadcast)
				} else {
					st.timer.Reset(dl.Sub(now))
				}
			}
			c.cond.Wait()
			continue
		}
		c.beginFrames()
		_ = c.fr.WriteData(st.id, end && n == int64(len(b)), b[:n])
		st.sendWin -= n
		c.sendWin -= n
		if b = b[n:]; len(b) == 0 {
			return nil
		}
	}
}

func (c *conn) broadcast() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// writeBlockLocked writes a header block: HEADERS, then CONTINUATION
// frames for what does not fit one.
func (c *conn) writeBlockLocked(id uint32, block []byte, end bool) {
	c.beginFrames()
	first := true
	for first || len(block) > 0 {
		frag := block[:min(len(block), maxFrame)]
		block = block[len(frag):]
		if first {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag,
				EndStream: end, EndHeaders: len(block) == 0})
		} else {
			_ = c.fr.WriteContinuation(id, len(block) == 0, frag)
		}
		first = false
	}
}

// writeHeadersLocked encodes the response head. end: the handler is
// done, so a body that is all in hand gets its Content-Length.
func (w *responseWriter) writeHeadersLocked(end bool, p []byte, endStream bool) {
	c := w.st.c
	w.headerSent = true
	c.hbuf.Reset()
	_ = c.enc.WriteField(hf(":status", statusText(w.status)))
	w.encodeFields(w.hdr, false)
	if !w.noBody || w.isHead {
		if _, ok := w.hdr["Content-Type"]; !ok && !w.noBody {
			first := w.buf
			if len(first) == 0 {
				first = p
			}
			if len(first) > 0 {
				_ = c.enc.WriteField(hf("content-type", http.DetectContentType(first)))
			}
		}
		if _, ok := w.hdr["Content-Length"]; !ok && end && !w.isHead && len(w.trailers) == 0 {
			_ = c.enc.WriteField(hf("content-length", strconv.FormatInt(w.written, 10)))
		}
	}
	if _, ok := w.hdr["Date"]; !ok {
		_ = c.enc.WriteField(hf("date", date.get(time.Now())))
	}
	c.writeBlockLocked(w.st.id, c.hbuf.Bytes(), endStream)
}

// encodeFields writes h's fields, lower-cased; connection-specific and
// invalid ones are dropped, and so are trailers (declared, or prefixed).
func (w *responseWriter) encodeFields(h http.Header, trailers bool) {
	enc := w.st.c.enc
	for k, vs := range h {
		if !trailers {
			if strings.HasPrefix(k, http.TrailerPrefix) || w.isTrailer(k) {
				continue
			}
		}
		lk := lowerKey(k)
		switch lk {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te":
			continue
		}
		if !httpguts.ValidHeaderFieldName(lk) {
			continue
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			_ = enc.WriteField(hpack.HeaderField{Name: lk, Value: v, Sensitive: lk == "set-cookie" || lk == "authorization"})
		}
	}
}

func (w *responseWriter) isTrailer(k string) bool {
	for _, t := range w.trailers {
		if t == k {
			return true
		}
	}
	return false
}

// trailerFields are the response's trailers at its end: the declared
// names' values, and fields set with http.TrailerPrefix.
func (w *responseWriter) trailerFields() []hpack.HeaderField {
	var out []hpack.HeaderField
	add := func(k string, vs []string) {
		lk := lowerKey(k)
		switch lk {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "content-length", "trailer":
			return
		}
		if !httpguts.ValidHeaderFieldName(lk) {
			return
		}
		for _, v := range vs {
			if httpguts.ValidHeaderFieldValue(v) {
				out = append(out, hpack.HeaderField{Name: lk, Value: v})
			}
		}
	}
	for _, k := range w.trailers {
		add(k, w.hdr[k])
	}
	for k, vs := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			add(strings.TrimPrefix(k, http.TrailerPrefix), vs)
		}
	}
	return out
}

// writeInfo sends a 1xx head at once, with the fields set so far (103
// Early Hints' Link).
func (w *responseWriter) writeInfo(code int) {
	c := w.st.c
	c.lockWrite()
	defer c.unlockWrite()
	if w.checkLocked() != nil {
		return
	}
	c.hbuf.Reset()
	_ = c.enc.WriteField(hf(":status", statusText(code)))
	if code != http.StatusContinue {
		w.encodeFields(w.hdr, false)
	}
	c.writeBlockLocked(w.st.id, c.hbuf.Bytes(), false)
}

// write100 answers Expect: 100-continue at the body's first read.
func (w *responseWriter) write100() {
	c := w.st.c
	c.lockWrite()
	defer c.unlockWrite()
	// Not checkLocked: the body may be read on another goroutine than
	// the handler's (http.Transport's writer), and w.err is the handler's.
	if w.headerSent || c.closed || w.st.reset {
		return
	}
	c.hbuf.Reset()
	_ = c.enc.WriteField(hf(":status", "100"))
	c.writeBlockLocked(w.st.id, c.hbuf.Bytes(), false)
}

func hf(name, value string) hpack.HeaderField { return hpack.HeaderField{Name: name, Value: value} }

func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}
