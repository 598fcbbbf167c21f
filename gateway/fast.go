package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// clientConn is one client connection on the fast path with its reusable
// buffers; the whole struct is pooled between connections.
type clientConn struct {
	g    *Gateway
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	idle atomic.Bool

	ip    []byte // client IP, for X-Forwarded-For and client_ip keys
	ipStr string // made on first use by a hash key
	req   h1.Request
	res   h1.Response
	out   []byte // the head sent upstream
	body  []byte // a buffered request body
	rid   []byte // request ID
	tried []*balance.Endpoint
	scr   []byte // scratch for local responses

	deadline time.Time // the read deadline set on c
	now      time.Time // when the last request ended; zero: not read
}

func (g *Gateway) newClientConn(c net.Conn) *clientConn {
	size := int(g.cfg().MaxHeaderSize)
	cc, _ := g.ccPool.Get().(*clientConn)
	if cc == nil || cc.br.Size() != size {
		cc = &clientConn{g: g, br: bufio.NewReaderSize(nil, size), bw: bufio.NewWriterSize(nil, 4<<10)}
	}
	cc.c = c
	cc.deadline = time.Time{}
	cc.br.Reset(c)
	cc.bw.Reset(c)
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
	g.connMu.Lock()
	delete(g.conns, cc)
	g.connMu.Unlock()
	g.connWG.Done()
	if handedOff {
		return // net/http owns the conn and its reader now
	}
	cc.c.Close()
	cc.c = nil
	cc.br.Reset(nil)
	cc.bw.Reset(nil)
	if cap(cc.body) > 1<<20 {
		cc.body = nil
	}
	g.ccPool.Put(cc)
}

// bufferedConn is a connection whose first bytes sit in a bufio.Reader:
// how a connection the fast path peeked at is handed to net/http.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (g *Gateway) serveConn(cc *clientConn) {
	handedOff := false
	defer func() { g.release(cc, handedOff) }()
	cfg := g.cfg()
	idleTO, headTO := cfg.Timeouts.Idle.D(), cfg.Timeouts.ReadHeader.D()
	// Deadlines are moved only when less than half of them is left: a
	// keep-alive connection then costs a deadline update every idle/2
	// instead of two per request (timers are a visible share of a proxy's
	// CPU), and a timeout fires between half and all of its length.
	now := time.Now()
	for {
		if cc.br.Buffered() == 0 {
			if cc.deadline.Sub(now) < idleTO/2 {
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
		if !bytes.Contains(peekAll(cc.br), crlf2) {
			// A head still arriving gets read_header to complete.
			cc.deadline = time.Now().Add(headTO)
			_ = cc.c.SetReadDeadline(cc.deadline)
		}
		err := h1.ReadRequest(cc.br, cc.br.Size(), &cc.req)
		if err != nil {
			switch {
			case errors.Is(err, h1.ErrHeadTooLarge):
				cc.local(431, "request head too large\n", true, nil)
			case errors.Is(err, h1.ErrMalformed):
				if bytes.HasPrefix(peekAll(cc.br), []byte("PRI * HTTP/2.0")) {
					handedOff = g.handOff(cc)
					return
				}
				cc.local(400, "malformed request\n", true, nil)
			}
			return
		}
		r := &cc.req
		if r.Minor == 0 || r.Upgrade || r.Expect || r.Chunked || len(r.URI) == 0 || r.URI[0] != '/' {
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

var crlf2 = []byte("\r\n\r\n")

func peekAll(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// handOff gives the connection, with what is buffered, to net/http.
func (g *Gateway) handOff(cc *clientConn) bool {
	_ = cc.c.SetReadDeadline(time.Time{})
	br := cc.br
	cc.br = bufio.NewReaderSize(nil, br.Size()) // the pooled struct needs a fresh one
	return g.handoff.give(&bufferedConn{Conn: cc.c, r: br})
}

func isIdempotent(m []byte) bool {
	switch string(m) { // no allocation: the compiler compares in place
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// errStatus marks a response whose status counts as a failure.
type errStatus int

func (e errStatus) Error() string { return "status " + strconv.Itoa(int(e)) }

var errTimeout = errors.New("response header timeout")

// serveOne proxies one request; it reports whether the connection stays
// open. A proxied request reads the clock twice, at its start and at its
// end (the VM's clock costs 30-100 ns a read, and a request used to read
// it eight times): the pool, the header deadline and the first attempt's
// latency all use start, the metrics, the pick's latency, the pool's idle
// stamp and the next idle deadline all use the end.
func (cc *clientConn) serveOne() bool {
	g := cc.g
	start := time.Now()
	cc.now = time.Time{}
	rt := g.rt.Load()
	cfg := rt.cfg
	r := &cc.req
	path := r.URI
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	host := r.Host
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 {
		host = host[:i]
	}
	up := rt.match(host, path)
	isHead := string(r.Method) == "HEAD"
	idem := isIdempotent(r.Method)
	clientClose := r.Close
	n := max(r.ContentLength, 0)
	if up == nil {
		cc.buildRID()
		cc.log(start, r, nil, "", 404, 0)
		return cc.skipBody(n) && cc.local(404, "no route\n", clientClose, nil)
	}
	if n > int64(cfg.MaxBodySize) {
		cc.buildRID()
		cc.log(start, r, up, "", 413, 0)
		cc.local(413, "request body too large\n", true, nil)
		return false
	}
	var key string
	if up.usesKey {
		key = cc.hashKey(up)
	}
	cc.buildHead(r)
	var logMethod, logPath string
	if g.access != nil {
		logMethod, logPath = string(r.Method), string(r.URI)
	}
	_, _ = cc.br.Discard(r.Size) // r's slices are invalid from here on

	replayable := n == 0
	if n > 0 && n <= int64(up.cfg.Retry.BufferBody) {
		if cap(cc.body) < int(n) {
			cc.body = make([]byte, n)
		}
		cc.body = cc.body[:n]
		cc.deadline = time.Now().Add(cfg.Timeouts.Idle.D())
		_ = cc.c.SetReadDeadline(cc.deadline)
		if _, err := io.ReadFull(cc.br, cc.body); err != nil {
			return false
		}
		replayable = true
	}
	sec := start.Unix()
	up.budget.request(sec)

	cc.tried = cc.tried[:0]
	attempts := up.cfg.Retry.Attempts
	var lastErr error
	var lastStatus int
	bodySent := false
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			reason := "status"
			var ce *connectError
			switch {
			case errors.As(lastErr, &ce):
				reason = "connect_error"
			case errors.Is(lastErr, errTimeout):
				reason = "timeout"
			case lastStatus == 0:
				reason = "connect_error"
			}
			if !up.budget.retry(sec) {
				g.metrics.retryDenied.WithLabelValues(up.name).Inc()
				break
			}
			g.metrics.retries.WithLabelValues(up.name, reason).Inc()
		}
		pick, err := cc.pick(up, key)
		if err != nil {
			if lastErr != nil {
				break // nothing else to try: answer with the last failure
			}
			code, msg := 503, "no target available\n"
			var hdr []byte
			if errors.Is(err, balance.ErrAtCapacity) {
				msg = "every target is at capacity\n"
				hdr = retryAfter(up.cfg.Queue.MaxWait.D())
			}
			cc.log(start, nil, up, "", code, 0, logMethod, logPath)
			unread := n
			if replayable {
				unread = 0 // buffered already (or no body)
			}
			return cc.skipBody(unread) && cc.local(code, msg, clientClose, hdr)
		}
		t := up.target(pick.Addr())
		if t == nil { // removed between pick and lookup
			pick.Done(nil)
			lastErr = errors.New("target removed")
			continue
		}
		cc.tried = append(cc.tried, pick.Endpoint())
		tstart := start
		if attempt > 0 {
			tstart = time.Now()
		}
		uc, res, sent, err := cc.exchange(t, tstart, n, replayable, cfg.Timeouts.ResponseHeader.D(), isHead, idem)
		bodySent = bodySent || sent
		if err != nil {
			lat := time.Since(tstart)
			pick.Report(lat, err)
			cc.noteEjection(up, t)
			lastErr, lastStatus = err, 0
			var ce *connectError
			retry := errors.As(err, &ce) && !sent ||
				(idem && replayable && (!errors.Is(err, errTimeout) || up.cfg.Retry.Timeout))
			if !retry || (!replayable && bodySent) {
				break
			}
			continue
		}
		status := res.Status
		if up.statuses[status] && attempt+1 < attempts && replayable {
			// Retry elsewhere (no body, or one small enough to have been
			// buffered, so it can be sent again): drop this response.
			lastErr, lastStatus = errStatus(status), status
			pick.Report(time.Since(tstart), errStatus(status))
			cc.noteEjection(up, t)
			if !h1.NoBody(status, isHead) && res.ContentLength >= 0 && res.ContentLength <= 64<<10 && !res.Close {
				if h1.Discard(uc.br, int64(res.Size)+res.ContentLength) == nil {
					t.pool.put(uc, time.Now())
					uc = nil
				}
			}
			if uc != nil {
				uc.c.Close()
			}
			continue
		}
		keep, upKeep, rerr := cc.relay(uc, res, isHead, clientClose)
		var outcome error
		if up.statuses[status] {
			outcome = errStatus(status)
		}
		if rerr != nil {
			var we *h1.WriteError
			if !errors.As(rerr, &we) {
				outcome = rerr // the target broke mid-body
			}
		}
		end := time.Now()
		cc.now = end
		pick.Report(end.Sub(tstart), outcome)
		if outcome != nil {
			cc.noteEjection(up, t)
		}
		if upKeep && rerr == nil {
			t.pool.put(uc, end)
		} else {
			uc.c.Close()
		}
		t.m.count(status)
		t.m.dur.Observe(end.Sub(start).Seconds())
		cc.log(start, nil, up, t.addr, status, attempt, logMethod, logPath)
		// The pick ended before the last bytes leave, so a client's next
		// request already sees the target's permit back.
		return cc.flush(keep && rerr == nil)
	}
	// Every attempt failed.
	code, msg := 502, "bad gateway\n"
	if errors.Is(lastErr, errTimeout) {
		code, msg = 504, "gateway timeout\n"
	}
	if lastStatus != 0 {
		code, msg = lastStatus, "upstream answered "+strconv.Itoa(lastStatus)+"\n"
	}
	cc.log(start, nil, up, "", code, attempts, logMethod, logPath)
	if !replayable && n > 0 {
		clientClose = true // the body is unread, or partly read
	}
	return cc.local(code, msg, clientClose, nil) && !clientClose
}

func retryAfter(wait time.Duration) []byte {
	s := max(int64((wait+time.Second-1)/time.Second), 1)
	return []byte("Retry-After: " + strconv.FormatInt(s, 10) + "\r\n")
}

// pick chooses a target, waiting in the upstream's queue up to max_wait
// when every target is at its max concurrency.
func (cc *clientConn) pick(up *upstream, key string) (balance.Pick, error) {
	info := balance.PickInfo{Key: key, Exclude: cc.tried}
	p, err := up.bal.PickWith(info)
	if !errors.Is(err, balance.ErrAtCapacity) {
		return p, err
	}
	wait := up.cfg.Queue.MaxWait.D()
	if wait <= 0 {
		return p, err
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	waiting := cc.g.metrics.waiting.WithLabelValues(up.name)
	waiting.Inc()
	p, err = up.bal.Wait(ctx, info)
	waiting.Dec()
	cancel()
	outcome := "served"
	if err != nil {
		outcome = "timeout"
	}
	cc.g.metrics.queued.WithLabelValues(up.name, outcome).Inc()
	cc.g.metrics.queueWait.WithLabelValues(up.name).Observe(time.Since(t0).Seconds())
	return p, err
}

// noteEjection counts a passive ejection the failure just caused.
func (cc *clientConn) noteEjection(up *upstream, t *target) {
	now := up.bal.Ejected(t.addr)
	if was := t.ejected.Swap(now); now && !was {
		cc.g.metrics.ejections.WithLabelValues(up.name, t.addr).Inc()
		cc.g.log.Warn("target ejected", "upstream", up.name, "target", t.addr)
	}
}

// exchange sends the request to t and reads the response head. A pooled
// connection that turns out closed (nothing read back) is replaced by a
// fresh one once, when the request can be sent again. sent reports
// whether the request body left (so it can no longer be replayed).
//
// now is the attempt's start: the pool's idle check and the response
// header deadline use it rather than read the clock again.
func (cc *clientConn) exchange(t *target, now time.Time, n int64, replayable bool, headTO time.Duration, isHead, idem bool) (*upConn, *h1.Response, bool, error) {
	uc, reused, err := t.pool.get(now)
	if err != nil {
		return nil, nil, false, err
	}
	if reused && (!idem || !replayable) && !uc.alive() {
		// A request that must not run twice, or whose body cannot be sent
		// twice, goes only on a connection known to be open.
		uc.c.Close()
		if uc, err = t.pool.dial(); err != nil {
			return nil, nil, false, err
		}
		reused = false
	}
	for {
		sent, err := cc.send(uc, n, replayable)
		if err == nil {
			if n > 0 {
				now = time.Now() // reading and sending a body takes a client's time
			}
			if uc.deadline.Sub(now) < headTO/2 {
				uc.deadline = now.Add(headTO)
				_ = uc.c.SetReadDeadline(uc.deadline)
			}
			err = cc.readHead(uc, isHead)
			if err == nil {
				res := &cc.res
				if !h1.NoBody(res.Status, isHead) && (res.ContentLength < 0 || int64(uc.br.Buffered()) < int64(res.Size)+res.ContentLength) {
					// More body to read: no response_header limit on it.
					uc.deadline = time.Time{}
					_ = uc.c.SetReadDeadline(uc.deadline)
				}
				return uc, res, sent, nil
			}
		}
		uc.c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, nil, sent, errTimeout
		}
		if reused && replayable && uc.br.Buffered() == 0 && !errors.Is(err, h1.ErrMalformed) {
			// A stale keep-alive connection: the target closed it while
			// idle (nothing came back). Idempotent requests only (others
			// checked the connection first): try once more on a fresh one.
			reused = false
			if uc, err = t.pool.dial(); err != nil {
				return nil, nil, sent, err
			}
			continue
		}
		return nil, nil, sent, err
	}
}

func (cc *clientConn) send(uc *upConn, n int64, replayable bool) (bool, error) {
	if _, err := uc.bw.Write(cc.out); err != nil {
		return false, err
	}
	if n > 0 {
		if replayable {
			if _, err := uc.bw.Write(cc.body); err != nil {
				return false, err
			}
		} else {
			cc.deadline = time.Now().Add(cc.g.cfg().Timeouts.Idle.D())
			_ = cc.c.SetReadDeadline(cc.deadline)
			if err := h1.CopyN(uc.bw, cc.br, n); err != nil {
				return true, err
			}
		}
	}
	return n > 0 && !replayable, uc.bw.Flush()
}

// readHead reads the response head, skipping interim 1xx responses.
func (cc *clientConn) readHead(uc *upConn, isHead bool) error {
	for {
		if err := h1.ReadResponse(uc.br, upReadBuf, &cc.res); err != nil {
			return err
		}
		if cc.res.Status >= 200 || cc.res.Status == 101 {
			return nil
		}
		if _, err := uc.br.Discard(cc.res.Size); err != nil {
			return err
		}
	}
}

// relay writes the response to the client, leaving the tail in cc.bw for
// flush. keep: the client connection
// stays open; upKeep: the target connection may go back to the pool.
func (cc *clientConn) relay(uc *upConn, res *h1.Response, isHead, clientClose bool) (keep, upKeep bool, err error) {
	bw := cc.bw
	noBody := h1.NoBody(res.Status, isHead)
	untilEOF := !noBody && res.ContentLength < 0 && !res.Chunked
	closeClient := clientClose || untilEOF || cc.g.draining.Load()
	bw.Write(res.StatusLine)
	bw.WriteString("\r\n")
	hasRID := false
	for _, h := range res.Headers {
		if h1.IsHopByHop(h.Name) || (res.ConnTokens && h1.HasToken(res.Conn, h.Name)) {
			continue
		}
		if len(h.Name) == 12 && h1.EqFold(h.Name, "x-request-id") {
			hasRID = true
		}
		bw.Write(h.Name)
		bw.WriteString(": ")
		bw.Write(h.Value)
		bw.WriteString("\r\n")
	}
	if !hasRID {
		bw.WriteString("X-Request-Id: ")
		bw.Write(cc.rid)
		bw.WriteString("\r\n")
	}
	if closeClient {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	_, _ = uc.br.Discard(res.Size)
	upKeep = !res.Close
	switch {
	case noBody:
	case res.Chunked:
		err = h1.CopyChunked(bw, uc.br)
	case res.ContentLength >= 0:
		err = h1.CopyN(bw, uc.br, res.ContentLength)
	default:
		err = h1.CopyEOF(bw, uc.br)
		upKeep = false
	}
	if err != nil {
		return false, false, err
	}
	return !closeClient, upKeep, nil
}

// flush sends what relay left buffered, unless the client already sent
// its next request (pipelining): then two responses leave in one write.
func (cc *clientConn) flush(keep bool) bool {
	if keep && cc.br.Buffered() > 0 {
		return true
	}
	return cc.bw.Flush() == nil && keep
}

// buildHead writes the request head to send upstream into cc.out and the
// request ID into cc.rid.
func (cc *clientConn) buildHead(r *h1.Request) {
	out := cc.out[:0]
	out = append(out, r.Method...)
	out = append(out, ' ')
	out = append(out, r.URI...)
	out = append(out, " HTTP/1.1\r\n"...)
	var xff []byte
	cc.rid = cc.rid[:0]
	for _, h := range r.Headers {
		name := h.Name
		if h1.IsHopByHop(name) || (r.ConnTokens && h1.HasToken(r.Conn, name)) {
			continue
		}
		switch len(name) {
		case 12:
			if h1.EqFold(name, "x-request-id") {
				cc.rid = append(cc.rid, h.Value...)
			}
		case 15:
			if h1.EqFold(name, "x-forwarded-for") {
				if xff != nil {
					xff = append(xff, ", "...)
				}
				xff = append(xff, h.Value...)
				continue
			}
		case 16:
			if h1.EqFold(name, "x-forwarded-host") {
				continue
			}
		case 17:
			if h1.EqFold(name, "x-forwarded-proto") {
				continue
			}
		}
		out = append(out, name...)
		out = append(out, ": "...)
		out = append(out, h.Value...)
		out = append(out, "\r\n"...)
	}
	out = append(out, "X-Forwarded-For: "...)
	if xff != nil {
		out = append(out, xff...)
		out = append(out, ", "...)
	}
	out = append(out, cc.ip...)
	out = append(out, "\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: "...)
	out = append(out, r.Host...)
	out = append(out, "\r\n"...)
	if len(cc.rid) == 0 {
		cc.buildRID()
		out = append(out, "X-Request-Id: "...)
		out = append(out, cc.rid...)
		out = append(out, "\r\n"...)
	}
	out = append(out, "\r\n"...)
	cc.out = out
}

// buildRID makes a request ID: a random per-process prefix and a counter.
func (cc *clientConn) buildRID() {
	cc.rid = append(cc.rid[:0], cc.g.ridPrefix...)
	cc.rid = append(cc.rid, '-')
	cc.rid = strconv.AppendUint(cc.rid, cc.g.ridCtr.Add(1), 36)
}

// hashKey extracts the request's hash key as configured.
func (cc *clientConn) hashKey(up *upstream) string {
	r := &cc.req
	k := up.cfg.Key
	switch k.Kind {
	case "client_ip":
		if cc.ipStr == "" {
			cc.ipStr = string(cc.ip)
		}
		return cc.ipStr
	case "path":
		p := r.URI
		if i := bytes.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		return string(p)
	case "header":
		for _, h := range r.Headers {
			if len(h.Name) == len(k.Name) && eqFoldStr(h.Name, k.Name) {
				return string(h.Value)
			}
		}
	case "cookie":
		for _, h := range r.Headers {
			if len(h.Name) == 6 && h1.EqFold(h.Name, "cookie") {
				if v, ok := cookieValue(h.Value, k.Name); ok {
					return v
				}
			}
		}
	case "query":
		if i := bytes.IndexByte(r.URI, '?'); i >= 0 {
			return queryValue(string(r.URI[i+1:]), k.Name)
		}
	}
	return ""
}

func cookieValue(v []byte, name string) (string, bool) {
	for len(v) > 0 {
		var part []byte
		if i := bytes.IndexByte(v, ';'); i >= 0 {
			part, v = v[:i], v[i+1:]
		} else {
			part, v = v, nil
		}
		part = bytes.TrimSpace(part)
		if eq := bytes.IndexByte(part, '='); eq > 0 && string(part[:eq]) == name {
			return string(bytes.Trim(part[eq+1:], `"`)), true
		}
	}
	return "", false
}

func queryValue(q, name string) string {
	for q != "" {
		var part string
		if i := bytesIndex(q, '&'); i >= 0 {
			part, q = q[:i], q[i+1:]
		} else {
			part, q = q, ""
		}
		k, v, _ := cut(part, '=')
		if k == name {
			return v
		}
	}
	return ""
}

func bytesIndex(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func cut(s string, c byte) (string, string, bool) {
	if i := bytesIndex(s, c); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// skipBody reads and drops an unread request body so the connection can
// serve the next request; large bodies close the connection instead.
func (cc *clientConn) skipBody(n int64) bool {
	if n <= 0 {
		return true
	}
	if n > 256<<10 {
		return false
	}
	return h1.Discard(cc.br, n) == nil
}

var statusText = map[int]string{400: "Bad Request", 404: "Not Found", 413: "Content Too Large", 431: "Request Header Fields Too Large",
	502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}

// local writes a response the gateway makes itself. It reports whether
// the connection can stay open.
func (cc *clientConn) local(code int, body string, closeConn bool, extra []byte) bool {
	b := cc.scr[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	text := statusText[code]
	if text == "" {
		text = "Error"
	}
	b = append(b, text...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	if len(cc.rid) > 0 {
		b = append(b, "X-Request-Id: "...)
		b = append(b, cc.rid...)
		b = append(b, "\r\n"...)
	}
	b = append(b, extra...)
	if closeConn {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	cc.scr = b
	_, _ = cc.bw.Write(b)
	return cc.bw.Flush() == nil && !closeConn
}

// log writes one access log line. Method and path come from r when the
// head is still readable, else from the copies taken before discarding.
func (cc *clientConn) log(start time.Time, r *h1.Request, up *upstream, addr string, status, retries int, mp ...string) {
	if addr == "" {
		cc.g.countLocal(up, status)
	}
	lg := cc.g.access
	if lg == nil {
		return
	}
	var method, path string
	if r != nil {
		method, path = string(r.Method), string(r.URI)
	} else if len(mp) == 2 {
		method, path = mp[0], mp[1]
	}
	name := ""
	if up != nil {
		name = up.name
	}
	lg.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("request_id", string(cc.rid)),
		slog.String("client", string(cc.ip)),
		slog.String("method", method),
		slog.String("path", path),
		slog.String("upstream", name),
		slog.String("target", addr),
		slog.Int("status", status),
		slog.Int("retries", retries),
		slog.Duration("duration", time.Since(start)),
	)
}
