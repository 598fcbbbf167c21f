package h2srv

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Every test talks to the server over real TLS sockets: net/http's
// HTTP/2 client for what a client relies on, raw frames (http2.Framer)
// for what a hostile one sends.

var (
	certOnce sync.Once
	cert     tls.Certificate
)

func testCert(t *testing.T) tls.Certificate {
	certOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	return cert
}

type testServer struct {
	srv  *Server
	addr string
	wg   sync.WaitGroup
}

// start serves h on a TLS listener, each connection handshaken and then
// served by ServeConn, as the gateway does.
func start(t *testing.T, h http.Handler, o ConnOptions) *testServer {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{testCert(t)}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: &Server{Handler: h}, addr: ln.Addr().String()}
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					tc.Close()
					return
				}
				ts.srv.ServeConn(tc, o)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		ts.srv.Shutdown()
		ts.wg.Wait()
	})
	return ts
}

func (ts *testServer) client() *http.Client {
	return &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

func (ts *testServer) url(path string) string { return "https://" + ts.addr + path }

// raw is a hostile client's connection: frames written and read by hand.
type raw struct {
	t   *testing.T
	c   *tls.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func (ts *testServer) raw(t *testing.T, settings ...http2.Setting) *raw {
	t.Helper()
	c, err := tls.Dial("tcp", ts.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &raw{t: t, c: c, fr: http2.NewFramer(c, c)}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.enc = hpack.NewEncoder(&r.buf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return r
}

// block encodes header fields (name, value pairs).
func (r *raw) block(kv ...string) []byte {
	r.buf.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = r.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(r.buf.Bytes())
}

func (r *raw) headers(id uint32, end bool, kv ...string) {
	r.t.Helper()
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.block(kv...), EndStream: end, EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *raw) get(id uint32, path string) {
	r.headers(id, true, ":method", "GET", ":scheme", "https", ":path", path, ":authority", "example.test")
}

// next reads frames until want says one is the one awaited; a read error
// fails the test.
func (r *raw) next(want func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("reading frames: %v", err)
		}
		if want(f) {
			return f
		}
	}
}

// reset awaits RST_STREAM on id and returns its code.
func (r *raw) reset(id uint32) http2.ErrCode {
	r.t.Helper()
	return r.next(func(f http2.Frame) bool {
		_, ok := f.(*http2.RSTStreamFrame)
		return ok && f.Header().StreamID == id
	}).(*http2.RSTStreamFrame).ErrCode
}

// status awaits a HEADERS frame on id and returns its :status.
func (r *raw) status(id uint32) string {
	r.t.Helper()
	return r.next(func(f http2.Frame) bool {
		_, ok := f.(*http2.MetaHeadersFrame)
		return ok && f.Header().StreamID == id
	}).(*http2.MetaHeadersFrame).PseudoValue("status")
}

// goAway awaits GOAWAY, then the connection's end.
func (r *raw) goAway() *http2.GoAwayFrame {
	r.t.Helper()
	var ga *http2.GoAwayFrame
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			if ga == nil {
				r.t.Fatalf("connection ended without GOAWAY: %v", err)
			}
			return ga
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			ga = &http2.GoAwayFrame{LastStreamID: g.LastStreamID, ErrCode: g.ErrCode}
		}
	}
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })

func TestRequestAndResponse(t *testing.T) {
	type seen struct {
		proto, host, uri, remote, cookie string
		tls                              bool
		cl                               int64
	}
	got := make(chan seen, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Proto, r.Host, r.RequestURI, r.RemoteAddr, r.Header.Get("Cookie"), r.TLS != nil, r.ContentLength}
		w.Header().Set("X-Mixed-Case", "v")
		w.Header().Set("Connection", "close") // connection-specific: dropped (the client refuses it)
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Upgrade", "websocket")
		w.WriteHeader(201)
		io.WriteString(w, "<html>hi</html>")
	}), ConnOptions{})
	req, _ := http.NewRequest("GET", ts.url("/p?q=1"), nil)
	req.Host = "shop.example:8443"
	req.AddCookie(&http.Cookie{Name: "a", Value: "1"})
	req.AddCookie(&http.Cookie{Name: "b", Value: "2"})
	res, err := ts.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	s := <-got
	if s.proto != "HTTP/2.0" || s.host != "shop.example:8443" || s.uri != "/p?q=1" || !s.tls || s.cl != 0 ||
		!strings.HasPrefix(s.remote, "127.0.0.1:") || s.cookie != "a=1; b=2" {
		t.Errorf("handler saw %+v", s)
	}
	if res.StatusCode != 201 || string(body) != "<html>hi</html>" || res.Header.Get("X-Mixed-Case") != "v" ||
		res.ContentLength != int64(len(body)) || res.Header.Get("Date") == "" ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Errorf("got %d %q %v", res.StatusCode, body, res.Header)
	}
	for _, k := range []string{"Connection", "Transfer-Encoding", "Keep-Alive", "Upgrade"} {
		if v := res.Header.Get(k); v != "" {
			t.Errorf("%s reached the client: %q", k, v)
		}
	}
}

// The server's SETTINGS, a PING answered, SETTINGS acknowledged.
func TestSettingsAndPing(t *testing.T) {
	ts := start(t, hello, ConnOptions{MaxHeaderList: 8 << 10})
	r := ts.raw(t)
	sf := r.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && !s.IsAck() }).(*http2.SettingsFrame)
	if v, _ := sf.Value(http2.SettingMaxConcurrentStreams); v != 250 {
		t.Errorf("max concurrent streams %d", v)
	}
	if v, _ := sf.Value(http2.SettingMaxHeaderListSize); v != 8<<10 {
		t.Errorf("max header list size %d", v)
	}
	r.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	if err := r.fr.WritePing(false, [8]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	p := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !p.IsAck() || p.Data != [8]byte{1, 2, 3} {
		t.Errorf("ping answer %+v", p)
	}
}

// Bodies larger than every window both ways: the request's is credited
// back as read, the response waits for the client's WINDOW_UPDATEs.
func TestBodiesBeyondTheWindows(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Write(b)
		w.Write(b)
	}), ConnOptions{})
	payload := bytes.Repeat([]byte("0123456789abcdef"), 200<<10) // 3.2 MB
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	res, err := (&http.Client{Transport: tr}).Post(ts.url("/"), "application/octet-stream", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil || len(got) != 2*len(payload) || !bytes.Equal(got[:len(payload)], payload) {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
}

// A small client window: the response goes out in window-sized pieces,
// each after the client's WINDOW_UPDATE.
func TestSmallClientWindow(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 100<<10))
	}), ConnOptions{})
	r := ts.raw(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	r.get(1, "/")
	total := 0
	for done := false; !done; {
		f := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
		d := f.(*http2.DataFrame)
		if len(d.Data()) > 1000 {
			t.Fatalf("a DATA frame of %d bytes past a window of 1000", len(d.Data()))
		}
		total += len(d.Data())
		done = d.StreamEnded()
		if n := uint32(len(d.Data())); n > 0 {
			r.fr.WriteWindowUpdate(1, n)
			r.fr.WriteWindowUpdate(0, n)
		}
	}
	if total != 100<<10 {
		t.Errorf("got %d bytes", total)
	}
}

// A client that opens no window: the handler's write fails at its write
// deadline (ResponseController, as the gateway's spool sets
// timeouts.send), and the stream is reset.
func TestWindowStallBoundedByWriteDeadline(t *testing.T) {
	werr := make(chan error, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			werr <- err
			return
		}
		_, err := w.Write(bytes.Repeat([]byte("x"), 64<<10))
		if err == nil {
			err = rc.Flush()
		}
		werr <- err
	}), ConnOptions{})
	r := ts.raw(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.get(1, "/")
	if code := r.reset(1); code != http2.ErrCodeCancel {
		t.Errorf("reset with %v", code)
	}
	if err := <-werr; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the handler's write: %v", err)
	}
}

// Without a deadline from the handler, the connection's send timeout
// bounds the wait.
func TestWindowStallBoundedBySend(t *testing.T) {
	werr := make(chan error, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := w.Write(bytes.Repeat([]byte("x"), 64<<10))
		werr <- err
	}), ConnOptions{Send: 50 * time.Millisecond})
	r := ts.raw(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.get(1, "/")
	if code := r.reset(1); code != http2.ErrCodeCancel {
		t.Errorf("reset with %v", code)
	}
	if err := <-werr; err == nil {
		t.Error("the handler's write succeeded")
	}
}

func TestTrailersHeadAndStatuses(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
		case "/head":
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, "ignored for HEAD")
		case "/204":
			w.WriteHeader(204)
			if _, err := io.WriteString(w, "x"); err != http.ErrBodyNotAllowed {
				panic(fmt.Sprint("write on 204: ", err))
			}
		case "/103":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(103)
			w.WriteHeader(200)
			io.WriteString(w, "after hints")
		case "/cl":
			w.Header().Set("Content-Length", "3")
			if _, err := io.WriteString(w, "four"); err != http.ErrContentLength {
				panic(fmt.Sprint("write past Content-Length: ", err))
			}
			io.WriteString(w, "abc")
		}
	}), ConnOptions{})
	c := ts.client()
	res, err := c.Get(ts.url("/trailers"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "body" || res.Trailer.Get("X-Sum") != "42" || res.Trailer.Get("X-Late") != "yes" || res.Header.Get("X-Sum") != "" {
		t.Errorf("trailers: %q header %v trailer %v", b, res.Header, res.Trailer)
	}
	res, err = c.Head(ts.url("/head"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if len(b) != 0 || res.ContentLength != 1000 {
		t.Errorf("HEAD: %q, length %d", b, res.ContentLength)
	}
	res, err = c.Get(ts.url("/204"))
	if err != nil || res.StatusCode != 204 {
		t.Fatalf("204: %v %v", res, err)
	}
	res.Body.Close()
	var hints []int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if h.Get("Link") != "" {
				hints = append(hints, code)
			}
			return nil
		}})
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url("/103"), nil)
	res, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "after hints" || len(hints) != 1 || hints[0] != 103 {
		t.Errorf("103: %d %q hints %v", res.StatusCode, b, hints)
	}
	res, err = c.Get(ts.url("/cl"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "abc" {
		t.Errorf("Content-Length 3: %q", b)
	}
}

// Request trailers reach r.Trailer by the body's end.
func TestRequestTrailers(t *testing.T) {
	got := make(chan string, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Trailer.Get("X-Digest")
	}), ConnOptions{})
	req, _ := http.NewRequest("POST", ts.url("/"), io.NopCloser(strings.NewReader("data")))
	req.Trailer = http.Header{"X-Digest": {"abc"}}
	res, err := ts.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if v := <-got; v != "abc" {
		t.Errorf("trailer %q", v)
	}
}

// A body shorter or longer than its Content-Length: the stream is reset
// and the handler's read fails.
func TestContentLengthMismatch(t *testing.T) {
	rerr := make(chan error, 2)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		rerr <- err
	}), ConnOptions{})
	r := ts.raw(t)
	for i, data := range []string{"short", "much too long"} {
		id := uint32(1 + 2*i)
		r.headers(id, false, ":method", "POST", ":scheme", "https", ":path", "/", ":authority", "x", "content-length", "8")
		r.fr.WriteData(id, true, []byte(data))
		if code := r.reset(id); code != http2.ErrCodeProtocol {
			t.Errorf("%q: reset with %v", data, code)
		}
		if err := <-rerr; err == nil {
			t.Errorf("%q: the handler read the body whole", data)
		}
	}
}

// Expect: 100-continue is answered at the body's first read.
func TestExpectContinue(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}), ConnOptions{})
	r := ts.raw(t)
	r.headers(1, false, ":method", "PUT", ":scheme", "https", ":path", "/", ":authority", "x", "expect", "100-continue")
	if s := r.status(1); s != "100" {
		t.Fatalf("first status %s", s)
	}
	r.fr.WriteData(1, true, []byte("payload"))
	if s := r.status(1); s != "200" {
		t.Fatalf("final status %s", s)
	}
	d := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if string(d.Data()) != "payload" {
		t.Errorf("body %q", d.Data())
	}
}

// http.MaxBytesReader bounds a body on this server too.
func TestMaxBytesReader(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 10)); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}
	}), ConnOptions{})
	res, err := ts.client().Post(ts.url("/"), "text/plain", strings.NewReader(strings.Repeat("x", 100)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 {
		t.Errorf("status %d", res.StatusCode)
	}
}

// RST_STREAM from the client cancels the request's context.
func TestResetCancelsContext(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}), ConnOptions{})
	r := ts.raw(t)
	r.get(1, "/")
	<-started
	r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	<-cancelled
}

// A panic resets the stream (http.ErrAbortHandler: silently); the
// connection serves on.
func TestHandlerPanics(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abort":
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/boom":
			panic("boom")
		}
		io.WriteString(w, "fine")
	}), ConnOptions{})
	ts.srv.Log = discardLog()
	r := ts.raw(t)
	r.get(1, "/abort")
	if code := r.reset(1); code != http2.ErrCodeInternal {
		t.Errorf("abort: %v", code)
	}
	r.get(3, "/boom")
	if code := r.reset(3); code != http2.ErrCodeInternal {
		t.Errorf("panic: %v", code)
	}
	r.get(5, "/")
	if s := r.status(5); s != "200" {
		t.Errorf("after the panics: %s", s)
	}
}

// Malformed requests are stream errors; the connection serves on.
func TestMalformedRequests(t *testing.T) {
	ts := start(t, hello, ConnOptions{})
	r := ts.raw(t)
	id := uint32(1)
	for name, kv := range map[string][]string{
		"no :path":            {":method", "GET", ":scheme", "https", ":authority", "x"},
		"relative :path":      {":method", "GET", ":scheme", "https", ":path", "foo", ":authority", "x"},
		"no :method":          {":scheme", "https", ":path", "/", ":authority", "x"},
		"connection header":   {":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x", "connection", "close"},
		"te: gzip":            {":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x", "te", "gzip"},
		"upper-case name":     {":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x", "X-Up", "1"},
		"pseudo after field":  {":method", "GET", ":scheme", "https", "x-a", "1", ":path", "/"},
		"unknown pseudo":      {":method", "GET", ":scheme", "https", ":path", "/", ":bogus", "1"},
		"response pseudo":     {":method", "GET", ":scheme", "https", ":path", "/", ":status", "200"},
		"bad content-length":  {":method", "GET", ":scheme", "https", ":path", "/", "content-length", "x"},
		"CONNECT with a path": {":method", "CONNECT", ":scheme", "https", ":path", "/", ":authority", "x:1"},
		"method not a token":  {":method", "GE T", ":scheme", "https", ":path", "/", ":authority", "x"},
		"newline in value":    {":method", "GET", ":scheme", "https", ":path", "/", "x-a", "a\nb"},
	} {
		r.headers(id, true, kv...)
		if code := r.reset(id); code != http2.ErrCodeProtocol {
			t.Errorf("%s: reset with %v", name, code)
		}
		id += 2
	}
	r.get(id, "/")
	if s := r.status(id); s != "200" {
		t.Errorf("after them: %s", s)
	}
}

// A header list past the limit is answered 431; a CONTINUATION flood
// ends the connection without the server reading it all.
func TestOversizedHeaders(t *testing.T) {
	ts := start(t, hello, ConnOptions{MaxHeaderList: 4096})
	r := ts.raw(t)
	r.headers(1, true, ":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x", "x-big", strings.Repeat("a", 3000), "x-big2", strings.Repeat("b", 3000))
	if s := r.status(1); s != "431" {
		t.Errorf("status %s", s)
	}
	r.get(3, "/")
	if s := r.status(3); s != "200" {
		t.Errorf("after it: %s", s)
	}

	f := ts.raw(t)
	f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.block(":method", "GET", ":scheme", "https", ":path", "/"), EndStream: true})
	frag := f.block("x-flood", strings.Repeat("z", 1000))
	go func() { // the server stops reading; the writes fail then
		for i := 0; i < 100000; i++ {
			if f.fr.WriteContinuation(1, false, frag) != nil {
				return
			}
		}
	}()
	if ga := f.goAway(); ga.ErrCode == http2.ErrCodeNo {
		t.Errorf("GOAWAY %v", ga.ErrCode)
	}
}

// CVE-2023-44487: streams opened and reset at once, over and over, get a
// GOAWAY ENHANCE_YOUR_CALM.
func TestRapidReset(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }), ConnOptions{})
	r := ts.raw(t)
	blk := r.block(":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x")
	go func() { // until the server closes the connection
		for id := uint32(1); id < 20000; id += 2 {
			if r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndStream: true, EndHeaders: true}) != nil ||
				r.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	if ga := r.goAway(); ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v", ga.ErrCode)
	}
}

// Past 250 open streams, new ones are refused.
func TestMaxConcurrentStreams(t *testing.T) {
	release := make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }), ConnOptions{})
	defer close(release)
	r := ts.raw(t)
	for i := 0; i <= 250; i++ {
		r.get(uint32(1+2*i), "/")
	}
	if code := r.reset(501); code != http2.ErrCodeRefusedStream {
		t.Errorf("the 251st stream: %v", code)
	}
}

// A client flooding PINGs (or SETTINGS) without reading its answers
// holds no more than the connection's buffers: the server's write blocks,
// times out at Send and closes the connection.
func TestControlFloodWithoutReading(t *testing.T) {
	ts := start(t, hello, ConnOptions{Send: 100 * time.Millisecond})
	r := ts.raw(t)
	for i := 0; ; i++ {
		var err error
		if i%2 == 0 {
			err = r.fr.WritePing(false, [8]byte{})
		} else {
			err = r.fr.WriteSettings()
		}
		if err != nil {
			return // the server closed the connection
		}
	}
}

// A connection without streams closes at Idle (GOAWAY first); one that
// never sends its preface, at Preface.
func TestIdleAndPrefaceTimeouts(t *testing.T) {
	ts := start(t, hello, ConnOptions{Idle: 50 * time.Millisecond, Preface: 50 * time.Millisecond})
	r := ts.raw(t)
	r.get(1, "/")
	if ga := r.goAway(); ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Errorf("GOAWAY %+v", ga)
	}
	c, err := tls.Dial("tcp", ts.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Errorf("silent client: %v", err)
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "reset by peer") }

// Shutdown: GOAWAY names the last stream; it finishes, later ones are
// not served, then the connection closes.
func TestGracefulShutdown(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}), ConnOptions{})
	r := ts.raw(t)
	r.get(1, "/")
	<-started
	ts.srv.Shutdown()
	ga := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if ga.LastStreamID != 1 || ga.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY %d %v", ga.LastStreamID, ga.ErrCode)
	}
	r.get(3, "/") // past the last stream: ignored
	close(release)
	d := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if d.StreamID != 1 || string(d.Data()) != "done" {
		t.Errorf("DATA %d %q", d.StreamID, d.Data())
	}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			break // closed
		}
		if f.Header().StreamID == 3 {
			t.Errorf("stream 3 was served: %v", f)
		}
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// SETTINGS may shrink the window below zero mid-response (RFC 9113
// 6.9.2): the response waits, and its END_STREAM, which needs no
// window, still goes.
func TestWindowBelowZero(t *testing.T) {
	release := make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 1000))
		w.(http.Flusher).Flush()
		<-release
	}), ConnOptions{})
	r := ts.raw(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	r.get(1, "/")
	d := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if len(d.Data()) != 1000 || d.StreamEnded() {
		t.Fatalf("first DATA: %d bytes, end %v", len(d.Data()), d.StreamEnded())
	}
	r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}) // the stream's window: -1000
	r.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	close(release)
	d = r.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if len(d.Data()) != 0 || !d.StreamEnded() {
		t.Errorf("last DATA: %d bytes, end %v", len(d.Data()), d.StreamEnded())
	}
}

// A body that stops coming fails the handler's read at the idle timeout,
// and the stream is reset.
func TestStalledBodyBoundedByIdle(t *testing.T) {
	rerr := make(chan error, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		rerr <- err
	}), ConnOptions{Idle: 50 * time.Millisecond})
	r := ts.raw(t)
	r.headers(1, false, ":method", "POST", ":scheme", "https", ":path", "/", ":authority", "x")
	r.fr.WriteData(1, false, []byte("a little, then nothing"))
	if code := r.reset(1); code != http2.ErrCodeCancel {
		t.Errorf("reset with %v", code)
	}
	if err := <-rerr; !errors.Is(err, errBodyTimeout) {
		t.Errorf("the handler's read: %v", err)
	}
}
