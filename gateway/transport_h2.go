package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// The net/http path's own exchange: what net/http serves that is plain
// request and response (every HTTP/2 stream, and HTTP/1.x with a chunked
// or Expect upload, or HTTP/1.0) goes to the target as the fast path
// sends it — an HTTP/1.1 head written here, on the same pooled
// connections (pool.go), by the same exchangeOn — and the response head,
// read with internal/h1, is relayed through the http.ResponseWriter.
// Upgrades and https upstreams stay with httputil.ReverseProxy
// (transport_slow.go): an upgrade leaves HTTP behind, and the pool speaks
// cleartext only.
//
// Profiled under h2load (HTTP/2 over TLS), ReverseProxy's http.Transport
// spent a third of the gateway's CPU in its per-connection read and write
// goroutines and their channel handoffs, and its flush after every write
// cost one TLS record and write(2) per frame; here the handler goroutine
// does the upstream I/O itself, and the response is flushed only when
// the target has nothing more buffered (so streams still stream).

// ownsRequest reports whether the own exchange serves r: not an upgrade
// or CONNECT (ReverseProxy relays the switched connection), and a
// cleartext upstream.
func ownsRequest(r *http.Request, up *upstream) bool {
	return up.tls == nil && r.Method != http.MethodConnect && r.Header.Get("Upgrade") == ""
}

// ownExchange is one request's I/O on the own path; pooled.
type ownExchange struct {
	g          *Gateway
	ctx        context.Context
	sr         *slowReq
	isHead     bool
	replayable bool
	head       []byte    // the head sent upstream, built once
	stream     *onceBody // a body too large to buffer: sent at most once
	n          int64     // the streamed body's length, -1: unknown (sent chunked)
	bodyErr    error     // why reading the client's body failed
	uc         *upConn   // the connection whose response head was read
	res        h1.Response
	sp         spool // the response, held so a slow client holds no permit
	streamPath bool  // the path is one of buffering.stream_paths

	mu   sync.Mutex
	busy *upConn // the connection in use, for abort to close
	gone bool    // the client left: abort ran
}

var ownPool = sync.Pool{New: func() any { return &ownExchange{head: make([]byte, 0, 1024)} }}

// serveOwn proxies r with the attempt loop over the own exchange; the
// caller has routed it, buffered a small body and logs it after.
func (h *slowHandler) serveOwn(sw *statusWriter, w http.ResponseWriter, r *http.Request, sr *slowReq) {
	g, up := h.g, sr.rq.up
	x := ownPool.Get().(*ownExchange)
	x.g, x.ctx, x.sr, x.isHead, x.replayable = g, r.Context(), sr, r.Method == http.MethodHead, sr.rq.replayable
	if !sr.buffered {
		x.stream, x.n = &onceBody{r: r.Body}, r.ContentLength
	}
	if !x.buildHead(r) {
		x.release()
		http.Error(sw, "malformed request", http.StatusBadRequest)
		return
	}
	// A client that leaves (a stream reset, a closed connection) ends
	// r's context: closing the target connection then wakes the handler
	// wherever it waits on the target, so the pick ends and its permit
	// is freed.
	stop := context.AfterFunc(x.ctx, x.abort)
	defer func() {
		if stop() {
			x.release()
		} // else abort ran, or runs now: x stays out of the pool
	}()
	res := up.run(x.ctx, g, &sr.rq, x)
	if res.t == nil {
		var mbe *http.MaxBytesError
		if errors.As(x.bodyErr, &mbe) {
			http.Error(sw, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		g.answer(sw, sr, res.code, res.reason)
		return
	}
	sr.line.target = res.t.addr
	uc := x.uc
	// As on the fast path (spool.go): the response goes into memory, then
	// a temporary file, and to the client only after the pick ends.
	x.sp.reset(responseWriter{w, http.NewResponseController(w)}, g.cfg())
	x.streamPath = streamPath(g.cfg().Buffering.StreamPaths, []byte(r.URL.Path))
	upKeep, rerr := x.relay(sw, w)
	var targetErr error
	var we *h1.WriteError
	if rerr != nil && !errors.As(rerr, &we) && x.ctx.Err() == nil {
		targetErr = rerr // the target broke mid-body
	}
	end := time.Now()
	// The connection goes back before the pick ends, as on the fast path:
	// ending it wakes a waiter, which would otherwise find the pool empty.
	if x.setBusy(nil) && upKeep && rerr == nil {
		res.t.pool.put(uc, end)
	} else {
		uc.c.Close()
	}
	up.finish(g, &res, end, targetErr)
	res.t.m.dur.Observe(end.Sub(sr.rq.start).Seconds())
	if targetErr == nil && rerr == nil {
		// No Flush after it: the handler's return ends the response, and
		// over HTTP/2 a flush here would send the body's DATA frame and
		// then an empty one to end the stream (two frames, often two
		// writes) where the return sends one.
		x.sp.now = end
		_ = x.sp.drain()
	}
	x.sp.drop()
	x.sp.c = nil
	if targetErr != nil {
		// The target broke mid-body: abort the client's response (a
		// reset stream, a closed connection), as ReverseProxy does, so
		// the client sees it cut rather than a complete short body.
		// net/http recovers this panic and logs nothing.
		panic(http.ErrAbortHandler)
	}
}

func (x *ownExchange) release() {
	x.g, x.ctx, x.sr, x.stream, x.bodyErr, x.uc = nil, nil, nil, nil, nil, nil
	x.busy, x.gone = nil, false
	hs := x.res.Headers[:0]
	clear(hs[:cap(hs)]) // slices into a connection's buffer: let it go
	x.res = h1.Response{Headers: hs}
	if cap(x.head) <= 64<<10 {
		ownPool.Put(x)
	}
}

// setBusy notes the connection in use (nil: none); false when the client
// has left, so no connection is used (or pooled) after abort ran.
func (x *ownExchange) setBusy(uc *upConn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.busy = uc
	return !x.gone
}

// abort closes the connection in use; under the lock, so a connection
// setBusy(nil) handed back to the pool is never closed by it.
func (x *ownExchange) abort() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gone = true
	if x.busy != nil {
		x.busy.c.Close()
	}
}

// buildHead writes the HTTP/1.1 head to send upstream: method, target,
// Host, the request's end-to-end headers (hop-by-hop ones and those the
// Connection header names dropped, X-Forwarded-* replaced), the body's
// framing, then X-Forwarded-* as the fast path writes them. It reports
// false for a head that cannot be written safely (net/http checks the
// fields; this also holds for what reaches us by HTTP/2).
func (x *ownExchange) buildHead(r *http.Request) bool {
	uri := r.RequestURI
	if uri == "" || (uri[0] != '/' && uri != "*") {
		uri = r.URL.RequestURI() // absolute-form: origin-form upstream, as ReverseProxy sends
	}
	if !isToken(r.Method) || !visible(uri) || !fieldValue(r.Host) {
		return false
	}
	out := x.head[:0]
	out = append(out, r.Method...)
	out = append(out, ' ')
	ro := x.sr.ro
	out = ro.rewrite.appendURI(out, []byte(uri))
	out = append(out, " HTTP/1.1\r\nHost: "...)
	out = append(out, r.Host...)
	out = append(out, "\r\n"...)
	conn := r.Header["Connection"]
	for name, vs := range r.Header {
		switch name {
		case "Host", "Content-Length", "Transfer-Encoding", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
			continue // written below
		case "Expect":
			continue // net/http answered it; the body goes without waiting
		}
		if !isToken(name) || h1.IsHopByHop([]byte(name)) || listed(conn, name) || ro.reqHdr.drops([]byte(name)) {
			continue
		}
		for _, v := range vs {
			if !fieldValue(v) {
				return false
			}
			out = append(out, name...)
			out = append(out, ": "...)
			out = append(out, v...)
			out = append(out, "\r\n"...)
		}
	}
	switch {
	case x.stream != nil && x.n < 0:
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	case x.stream != nil:
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, x.n, 10)
		out = append(out, "\r\n"...)
	case len(x.sr.body) > 0 || r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH":
		// Content-Length: 0 too for the methods that expect a body, as
		// http.Transport sends it (some targets refuse them without).
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, int64(len(x.sr.body)), 10)
		out = append(out, "\r\n"...)
	}
	out = ro.reqHdr.appendTo(out)
	var prior string
	switch xff := r.Header["X-Forwarded-For"]; len(xff) {
	case 0:
	case 1:
		prior = xff[0]
	default:
		for i, v := range xff {
			if i > 0 {
				prior += ", "
			}
			prior += v
		}
	}
	if !fieldValue(prior) {
		return false
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	out = appendForwarded(out, prior, ip, proto, r.Host)
	x.head = append(out, "\r\n"...)
	return true
}

// listed reports whether a Connection header names the field.
func listed(conn []string, name string) bool {
	for _, v := range conn {
		if h1.HasToken([]byte(v), []byte(name)) {
			return true
		}
	}
	return false
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == ':' || c == '"' || c == '(' || c == ')' || c == ',' || c == '/' ||
			c == ';' || c == '<' || c == '=' || c == '>' || c == '?' || c == '@' || c == '[' || c == '\\' ||
			c == ']' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// visible: no control byte, space or DEL (a request target).
func visible(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return s != ""
}

// fieldValue: no control byte but HTAB, no DEL (RFC 9110 5.5).
func fieldValue(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func (x *ownExchange) exchange(ctx context.Context, t *target, now time.Time, headTO time.Duration) (int, bool, error) {
	uc, written, err := exchangeOn(ctx, t, now, x, x.replayable, x.stream != nil || len(x.sr.body) > 0, x.isHead, headTO, &x.res)
	if x.stream != nil && x.stream.read {
		written = true // part of the body left the client: it cannot be sent again
	}
	if err != nil {
		return 0, written, err
	}
	x.uc = uc
	return x.res.Status, true, nil
}

func (x *ownExchange) dial(ctx context.Context, t *target) (*upConn, error) {
	return t.pool.dial(ctx)
}

func (x *ownExchange) send(uc *upConn) error {
	if !x.setBusy(uc) {
		return errClientGone
	}
	if _, err := uc.bw.Write(x.head); err != nil {
		return err
	}
	switch {
	case len(x.sr.body) > 0:
		if _, err := uc.bw.Write(x.sr.body); err != nil {
			return err
		}
	case x.stream != nil:
		return x.sendStream(uc)
	}
	return uc.bw.Flush()
}

// sendStream sends a body too large to buffer as it arrives (chunked
// when its length is unknown), each piece flushed: the target sees an
// upload as it comes.
func (x *ownExchange) sendStream(uc *upConn) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	chunked := x.n < 0
	for {
		k, rerr := x.stream.Read(buf)
		if k > 0 {
			if chunked {
				var size [20]byte
				b := strconv.AppendInt(size[:0], int64(k), 16)
				b = append(b, "\r\n"...)
				if _, err := uc.bw.Write(b); err != nil {
					return err
				}
			}
			if _, err := uc.bw.Write(buf[:k]); err != nil {
				return err
			}
			if chunked {
				if _, err := uc.bw.WriteString("\r\n"); err != nil {
					return err
				}
			}
			if err := uc.bw.Flush(); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			x.bodyErr = rerr
			return errClientGone
		}
	}
	if chunked {
		if _, err := uc.bw.WriteString("0\r\n\r\n"); err != nil {
			return err
		}
	}
	return uc.bw.Flush()
}

func (x *ownExchange) drop(t *target) {
	uc := x.uc
	x.uc = nil
	if x.setBusy(nil) {
		discard(t, uc, &x.res, x.isHead)
	} else {
		uc.c.Close()
	}
}

func (x *ownExchange) loadHeader() []byte { return responseLoad(&x.res) }

func (x *ownExchange) watch(ctx context.Context) (context.Context, func()) {
	return ctx, func() {} // net/http ends the request's context when its client leaves
}

func (x *ownExchange) watchHead(ctx context.Context) (context.Context, func()) { return x.watch(ctx) }

// relay writes the response to the client: status, end-to-end headers,
// the body decoded from its HTTP/1.1 framing (net/http frames it again
// for the client: DATA frames, or chunks), trailers. The body is flushed
// when the target has nothing more buffered, so an event stream's events
// leave as they come and a response already read leaves in one go.
// upKeep: the target connection may go back to the pool.
func (x *ownExchange) relay(sw *statusWriter, w http.ResponseWriter) (upKeep bool, err error) {
	res, uc := &x.res, x.uc
	hdr := w.Header()
	delete(hdr, "X-Request-Id") // the target's, if it sent one, as on the fast path
	hasRID := false
	// One string holds every value and one array every field's []string:
	// two allocations for the head rather than two per field.
	size, n := 0, 0
	for i := range res.Headers {
		if x.forward(&res.Headers[i]) {
			size += len(res.Headers[i].Value)
			n++
		}
	}
	var sb strings.Builder
	sb.Grow(size)
	for i := range res.Headers {
		if h := &res.Headers[i]; x.forward(h) {
			sb.Write(h.Value)
		}
	}
	all, vals := sb.String(), make([]string, n)
	off, i := 0, 0
	for _, h := range res.Headers {
		if !x.forward(&h) {
			continue
		}
		name := canonical(h.Name)
		if name == "X-Request-Id" {
			hasRID = true
		}
		vals[i] = all[off : off+len(h.Value)]
		off += len(h.Value)
		if prev := hdr[name]; prev != nil {
			hdr[name] = append(prev, vals[i]) // a repeated field (Set-Cookie)
		} else {
			hdr[name] = vals[i : i+1 : i+1]
		}
		i++
	}
	x.sr.ro.respHdr.apply(hdr)
	if !hasRID {
		hdr["X-Request-Id"] = []string{x.sr.line.rid}
	}
	sw.WriteHeader(res.Status)
	_, _ = uc.br.Discard(res.Size)
	fl, _ := w.(http.Flusher)
	rl := relayer{w: w, fl: fl, src: uc.br}
	if !h1.NoBody(res.Status, x.isHead) && !x.streamPath && !streams(res) {
		rl.w, rl.fl = &x.sp, nil // flushed once the target is done
	}
	switch {
	case h1.NoBody(res.Status, x.isHead):
	case res.Chunked:
		for {
			if err = rl.fill(); err != nil {
				break
			}
			var n int64
			if n, err = h1.ChunkSize(uc.br); err != nil || n == 0 {
				break
			}
			if err = rl.copyN(n); err != nil {
				break
			}
			if err = h1.ChunkEnd(uc.br); err != nil {
				break
			}
		}
		if err == nil {
			err = h1.Trailers(uc.br, func(name, value []byte) {
				if !h1.IsHopByHop(name) {
					k := http.TrailerPrefix + canonical(name)
					hdr[k] = append(hdr[k], string(value))
				}
			})
		}
	case res.ContentLength >= 0:
		err = rl.copyN(res.ContentLength)
	default:
		err = rl.copyN(-1)
		return false, err
	}
	return !res.Close, err
}

// forward reports whether a response field goes to the client: not a
// hop-by-hop one, nor one Connection names, nor Transfer-Encoding
// (net/http frames the body its own way). Trailer stays with a chunked
// body: net/http's HTTP/1.1 writer sends trailers only when they were
// declared before the head went out.
func (x *ownExchange) forward(h *h1.Header) bool {
	res := &x.res
	return !((h1.IsHopByHop(h.Name) && !(res.Chunked && h1.EqFold(h.Name, "trailer"))) ||
		(res.ConnTokens && h1.HasToken(res.Conn, h.Name)) ||
		(len(h.Name) == 17 && (h1.EqFold(h.Name, "transfer-encoding") || h1.EqFold(h.Name, "x-accel-buffering"))))
}

// relayer copies a response body from the target's buffer to the
// ResponseWriter.
type relayer struct {
	w       io.Writer
	fl      http.Flusher
	src     *bufio.Reader
	pending bool // written since the last flush
}

// fill makes a byte buffered, first flushing what was written when the
// target has sent nothing more (so nothing waits in our buffer for it).
func (rl *relayer) fill() error {
	br := rl.src
	if br.Buffered() > 0 {
		return nil
	}
	if rl.pending && rl.fl != nil {
		rl.pending = false
		rl.fl.Flush()
	}
	_, err := br.Peek(1)
	return err
}

// copyN relays n bytes of body (-1: until the target closes).
func (rl *relayer) copyN(n int64) error {
	br := rl.src
	for n != 0 {
		if err := rl.fill(); err != nil {
			if err == io.EOF {
				if n < 0 {
					return nil
				}
				return io.ErrUnexpectedEOF
			}
			return err
		}
		k := br.Buffered()
		if n > 0 && int64(k) > n {
			k = int(n)
		}
		b, _ := br.Peek(k)
		if _, err := rl.w.Write(b); err != nil {
			return &h1.WriteError{Err: err}
		}
		rl.pending = true
		_, _ = br.Discard(k)
		if n > 0 {
			n -= int64(k)
		}
	}
	return nil
}

// canonical is a header name in net/http's canonical form, the common
// ones without allocating.
func canonical(name []byte) string {
	if s, ok := commonNames[string(name)]; ok {
		return s
	}
	return http.CanonicalHeaderKey(string(name))
}

var commonNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"Accept-Ranges", "Age", "Cache-Control", "Content-Disposition", "Content-Encoding",
		"Content-Language", "Content-Length", "Content-Location", "Content-Range", "Content-Type", "Date", "Etag",
		"Expires", "Last-Modified", "Link", "Location", "Retry-After", "Server", "Set-Cookie", "Vary",
		"Www-Authenticate", "X-Content-Type-Options", "X-Frame-Options", "X-Request-Id", "X-Upstream",
		"Access-Control-Allow-Origin", "Strict-Transport-Security", "Alt-Svc"} {
		m[s] = s
		lower := []byte(s)
		for i, c := range lower {
			if 'A' <= c && c <= 'Z' {
				lower[i] = c + 'a' - 'A'
			}
		}
		m[string(lower)] = s
	}
	return m
}()
