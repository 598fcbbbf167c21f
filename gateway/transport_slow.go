package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance/probe"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// The net/http transport: net/http serves what the fast path hands over
// (HTTP/2, TLS, upgrades, chunked uploads, HTTP/1.0). Plain request and
// response goes to the own exchange (transport_h2.go); upgrades and
// https upstreams to httputil.ReverseProxy, whose RoundTrip runs the same
// attempt loop as the fast path, exchange being one http.Transport round
// trip.

type slowKey struct{}

// slowReq is one request's state, passed to RoundTrip in the context.
type slowReq struct {
	ro       *route // the route: its rewrites and header changes
	rq       request
	body     []byte // the buffered body, or nil
	buffered bool   // the body is in body, or there is none
	line     accessLine
}

func (g *Gateway) newSlowServer() *http.Server {
	cfg := g.cfg()
	var p http.Protocols
	p.SetHTTP1(true)
	if cfg.H2C {
		p.SetUnencryptedHTTP2(true)
	}
	if g.tlsConf != nil {
		p.SetHTTP2(true)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Keep the client's chain, as the fast path does (Rewrite
			// starts from a request stripped of X-Forwarded-*).
			if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
				pr.Out.Header["X-Forwarded-For"] = prior
			}
			pr.SetXForwarded()
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "upstream" // exchange sets the picked target
			pr.Out.Host = pr.In.Host
			if sr, _ := pr.In.Context().Value(slowKey{}).(*slowReq); sr != nil && sr.ro != nil {
				if rw := sr.ro.rewrite; rw != nil {
					p := string(rw.appendURI(nil, []byte(pr.In.URL.EscapedPath())))
					if up, err := url.PathUnescape(p); err == nil {
						pr.Out.URL.Path, pr.Out.URL.RawPath = up, p
					}
				}
				sr.ro.reqHdr.apply(pr.Out.Header)
			}
		},
		ModifyResponse: func(res *http.Response) error {
			if sr, _ := res.Request.Context().Value(slowKey{}).(*slowReq); sr != nil && sr.ro != nil {
				sr.ro.respHdr.apply(res.Header)
			}
			return nil
		},
		Transport:     &slowTransport{g: g},
		FlushInterval: -1, // stream: flush after every write (SSE, long polls)
		ErrorHandler:  g.slowError,
		ErrorLog:      slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
		BufferPool:    bufPool{},
	}
	return &http.Server{
		Handler:           &slowHandler{g: g, rp: rp},
		ReadHeaderTimeout: cfg.Timeouts.ReadHeader.D(),
		IdleTimeout:       cfg.Timeouts.Idle.D(),
		MaxHeaderBytes:    int(cfg.MaxHeaderSize),
		Protocols:         &p,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

// setSlowTransport makes the http.Transport for the config's timeouts; a
// reload that changes them swaps it, and the old one's idle connections
// close.
func (g *Gateway) setSlowTransport(cfg *config.Config) {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: cfg.Timeouts.Dial.D(), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       cfg.Timeouts.UpstreamIdle.D(),
		ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader.D(),
		DisableCompression:    true,
	}
	if old := g.slowTr.Swap(tr); old != nil {
		old.CloseIdleConnections()
	}
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// bufPool lends ReverseProxy 32KiB copy buffers.
type bufPool struct{}

func (bufPool) Get() []byte  { return *copyBufs.Get().(*[]byte) }
func (bufPool) Put(b []byte) { copyBufs.Put(&b) }

type slowHandler struct {
	g  *Gateway
	rp *httputil.ReverseProxy
}

// statusWriter records the status for the access log; Unwrap keeps
// flushing and hijacking (upgrades) working through ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP: route, buffer a small body, then ReverseProxy (whose
// RoundTrip is the attempt loop) relays; the access line is written last.
func (h *slowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := h.g
	start := time.Now()
	rt := g.rt.Load()
	cfg := rt.cfg
	rid := r.Header.Get("X-Request-Id")
	if rid == "" {
		rid = g.ridPrefix + "-" + strconv.FormatUint(g.ridCtr.Add(1), 36)
		r.Header.Set("X-Request-Id", rid)
	}
	w.Header().Set("X-Request-Id", rid)
	sw := &statusWriter{ResponseWriter: w}
	ro := rt.routeHTTP(r)
	up := ro.upstream((*httpView)(r), func() string { return slowClientIP(r) })
	sr := &slowReq{line: accessLine{start: start, rid: rid, client: r.RemoteAddr, proto: r.Proto,
		method: r.Method, path: r.URL.RequestURI(), up: up}}
	defer func() {
		sr.line.retries = sr.rq.retries
		g.logRequest(r.Context(), &sr.line, sw.status)
	}()
	sr.ro = ro
	if ro != nil && ro.redirect != nil {
		sr.line.reason = "redirect"
		uri := r.RequestURI
		if uri == "" || uri[0] != '/' {
			uri = r.URL.RequestURI()
		}
		sw.Header().Set("Location", string(ro.redirect.appendLocation(nil, []byte(r.Host), []byte(uri))))
		sw.WriteHeader(ro.redirect.status)
		return
	}
	if up == nil {
		http.Error(sw, "no route", http.StatusNotFound)
		return
	}
	if ro.limit != nil {
		key := slowClientIP(r)
		if k := ro.limit.cfg.KeyParsed; k.Kind == "header" {
			key = r.Header.Get(k.Name)
		}
		if ok, wait := ro.limit.allow(key); !ok {
			ro.limited.Inc()
			sr.line.reason = reasonRateLimited
			ra := retryAfter(wait)
			sw.Header()["Retry-After"] = []string{string(bytes.TrimSpace(ra[len("Retry-After: "):]))}
			http.Error(sw, strings.TrimSuffix(failureBody(429, reasonRateLimited), "\n"), http.StatusTooManyRequests)
			return
		}
	}
	if r.ContentLength > int64(cfg.MaxBodySize) {
		http.Error(sw, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		// (An HTTP/2 request without a body still has a Body, empty.)
		r.Body = http.MaxBytesReader(sw, r.Body, int64(cfg.MaxBodySize))
	}
	sr.rq = request{up: up, start: start}
	if up.usesKey {
		sr.rq.key = requestKey((*httpView)(r), up.cfg.Key, up.keyLower, func() string { return slowClientIP(r) })
	}
	sr.buffered = r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody
	isUpgrade := r.Header.Get("Upgrade") != ""
	if !sr.buffered && !isUpgrade && r.ContentLength <= int64(up.cfg.Retry.BufferBody) {
		// Small enough to keep for a retry (chunked bodies too, if short).
		limit := int64(up.cfg.Retry.BufferBody)
		buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		switch {
		case err != nil:
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(sw, "request body too large", http.StatusRequestEntityTooLarge)
			} else {
				http.Error(sw, "reading request body: "+err.Error(), http.StatusBadRequest)
			}
			return
		case int64(len(buf)) <= limit:
			sr.body, sr.buffered = buf, true
			r.Body = io.NopCloser(bytes.NewReader(buf))
		default:
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		}
	}
	idem := isIdempotent([]byte(r.Method)) || r.Header.Get("Idempotency-Key") != ""
	sr.rq.replayable = idem && sr.buffered
	if ownsRequest(r, up) {
		h.serveOwn(sw, w, r, sr) // transport_h2.go
		return
	}
	h.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), slowKey{}, sr)))
}

// gatewayError is the attempt loop's own answer, for slowError to write.
type gatewayError struct {
	code   int
	reason string
}

func (e *gatewayError) Error() string { return failureBody(e.code, e.reason) }

func (g *Gateway) slowError(w http.ResponseWriter, r *http.Request, err error) {
	sr, _ := r.Context().Value(slowKey{}).(*slowReq)
	var mbe *http.MaxBytesError
	var ge *gatewayError
	switch {
	case errors.As(err, &mbe):
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
	case errors.As(err, &ge):
		g.answer(w, sr, ge.code, ge.reason)
	default: // the client went away, or ReverseProxy failed on its side
		if sr != nil {
			sr.line.reason = reasonReset
		}
		http.Error(w, failureBody(502, reasonReset), http.StatusBadGateway)
	}
}

// answer writes the attempt loop's own answer (sr may be nil).
func (g *Gateway) answer(w http.ResponseWriter, sr *slowReq, code int, reason string) {
	if sr != nil {
		sr.line.reason = reason
		if reason == reasonAtCapacity {
			ra := retryAfter(sr.rq.up.cfg.Queue.MaxWait.D())
			w.Header()["Retry-After"] = []string{string(bytes.TrimSpace(ra[len("Retry-After: "):]))}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, failureBody(code, reason))
}

// slowTransport's RoundTrip is the attempt loop over http.Transport.
type slowTransport struct{ g *Gateway }

func (st *slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sr, _ := req.Context().Value(slowKey{}).(*slowReq)
	if sr == nil {
		return nil, errors.New("gateway: request without routing")
	}
	g, up := st.g, sr.rq.up
	x := &slowExchange{g: g, req: req, sr: sr}
	if req.Body != nil && req.Body != http.NoBody && sr.body == nil {
		x.stream = &onceBody{r: req.Body}
	}
	res := up.run(req.Context(), g, &sr.rq, x)
	if res.t == nil {
		return nil, &gatewayError{code: res.code, reason: res.reason}
	}
	sr.line.target = res.t.addr
	resp := x.resp
	d := &doneBody{rc: resp.Body, res: res, reqStart: sr.rq.start, up: up, g: g, client: req.Context()}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		d.upgraded = true
		resp.Body = &doneRWBody{doneBody: d, w: rwc}
	} else {
		resp.Body = d
	}
	return resp, nil
}

// slowExchange is the net/http transport's I/O for one request.
type slowExchange struct {
	g      *Gateway
	req    *http.Request // as ReverseProxy rewrote it
	sr     *slowReq
	stream *onceBody // a body too large to buffer: sent at most once
	resp   *http.Response
}

func (x *slowExchange) loadHeader() []byte {
	if x.resp == nil {
		return nil
	}
	return []byte(x.resp.Header.Get(probe.Header))
}

func (x *slowExchange) exchange(ctx context.Context, t *target, _ time.Time, headTO time.Duration) (int, bool, error) {
	var cut *time.Timer
	if headTO < x.g.cfg().Timeouts.ResponseHeader.D() {
		// A try timeout (the transport's own is response_header): the
		// round trip's context ends unless the head came first. The
		// body's reads run under the same context, so the timer is
		// stopped once the head is in.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		cut = time.AfterFunc(headTO, func() { cancel(errTimeout) })
	}
	out := x.req.Clone(ctx)
	out.URL.Host = t.addr
	tr := x.g.slowTr.Load()
	if up := x.sr.rq.up; up.tls != nil {
		out.URL.Scheme, tr = "https", up.tls // upstream_tls.go
	}
	switch {
	case x.sr.body != nil:
		out.Body = io.NopCloser(bytes.NewReader(x.sr.body))
		out.ContentLength = int64(len(x.sr.body))
	case x.stream != nil:
		out.Body = x.stream
	case x.sr.buffered:
		out.Body = http.NoBody
	}
	written := false
	trace := &httptrace.ClientTrace{WroteHeaders: func() { written = true }}
	out = out.WithContext(httptrace.WithClientTrace(ctx, trace))
	resp, err := tr.RoundTrip(out)
	if x.stream != nil && x.stream.read {
		written = true // part of the body left the client: it cannot be sent again
	}
	if cut != nil && !cut.Stop() {
		// The try timeout fired, before the head or as it came.
		if err == nil {
			resp.Body.Close()
		}
		return 0, written, errTimeout
	}
	if err != nil {
		var ne net.Error
		var oe *net.OpError
		switch {
		case errors.As(err, &oe) && oe.Op == "dial":
			err = &connectError{addr: t.addr, err: err}
		case errors.As(err, &ne) && ne.Timeout():
			err = errTimeout
		}
		return 0, written, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && !switchAsked(x.req.Header, resp) {
		// ReverseProxy would refuse it without closing the body, and the
		// pick would never end (its permit held for good).
		resp.Body.Close()
		return 0, true, errSwitched
	}
	x.resp = resp
	return resp.StatusCode, true, nil
}

// switchAsked reports whether a 101 switches to the protocol the request
// asked for, as ReverseProxy requires (ASCII, case folded) to relay it.
func switchAsked(req http.Header, resp *http.Response) bool {
	asked, got := upgradeType(req), upgradeType(resp.Header)
	if _, ok := resp.Body.(io.ReadWriteCloser); !ok || asked == "" {
		return false
	}
	for i := range len(got) {
		if got[i] < ' ' || got[i] > '~' {
			return false
		}
	}
	return eqFoldStr([]byte(asked), got)
}

// upgradeType is the Upgrade header's value when Connection lists
// upgrade.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// drop closes the response unread: reading its body could hold the
// retry on a target that never sends it (no deadline covers a body).
func (x *slowExchange) drop(*target) {
	x.resp.Body.Close()
	x.resp = nil
}

func (x *slowExchange) watch(ctx context.Context) (context.Context, func()) {
	return ctx, func() {} // net/http ends the request's context when its client leaves
}

// onceBody is a streamed request body: it notes whether any of it was
// read, and ignores Close so a failed round trip that never read it
// leaves it for another target.
type onceBody struct {
	r    io.ReadCloser
	read bool
}

func (b *onceBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.read = true
	}
	return n, err
}

func (b *onceBody) Close() error { return nil }

// doneBody ends the pick when the response body is finished.
type doneBody struct {
	rc       io.ReadCloser
	res      result
	reqStart time.Time
	up       *upstream
	g        *Gateway
	upgraded bool            // a switched protocol: its end is no failure
	client   context.Context // ends when the client leaves: then a broken read is no failure

	mu      sync.Mutex // Read and Close race on upgraded connections
	readErr error
	once    sync.Once
}

func (d *doneBody) Read(p []byte) (int, error) {
	n, err := d.rc.Read(p)
	if err != nil && err != io.EOF && !d.upgraded && d.client.Err() == nil {
		d.mu.Lock()
		d.readErr = err
		d.mu.Unlock()
	}
	return n, err
}

func (d *doneBody) Close() error {
	err := d.rc.Close()
	d.once.Do(func() {
		d.mu.Lock()
		readErr := d.readErr
		d.mu.Unlock()
		end := time.Now()
		d.up.finish(d.g, &d.res, end, readErr)
		d.res.t.m.dur.Observe(end.Sub(d.reqStart).Seconds())
	})
	return err
}

type doneRWBody struct {
	*doneBody
	w io.ReadWriteCloser
}

func (d *doneRWBody) Write(p []byte) (int, error) { return d.w.Write(p) }
