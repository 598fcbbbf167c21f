package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// The slow path: net/http serves what the fast path hands over (HTTP/2,
// TLS, upgrades, chunked uploads, HTTP/1.0), and httputil.ReverseProxy
// relays it through slowTransport, which picks, retries and reports
// exactly as the fast path does.

type slowKey struct{}

// slowReq is one request's routing decisions, passed to the transport in
// the request context.
type slowReq struct {
	up         *upstream
	key        string
	body       []byte // buffered body (replayable) or nil
	replayable bool
	start      time.Time
	tried      []*balance.Endpoint
	target     string
	retries    int
	failed     bool // every attempt failed: the gateway answered
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
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: cfg.Timeouts.Dial.D(), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       cfg.Timeouts.UpstreamIdle.D(),
		ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader.D(),
		DisableCompression:    true,
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
			pr.Out.URL.Host = "upstream" // the transport sets the picked target
			pr.Out.Host = pr.In.Host
		},
		Transport:     &slowTransport{g: g, rt: tr},
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
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	up := rt.match([]byte(host), []byte(r.URL.Path))
	sr := &slowReq{up: up, start: start}
	defer func() { g.slowLog(r, sr, sw.status, rid) }()
	if up == nil {
		http.Error(sw, "no route", http.StatusNotFound)
		return
	}
	if r.ContentLength > int64(cfg.MaxBodySize) {
		http.Error(sw, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(sw, r.Body, int64(cfg.MaxBodySize))
	}
	if up.usesKey {
		sr.key = slowHashKey(r, up)
	}
	sr.replayable = r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody
	isUpgrade := r.Header.Get("Upgrade") != ""
	if !sr.replayable && !isUpgrade && r.ContentLength <= int64(up.cfg.Retry.BufferBody) {
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
			sr.body, sr.replayable = buf, true
			r.Body = io.NopCloser(bytes.NewReader(buf))
		default:
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		}
	}
	up.budget.request(start.Unix())
	h.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), slowKey{}, sr)))
}

func (g *Gateway) slowLog(r *http.Request, sr *slowReq, status int, rid string) {
	if sr.target == "" || (status >= 500 && sr.failed) {
		g.countLocal(sr.up, status)
	}
	if g.access == nil {
		return
	}
	name := ""
	if sr.up != nil {
		name = sr.up.name
	}
	g.access.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("request_id", rid),
		slog.String("client", r.RemoteAddr),
		slog.String("proto", r.Proto),
		slog.String("method", r.Method),
		slog.String("path", r.URL.RequestURI()),
		slog.String("upstream", name),
		slog.String("target", sr.target),
		slog.Int("status", status),
		slog.Int("retries", sr.retries),
		slog.Duration("duration", time.Since(sr.start)),
	)
}

func slowHashKey(r *http.Request, up *upstream) string {
	k := up.cfg.Key
	switch k.Kind {
	case "client_ip":
		h, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return r.RemoteAddr
		}
		return h
	case "path":
		return r.URL.Path
	case "header":
		return r.Header.Get(k.Name)
	case "cookie":
		if c, err := r.Cookie(k.Name); err == nil {
			return c.Value
		}
	case "query":
		return r.URL.Query().Get(k.Name)
	}
	return ""
}

// pickError is a pick that failed (no target, at capacity).
type pickError struct{ err error }

func (e *pickError) Error() string { return e.err.Error() }
func (e *pickError) Unwrap() error { return e.err }

func (g *Gateway) slowError(w http.ResponseWriter, r *http.Request, err error) {
	sr, _ := r.Context().Value(slowKey{}).(*slowReq)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
	case errors.Is(err, balance.ErrAtCapacity):
		if sr != nil {
			w.Header()["Retry-After"] = []string{string(bytes.TrimSpace(bytes.TrimPrefix(retryAfter(sr.up.cfg.Queue.MaxWait.D()), []byte("Retry-After: "))))}
		}
		http.Error(w, "every target is at capacity", http.StatusServiceUnavailable)
	case errors.As(err, new(*pickError)):
		http.Error(w, "no target available", http.StatusServiceUnavailable)
	case errors.Is(err, errTimeout):
		http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
	default:
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}
}

// slowTransport picks a target per attempt and retries like the fast path.
type slowTransport struct {
	g  *Gateway
	rt *http.Transport
}

func (st *slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sr, _ := req.Context().Value(slowKey{}).(*slowReq)
	if sr == nil {
		return nil, errors.New("gateway: request without routing")
	}
	g, up := st.g, sr.up
	idem := isIdempotent([]byte(req.Method))
	attempts := up.cfg.Retry.Attempts
	if !sr.replayable {
		attempts = 1 // a streamed body cannot be sent twice
	}
	sec := sr.start.Unix()
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if !up.budget.retry(sec) {
				g.metrics.retryDenied.WithLabelValues(up.name).Inc()
				break
			}
			g.metrics.retries.WithLabelValues(up.name, retryReason(lastErr)).Inc()
			sr.retries++
		}
		cc := clientConn{g: g, tried: sr.tried}
		pick, err := cc.pick(up, sr.key)
		if err != nil {
			if lastErr != nil {
				break
			}
			sr.failed = true
			return nil, &pickError{err}
		}
		t := up.target(pick.Addr())
		if t == nil {
			pick.Done(nil)
			continue
		}
		sr.tried = append(sr.tried, pick.Endpoint())
		sr.target = t.addr
		out := req.Clone(req.Context())
		out.URL.Host = t.addr
		if sr.body != nil {
			out.Body = io.NopCloser(bytes.NewReader(sr.body))
			out.ContentLength = int64(len(sr.body))
		} else if sr.replayable {
			out.Body = http.NoBody
		}
		tstart := time.Now()
		res, err := st.rt.RoundTrip(out)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = errTimeout
			}
			var oe *net.OpError
			if errors.As(err, &oe) && oe.Op == "dial" {
				err = &connectError{addr: t.addr, err: err}
			}
			pick.Report(time.Since(tstart), err)
			cc.noteEjection(up, t)
			lastErr = err
			var ce *connectError
			if errors.As(err, &ce) || (idem && sr.replayable && (err != errTimeout || up.cfg.Retry.Timeout)) {
				continue
			}
			break
		}
		if up.statuses[res.StatusCode] && attempt+1 < attempts && (idem || sr.replayable) {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
			pick.Report(time.Since(tstart), errStatus(res.StatusCode))
			cc.noteEjection(up, t)
			lastErr = errStatus(res.StatusCode)
			continue
		}
		var outcome error
		if up.statuses[res.StatusCode] {
			outcome = errStatus(res.StatusCode)
		}
		t.m.count(res.StatusCode)
		d := &doneBody{rc: res.Body, pick: pick, start: tstart, reqStart: sr.start, t: t, outcome: outcome, up: up, g: g}
		if rwc, ok := res.Body.(io.ReadWriteCloser); ok && res.StatusCode == http.StatusSwitchingProtocols {
			d.upgraded = true
			res.Body = &doneRWBody{doneBody: d, w: rwc}
		} else {
			res.Body = d
		}
		return res, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no attempt made")
	}
	sr.failed = true
	return nil, lastErr
}

func retryReason(err error) string {
	var ce *connectError
	var es errStatus
	switch {
	case errors.As(err, &ce):
		return "connect_error"
	case errors.Is(err, errTimeout):
		return "timeout"
	case errors.As(err, &es):
		return "status"
	}
	return "connect_error"
}

// doneBody ends the pick when the response body is finished.
type doneBody struct {
	rc       io.ReadCloser
	pick     balance.Pick
	start    time.Time
	reqStart time.Time
	t        *target
	up       *upstream
	g        *Gateway
	upgraded bool // a switched protocol: its end is no failure

	mu      sync.Mutex // Read and Close race on upgraded connections
	outcome error
	once    sync.Once
}

func (d *doneBody) Read(p []byte) (int, error) {
	n, err := d.rc.Read(p)
	if err != nil && err != io.EOF && !d.upgraded {
		d.mu.Lock()
		d.outcome = err
		d.mu.Unlock()
	}
	return n, err
}

func (d *doneBody) Close() error {
	err := d.rc.Close()
	d.once.Do(func() {
		d.mu.Lock()
		outcome := d.outcome
		d.mu.Unlock()
		d.pick.Report(time.Since(d.start), outcome)
		if outcome != nil {
			(&clientConn{g: d.g}).noteEjection(d.up, d.t)
		}
		d.t.m.dur.Observe(time.Since(d.reqStart).Seconds())
	})
	return err
}

type doneRWBody struct {
	*doneBody
	w io.ReadWriteCloser
}

func (d *doneRWBody) Write(p []byte) (int, error) { return d.w.Write(p) }
