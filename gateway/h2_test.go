package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// The own exchange behind net/http (transport_h2.go), tried with HTTP/2
// clients over TLS.

// startTLS runs a gateway with TLS and the given upstreams block.
func startTLS(t *testing.T, upstreams string) *gateway.Gateway {
	t.Helper()
	cert, key := selfSigned(t, t.TempDir())
	return start(t, base+"tls: {cert_file: "+cert+", key_file: "+key+"}\nupstreams:\n"+upstreams)
}

// h2client speaks HTTP/2 over TLS (ALPN) to the gateway.
func h2client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
}

func h2do(t *testing.T, c *http.Client, req *http.Request) resp {
	t.Helper()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtoMajor != 2 {
		t.Fatalf("served over %s, not HTTP/2", res.Proto)
	}
	return resp{code: res.StatusCode, body: string(b), hdr: res.Header}
}

// The target sees the original Host, X-Forwarded-* as the fast path
// writes them (proto https), the request ID, and no hop-by-hop headers.
func TestH2ForwardedAndHopByHop(t *testing.T) {
	b := newBackend(t, "b1")
	g := startTLS(t, "  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := h2client()
	req, _ := http.NewRequest("GET", "https://"+g.Addr()+"/echo?q=1", nil)
	req.Host = "shop.example:8443"
	for k, v := range map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "gopher",
		"X-Forwarded-Host": "evil.example", "Proxy-Authorization": "Basic x", "Te": "trailers", "X-Keep": "yes"} {
		req.Header.Set(k, v)
	}
	r := h2do(t, c, req)
	e := echo(t, r)
	checks := map[string]string{
		"X-Forwarded-For":     "203.0.113.9, 127.0.0.1",
		"X-Forwarded-Proto":   "https",
		"X-Forwarded-Host":    "shop.example:8443",
		"X-Keep":              "yes",
		"Proxy-Authorization": "",
		"Te":                  "",
	}
	for k, want := range checks {
		if got := strings.Join(e.Header[k], "|"); got != want {
			t.Errorf("target saw %s: %q, want %q", k, got, want)
		}
	}
	if e.Host != "shop.example:8443" || e.Proto != "HTTP/1.1" {
		t.Errorf("target saw Host %q over %s", e.Host, e.Proto)
	}
	id := e.Header.Get("X-Request-Id")
	if id == "" || r.hdr.Get("X-Request-Id") != id {
		t.Errorf("request ID: target %q, client %q", id, r.hdr.Get("X-Request-Id"))
	}
}

// Hop-by-hop headers (and those Connection names) stay behind both
// ways; a chunked response body arrives whole, trailers too. Tried with
// an HTTP/1.1 client whose chunked upload net/http serves, and with an
// HTTP/2 client over TLS.
func TestOwnPathHopByHopAndTrailers(t *testing.T) {
	seen := make(chan http.Header, 2)
	addr := serveRaw(t, func(c net.Conn) {
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		seen <- req.Header
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: X-Up-Secret\r\nX-Up-Secret: 1\r\nKeep-Alive: timeout=5\r\n"+
			"Trailer: X-Sum\r\nTransfer-Encoding: chunked\r\nSet-Cookie: a=1\r\nX-Up: yes\r\nSet-Cookie: b=2\r\n\r\n"+
			"%x\r\n%s\r\n3\r\nend\r\n0\r\nX-Sum: 42\r\n\r\n", len(body), body)
	})
	ups := "  api:\n    targets:\n      - {url: \"http://" + addr + "\"}\n"
	plain := start(t, base+"upstreams:\n"+ups)
	tlsG := startTLS(t, ups)
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{{"HTTP/1.1", client(), "http://" + plain.Addr() + "/"}, {"HTTP/2", h2client(), "https://" + tlsG.Addr() + "/"}} {
		body := io.MultiReader(strings.NewReader("chunked "), strings.NewReader("upload ")) // unknown length
		req, _ := http.NewRequest("POST", tc.url, body)
		req.Header.Set("X-Keep", "yes")
		req.Header.Set("Proxy-Authorization", "Basic x")
		if tc.name == "HTTP/1.1" {
			req.Header.Set("Connection", "X-Secret")
			req.Header.Set("X-Secret", "drop me")
		}
		res, err := tc.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(got) != "chunked upload end" {
			t.Fatalf("%s: body %q %v", tc.name, got, err)
		}
		h := <-seen
		if h.Get("X-Keep") != "yes" || h.Get("X-Secret") != "" || h.Get("Proxy-Authorization") != "" || h.Get("Connection") != "" {
			t.Errorf("%s: target saw %v", tc.name, h)
		}
		for _, k := range []string{"X-Up-Secret", "Keep-Alive", "Connection"} {
			if v := res.Header.Get(k); v != "" {
				t.Errorf("%s: client got %s: %q", tc.name, k, v)
			}
		}
		if got := strings.Join(res.Header["Set-Cookie"], " "); got != "a=1 b=2" {
			t.Errorf("%s: Set-Cookie %q", tc.name, got)
		}
		if res.Header.Get("X-Up") != "yes" || res.Trailer.Get("X-Sum") != "42" {
			t.Errorf("%s: header X-Up %q, trailer X-Sum %q", tc.name, res.Header.Get("X-Up"), res.Trailer.Get("X-Sum"))
		}
	}
}

// Bodies over HTTP/2: buffered, streamed with a length, streamed without
// one (sent chunked), and one over max_body_size refused before the
// target.
func TestH2Bodies(t *testing.T) {
	b := newBackend(t, "b1")
	g := startTLS(t, "  api:\n    retry: {buffer_body: 1KiB}\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := h2client()
	url := "https://" + g.Addr() + "/echo"
	big := strings.Repeat("0123456789abcdef", 4096) // 64 KiB: streamed
	for name, mk := range map[string]func() io.Reader{
		"small":                func() io.Reader { return strings.NewReader("hello") },
		"large":                func() io.Reader { return strings.NewReader(big) },
		"large-unknown-length": func() io.Reader { return io.MultiReader(strings.NewReader(big)) },
	} {
		req, _ := http.NewRequest("POST", url, mk())
		want := "hello"
		if name != "small" {
			want = big
		}
		if e := echo(t, h2do(t, c, req)); e.Body != want || e.Method != "POST" {
			t.Errorf("%s body: %d bytes, method %s", name, len(e.Body), e.Method)
		}
	}
	req, _ := http.NewRequest("GET", url, nil)
	if e := echo(t, h2do(t, c, req)); e.Method != "GET" || e.Body != "" {
		t.Errorf("GET: %+v", e)
	}
}

// An idempotent request is retried on another target when the first
// resets the connection; a POST whose bytes reached a target is not
// replayed (502), and the other target never sees it.
func TestH2RetryAndReplayRule(t *testing.T) {
	var resets atomic.Int64
	bad := serveRaw(t, func(c net.Conn) {
		// Read the request, then close: the bytes reached the target.
		_, _ = http.ReadRequest(bufio.NewReader(c))
		resets.Add(1)
		c.Close()
	})
	good := newBackend(t, "good")
	g := startTLS(t, "  api:\n    strategy: round_robin\n    retry: {attempts: 2}\n    targets:\n"+
		"      - {url: \"http://"+bad+"\"}\n      - {url: \""+good.url()+"\"}\n")
	c := h2client()
	for i := range 4 {
		req, _ := http.NewRequest("GET", "https://"+g.Addr()+"/", nil)
		if r := h2do(t, c, req); r.code != 200 || r.body != "good" {
			t.Fatalf("GET %d: %d %q", i, r.code, r.body)
		}
	}
	if resets.Load() == 0 {
		t.Fatal("the resetting target was never tried")
	}
	hits, ok, failed := good.hits.Load(), 0, 0
	for range 4 {
		req, _ := http.NewRequest("POST", "https://"+g.Addr()+"/", strings.NewReader("once"))
		switch r := h2do(t, c, req); r.code {
		case 200:
			ok++
		case 502:
			failed++
		default:
			t.Fatalf("POST: %d %q", r.code, r.body)
		}
	}
	if failed == 0 || good.hits.Load()-hits != int64(ok) {
		t.Errorf("POSTs: %d served, %d failed, good target saw %d: a POST was replayed", ok, failed, good.hits.Load()-hits)
	}
}

// gate is a target whose requests on /hold wait until the client leaves,
// announcing each on entered; /events streams one event, then waits the
// same way.
func gate(t *testing.T) (string, <-chan struct{}) {
	entered := make(chan struct{}, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		entered <- struct{}{}
		<-r.Context().Done()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), entered
}

// At max_concurrency with no queue an HTTP/2 request gets 503 with
// Retry-After, not a connection to the target.
func TestH2AtCapacity(t *testing.T) {
	addr, entered := gate(t)
	g := startTLS(t, "  api:\n    targets:\n      - {url: \"http://"+addr+"\", max_concurrency: 1}\n")
	c := h2client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+g.Addr()+"/hold", nil)
		if res, err := c.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	<-entered
	req, _ := http.NewRequest("GET", "https://"+g.Addr()+"/", nil)
	r := h2do(t, c, req)
	if r.code != 503 || r.hdr.Get("Retry-After") == "" || !strings.Contains(r.body, "at_capacity") {
		t.Errorf("at capacity: %d Retry-After %q body %q", r.code, r.hdr.Get("Retry-After"), r.body)
	}
	cancel()
	<-done
}

// A client that cancels its stream, while waiting for the head or in the
// middle of a streamed body, frees the target's permit: the next request,
// queued for it, is served.
func TestH2CancelFreesPermit(t *testing.T) {
	addr, entered := gate(t)
	g := startTLS(t, "  api:\n    queue: {max_wait: 1m}\n    targets:\n      - {url: \"http://"+addr+"\", max_concurrency: 1}\n")
	c := h2client()
	for _, path := range []string{"/hold", "/events"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+g.Addr()+path, nil)
		errc := make(chan error, 1)
		go func() {
			res, err := c.Do(req)
			if err == nil {
				// The event arrived before the response ended: streamed.
				line, rerr := bufio.NewReader(res.Body).ReadString('\n')
				if rerr == nil && line != "data: 0\n" {
					rerr = fmt.Errorf("first line %q", line)
				}
				err = rerr
				cancel()
				res.Body.Close()
			}
			errc <- err
		}()
		<-entered
		if path == "/hold" {
			cancel()
		}
		if err := <-errc; path == "/events" && err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		cancel()
		req, _ = http.NewRequest("GET", "https://"+g.Addr()+"/", nil)
		if r := h2do(t, c, req); r.code != 200 || r.body != "ok" {
			t.Fatalf("after cancelling %s: %d %q", path, r.code, r.body)
		}
	}
}

// Server-sent events through HTTP/2 arrive one by one, each before the
// target writes the next.
func TestH2StreamingResponse(t *testing.T) {
	next := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	g := startTLS(t, "  api:\n    targets:\n      - {url: \"http://"+ln.Addr().String()+"\"}\n")
	res, err := h2client().Get("https://" + g.Addr() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.ProtoMajor != 2 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%s, Content-Type %q", res.Proto, res.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(res.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
}

// A target that breaks mid-body cuts the client's stream: the client
// sees an error, not a complete short body.
func TestH2TargetBreaksMidBody(t *testing.T) {
	addr := serveRaw(t, func(c net.Conn) {
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	})
	g := startTLS(t, "  api:\n    targets:\n      - {url: \"http://"+addr+"\"}\n")
	// The response is held until the target is done (a slow client holds
	// no permit), so the break shows as a reset stream, at the head or in
	// the body, never as a complete short body.
	res, err := h2client().Get("https://" + g.Addr() + "/")
	if err != nil {
		return
	}
	defer res.Body.Close()
	if b, err := io.ReadAll(res.Body); err == nil {
		t.Fatalf("a cut body arrived as complete: %q", b)
	}
}

// Expect: 100-continue is answered by the gateway (net/http) and not
// forwarded; the body follows the 100 and reaches the target.
func TestExpectContinueOwnPath(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("interim response %q %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the 100's blank line
		t.Fatal(err)
	}
	io.WriteString(c, "hello")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	e := echo(t, resp{code: res.StatusCode, body: string(body)})
	if e.Body != "hello" || e.Header.Get("Expect") != "" {
		t.Errorf("target saw body %q, Expect %q", e.Body, e.Header.Get("Expect"))
	}
}

// HTTP/2 clients that ask for a large response and do not read it hold
// no permit either: the own exchange spools it as the fast path does.
func TestH2StalledClientsHoldNoPermit(t *testing.T) {
	big := make([]byte, 32<<20) // past the client's stream window and our memory buffer
	for i := range big {
		big[i] = byte(i)
	}
	var done atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		if _, err := w.Write(big); err == nil {
			done.Add(1)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String()
	g := startTLS(t, "  api:\n    targets: [{url: \""+url+"\", max_concurrency: 2}]\n    queue: {max_wait: 10s}\n")
	c := h2client()
	c.Timeout = 0 // the stalled bodies are read at the end
	var stalled []*http.Response
	for range 4 {
		res, err := c.Get("https://" + g.Addr() + "/big")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if res.StatusCode != 200 || res.ProtoMajor != 2 {
			t.Fatalf("stalled request: %s over %s", res.Status, res.Proto)
		}
		stalled = append(stalled, res)
	}
	testenv.Eventually(t, "every permit back", func() bool {
		return done.Load() == 4 && view(t, g, "api")[url].InFlight == 0
	})
	for i := range 10 {
		if r := h2do(t, h2client(), mustReq(t, "GET", "https://"+g.Addr()+"/")); r.code != 200 || r.body != "ok" {
			t.Fatalf("request %d beside stalled streams: %d %q", i, r.code, r.body)
		}
	}
	for i, res := range stalled {
		n, err := io.Copy(io.Discard, res.Body)
		if err != nil || n != int64(len(big)) {
			t.Fatalf("stalled stream %d: %d bytes, %v", i, n, err)
		}
	}
}

func mustReq(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Shutdown reaches HTTP/2 connections on our own server: GOAWAY, the
// stream in flight finishes, the connection closes and Shutdown returns.
func TestH2ShutdownDrains(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	g := startTLS(t, "  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := h2client()
	if r := h2do(t, c, mustReq(t, "GET", "https://"+g.Addr()+"/warm")); r.code != 200 {
		t.Fatalf("warm-up: %d", r.code)
	}
	b.hold.Store(&hold)
	got := make(chan resp, 1)
	go func() {
		res, err := c.Get("https://" + g.Addr() + "/")
		if err != nil {
			got <- resp{code: -1, body: err.Error()}
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		got <- resp{code: res.StatusCode, body: string(body)}
	}()
	testenv.Eventually(t, "request at the target", func() bool { return b.cur.Load() == 1 })
	shut := startDrain(t, g)
	close(hold)
	if r := <-got; r.code != 200 || r.body != "b1" {
		t.Fatalf("in-flight request during drain: %d %q", r.code, r.body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// The HTTP/2 tests again on net/http's HTTP/2 server (http2_server:
// net/http), in a child process with FULCRUM_GATEWAY_H2=net/http: the
// switch stays, so both servers stay tested.
func TestH2OnNetHTTPServer(t *testing.T) {
	if os.Getenv("FULCRUM_GATEWAY_H2") != "" {
		t.Skip("already choosing the server")
	}
	cmd := exec.Command(os.Args[0], "-test.count=1", "-test.run",
		"^(TestH2|TestOwnPathHopByHopAndTrailers|TestExpectContinueOwnPath|TestTLSHTTP2ByALPN)")
	cmd.Env = append(os.Environ(), "FULCRUM_GATEWAY_H2=net/http")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("on net/http's server: %v\n%s", err, out)
	}
}
