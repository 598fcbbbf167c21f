package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

type echoed struct {
	Header http.Header `json:"header"`
	Host   string      `json:"host"`
	Body   string      `json:"body"`
	Method string      `json:"method"`
	Proto  string      `json:"proto"`
}

func echo(t *testing.T, r resp) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("echo body %q (%d): %v", r.body, r.code, err)
	}
	return e
}

// The target sees X-Forwarded-*, the original Host, a request ID, and no
// hop-by-hop headers; the client gets the request ID back.
func TestForwardedAndHopByHopHeaders(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := client()
	r := get(t, c, "http://"+g.Addr()+"/echo", "Host", "shop.example:8443", "X-Forwarded-For", "203.0.113.9",
		"Connection", "X-Secret", "X-Secret", "drop me", "Keep-Alive", "timeout=5", "Proxy-Authorization", "Basic x", "X-Keep", "yes", "TE", "trailers")
	e := echo(t, r)
	checks := map[string]string{
		"X-Forwarded-For":     "203.0.113.9, 127.0.0.1",
		"X-Forwarded-Proto":   "http",
		"X-Forwarded-Host":    "shop.example:8443",
		"X-Keep":              "yes",
		"X-Secret":            "",
		"Keep-Alive":          "",
		"Proxy-Authorization": "",
		"Te":                  "",
	}
	for k, want := range checks {
		if got := e.Header.Get(k); got != want {
			t.Errorf("target saw %s: %q, want %q", k, got, want)
		}
	}
	if e.Host != "shop.example:8443" {
		t.Errorf("target saw Host %q", e.Host)
	}
	id := e.Header.Get("X-Request-Id")
	if id == "" || r.hdr.Get("X-Request-Id") != id {
		t.Errorf("request ID: target %q, client %q", id, r.hdr.Get("X-Request-Id"))
	}
	r = get(t, c, "http://"+g.Addr()+"/echo", "X-Request-Id", "abc-123")
	if got := echo(t, r).Header.Get("X-Request-Id"); got != "abc-123" {
		t.Errorf("a client's request ID became %q", got)
	}
}

// Bodies pass through both paths; too large ones get 413 before reaching
// the target.
func TestBodies(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"max_body_size: 1KiB\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := client()
	url := "http://" + g.Addr() + "/echo"
	if e := echo(t, do(t, c, "POST", url, strings.NewReader("hello"))); e.Body != "hello" || e.Method != "POST" {
		t.Errorf("content-length body: %+v", e)
	}
	// A reader of unknown length makes the client send chunked (slow path).
	chunked := io.MultiReader(strings.NewReader("chunked "), strings.NewReader("body"))
	if e := echo(t, do(t, c, "POST", url, chunked)); e.Body != "chunked body" {
		t.Errorf("chunked body: %+v", e)
	}
	hits := b.hits.Load()
	if r := do(t, c, "POST", url, strings.NewReader(strings.Repeat("x", 2048))); r.code != 413 {
		t.Errorf("2KiB body with a 1KiB limit: %d", r.code)
	}
	big := io.MultiReader(strings.NewReader(strings.Repeat("y", 2048)))
	if r := do(t, c, "POST", url, big); r.code != 413 {
		t.Errorf("2KiB chunked body with a 1KiB limit: %d", r.code)
	}
	if b.hits.Load() != hits {
		t.Errorf("an oversized body reached the target")
	}
}

// A streamed response (server-sent events) reaches the client event by
// event, not when the target finishes.
func TestStreamingResponse(t *testing.T) {
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
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \"http://"+ln.Addr().String()+"\"}\n")
	res, err := client().Get("http://" + g.Addr() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		// The target writes the next event only after we saw this one.
		next <- struct{}{}
	}
}

// WebSocket upgrades are relayed both ways.
func TestWebSocket(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, append([]byte("echo: "), msg...))
		}
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \"http://"+ln.Addr().String()+"\"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+g.Addr()+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for i := range 3 {
		msg := fmt.Sprint("hello ", i)
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || string(got) != "echo: "+msg {
			t.Fatalf("got %q %v", got, err)
		}
	}
}

// h2c clients (HTTP/2 without TLS) and HTTP/1.0 clients are served.
func TestH2CAndHTTP10(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"h2c: true\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	res, err := h2.Get("http://" + g.Addr() + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != 200 || !bytes.Contains(body, []byte(`"X-Forwarded-For"`)) {
		t.Fatalf("h2c: %s %d %s", res.Proto, res.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", "http://"+g.Addr()+"/echo", nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	res, err = h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	var e echoed
	json.Unmarshal(body, &e)
	if got := e.Header.Get("X-Forwarded-For"); got != "203.0.113.9, 127.0.0.1" {
		t.Errorf("h2c: target saw X-Forwarded-For %q", got)
	}
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	all, _ := io.ReadAll(conn)
	if !bytes.HasPrefix(all, []byte("HTTP/1.0 200")) || !bytes.HasSuffix(all, []byte("b1")) {
		t.Fatalf("HTTP/1.0: %q", all)
	}
}

// TLS is served (HTTP/1.1 and HTTP/2 by ALPN) when configured.
func TestTLS(t *testing.T) {
	b := newBackend(t, "b1")
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	g := start(t, base+"tls: {cert_file: "+cert+", key_file: "+key+"}\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	res, err := c.Get("https://" + g.Addr() + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var e echoed
	json.Unmarshal(body, &e)
	if res.ProtoMajor != 2 || e.Header.Get("X-Forwarded-Proto") != "https" {
		t.Fatalf("TLS: %s, target saw proto %q", res.Proto, e.Header.Get("X-Forwarded-Proto"))
	}
}

// Routes match by host and path prefix, first match wins; no match is 404.
func TestRoutes(t *testing.T) {
	bs := backends(t, 3)
	g := start(t, base+`upstreams:
  api: {targets: [{url: "`+bs[0].url()+`"}]}
  static: {targets: [{url: "`+bs[1].url()+`"}]}
  shop: {targets: [{url: "`+bs[2].url()+`"}]}
routes:
  - {match: {host: "*.shop.example"}, upstream: shop}
  - {match: {path_prefix: /static/}, upstream: static}
  - {match: {host: api.example, path_prefix: /}, upstream: api}
`)
	c := client()
	cases := []struct{ host, path, want string }{
		{"eu.shop.example", "/static/x", "b3"},
		{"api.example", "/static/x", "b2"},
		{"api.example:8080", "/v1", "b1"},
		{"other.example", "/v1", ""},
	}
	for _, tc := range cases {
		r := get(t, c, "http://"+g.Addr()+tc.path, "Host", tc.host)
		if tc.want == "" {
			if r.code != 404 {
				t.Errorf("%s%s: %d, want 404", tc.host, tc.path, r.code)
			}
			continue
		}
		if r.body != tc.want {
			t.Errorf("%s%s went to %q, want %s", tc.host, tc.path, r.body, tc.want)
		}
	}
}

// A request no route matches is answered once: the next request on the
// same keep-alive connection is served as itself.
func TestNoRouteKeepsTheConnection(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+`upstreams:
  api: {targets: [{url: "`+b.url()+`"}]}
routes:
  - {match: {path_prefix: /api/}, upstream: api}
`)
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, want := range []struct {
		path string
		code int
	}{{"/nope", 404}, {"/api/x", 200}, {"/nope", 404}, {"/api/y", 200}} {
		if _, err := io.WriteString(c, "GET "+want.path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want.code {
			t.Fatalf("GET %s: %d, want %d", want.path, res.StatusCode, want.code)
		}
	}
}

// Matches on exact path, methods, headers and query pick the first route
// in file order that matches all its conditions, the same on the fast
// path and on net/http's (a chunked upload is handed over).
func TestRouteMatches(t *testing.T) {
	bs := backends(t, 5)
	g := start(t, base+`upstreams:
  exact: {targets: [{url: "`+bs[0].url()+`"}]}
  post: {targets: [{url: "`+bs[1].url()+`"}]}
  canary: {targets: [{url: "`+bs[2].url()+`"}]}
  v2: {targets: [{url: "`+bs[3].url()+`"}]}
  rest: {targets: [{url: "`+bs[4].url()+`"}]}
routes:
  - {match: {path: /api/health}, upstream: exact}
  - {match: {path_prefix: /api/, methods: [post, PUT]}, upstream: post}
  - {match: {path_prefix: /api/, headers: {X-Env: canary}}, upstream: canary}
  - {match: {path_prefix: /api/, headers: {X-Beta: "*"}, query: {v: "2"}}, upstream: v2}
  - {match: {path_prefix: /}, upstream: rest}
`)
	c := client()
	cases := []struct {
		method, path string
		hdr          []string
		want         string
	}{
		{"GET", "/api/health", nil, "b1"},
		{"GET", "/api/health/x", nil, "b5"},
		{"POST", "/api/health", nil, "b1"}, // the earlier route wins
		{"POST", "/api/orders", nil, "b2"},
		{"PUT", "/api/orders", []string{"X-Env", "canary"}, "b2"},
		{"GET", "/api/orders", []string{"X-Env", "canary"}, "b3"},
		{"GET", "/api/orders", []string{"x-env", "prod"}, "b5"},
		{"GET", "/api/orders?v=2", []string{"X-Beta", "yes"}, "b4"},
		{"GET", "/api/orders?a=1&v=2", []string{"X-Beta", ""}, "b4"},
		{"GET", "/api/orders?v=2", nil, "b5"},
		{"GET", "/api/orders?v=3", []string{"X-Beta", "1"}, "b5"},
	}
	for _, chunked := range []bool{false, true} {
		for _, tc := range cases {
			var body io.Reader
			if chunked {
				body = io.MultiReader(strings.NewReader("x")) // unknown length: chunked, served by net/http
			}
			r := do(t, c, tc.method, "http://"+g.Addr()+tc.path, body, tc.hdr...)
			if r.body != tc.want {
				t.Errorf("chunked %v: %s %s %v went to %q, want %s", chunked, tc.method, tc.path, tc.hdr, r.body, tc.want)
			}
		}
	}
}

// Status retries go to another target only when safe: GETs and small
// buffered bodies are retried; a streamed body is not.
func TestStatusRetriesOnlyWhenSafe(t *testing.T) {
	bs := backends(t, 2)
	bs[0].status.Store(503)
	g := start(t, base+"upstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+targets(bs)+"    retry: {attempts: 2, on: [503], buffer_body: 16}\n")
	c := client()
	url := "http://" + g.Addr() + "/"
	for range 4 {
		if r := get(t, c, url); r.code != 200 || r.body != "b2" {
			t.Fatalf("GET: %d %q, want retried to b2", r.code, r.body)
		}
	}
	for range 4 {
		if r := do(t, c, "POST", url, strings.NewReader("small"), "Idempotency-Key", "k1"); r.code != 200 {
			t.Fatalf("POST with an Idempotency-Key and a buffered body: %d, want retried to 200", r.code)
		}
	}
	// A POST without a key may have acted on b1: its 503 is relayed as
	// it is, never replayed on b2.
	b1 := bs[0].hits.Load()
	saw503 := 0
	for range 4 {
		r := do(t, c, "POST", url, strings.NewReader("small"))
		if r.code == 503 {
			saw503++
			if r.body != "b1" {
				t.Fatalf("the relayed 503 has body %q, want b1's own", r.body)
			}
		}
	}
	if saw503 != 2 || bs[0].hits.Load()-b1 != 2 {
		t.Fatalf("POSTs without a key: %d answered 503 and b1 got %d, want 2 and 2 (round robin, no replay)", saw503, bs[0].hits.Load()-b1)
	}
	saw503 = 0
	for range 4 {
		r := do(t, c, "POST", url, strings.NewReader(strings.Repeat("z", 100)), "Idempotency-Key", "k2")
		if r.code == 503 {
			saw503++
		}
	}
	if saw503 == 0 {
		t.Fatalf("a POST with a body too large to buffer was retried")
	}
	m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
	if !strings.Contains(m, `fulcrum_gateway_retries_total{reason="status",upstream="api"} `) ||
		strings.Contains(m, `fulcrum_gateway_retries_total{reason="status",upstream="api"} 0`+"\n") {
		t.Errorf("metrics lack status retries (the series exists from the start at 0; it must have counted)")
	}
}

// Retries stop at the budget: when every target fails, retries stay near
// budget x requests + the floor instead of multiplying the load.
func TestRetryBudget(t *testing.T) {
	bs := backends(t, 3)
	for _, b := range bs {
		b.status.Store(503)
	}
	g := start(t, base+"upstreams:\n  api:\n    targets:\n"+targets(bs)+"    retry: {attempts: 3, on: [503], budget: 0.1, min_per_second: 1}\n")
	c := client()
	const n = 400
	for range n {
		get(t, c, "http://"+g.Addr()+"/")
	}
	var hits int64
	for _, b := range bs {
		hits += b.hits.Load()
	}
	retries := hits - n
	// Allowed: 10% of requests plus 1/s over the 10s window.
	if max := int64(n/10 + 10); retries > max {
		t.Fatalf("%d retries for %d requests, budget allows %d", retries, n, max)
	}
	if retries == 0 {
		t.Fatalf("no retries at all")
	}
}

// A target that does not answer within response_header gets 504.
func TestResponseHeaderTimeout(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	defer close(hold)
	g := start(t, base+"timeouts: {response_header: 200ms}\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	if r := get(t, client(), "http://"+g.Addr()+"/"); r.code != http.StatusGatewayTimeout {
		t.Fatalf("got %d %q, want 504", r.code, r.body)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The access log has one JSON line per request with its request ID, on
// both paths.
func TestAccessLogJSON(t *testing.T) {
	b := newBackend(t, "b1")
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\naccess_log: {format: json}\nupstreams:\n  api:\n    targets:\n      - {url: \"" + b.url() + "\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuf
	g := startCfg(t, cfg, gateway.Options{AccessLog: &buf})
	c := client()
	get(t, c, "http://"+g.Addr()+"/a?x=1", "X-Request-Id", "req-fast")
	do(t, c, "POST", "http://"+g.Addr()+"/b", io.MultiReader(strings.NewReader("chunked")), "X-Request-Id", "req-slow")
	get(t, c, "http://"+g.Addr()+"/c", "Host", "x", "X-Request-Id", "req-404")
	testenv.Eventually(t, "three log lines", func() bool { return strings.Count(buf.String(), "\n") >= 3 })
	want := map[string]struct {
		path   string
		status float64
	}{"req-fast": {"/a?x=1", 200}, "req-slow": {"/b", 200}}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		w, ok := want[m["request_id"].(string)]
		if !ok {
			continue
		}
		if m["path"] != w.path || m["status"] != w.status || m["upstream"] != "api" || m["target"] != b.addr {
			t.Errorf("log line %v, want path %s status %v", m, w.path, w.status)
		}
		delete(want, m["request_id"].(string))
	}
	if len(want) > 0 {
		t.Errorf("no log lines for %v in:\n%s", want, buf.String())
	}
}

// oneShot is a target that answers one request per connection and then
// closes it without saying so: every pooled connection goes stale. Each
// close is sent on the returned channel.
func oneShot(t *testing.T) (string, <-chan struct{}) {
	closed := make(chan struct{}, 100)
	addr := serveRaw(t, func(c net.Conn) {
		defer func() { c.Close(); closed <- struct{}{} }()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	return addr, closed
}

// Connections the target closed while pooled are replaced without the
// client noticing: a GET (replayable) is sent again on a fresh one; a
// POST is sent only on a connection checked open first.
func TestStalePooledConnections(t *testing.T) {
	addr, closed := oneShot(t)
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \"http://"+addr+"\"}\n")
	c := client()
	for i := range 20 {
		var r resp
		if i%2 == 0 {
			r = get(t, c, "http://"+g.Addr()+"/")
		} else {
			r = do(t, c, "POST", "http://"+g.Addr()+"/", strings.NewReader("x"))
		}
		if r.code != 200 || r.body != "ok" {
			t.Fatalf("request %d: %d %q", i, r.code, r.body)
		}
		<-closed // the pooled connection is closed now
	}
}

// stuckWriter blocks every write until released, as an access log on a
// full pipe or a stalled disk would.
type stuckWriter struct {
	entered chan struct{} // one value per write that began
	release chan struct{}
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	s.entered <- struct{}{}
	<-s.release
	return len(p), nil
}

// The access line is written after the response has left: a stuck log
// delays the connection's next request (and, since the log's lines take
// turns, every other line), not the answer to this one, on success and on
// an answer the gateway makes itself.
func TestAccessLogDoesNotHoldTheResponse(t *testing.T) {
	b := newBackend(t, "b1")
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\nupstreams:\n  api:\n    targets:\n      - {url: \"" + b.url() + "\"}\n" +
		"  none:\n    targets:\n      - {url: \"" + b.url() + "\", disabled: true}\n" +
		"routes:\n  - {match: {path_prefix: /none}, upstream: none}\n  - {match: {path_prefix: /}, upstream: api}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := &stuckWriter{entered: make(chan struct{}, 4), release: make(chan struct{})}
	g := startCfg(t, cfg, gateway.Options{AccessLog: w})
	t.Cleanup(func() { close(w.release) }) // lines after the test's pass through
	for _, c := range []struct {
		path string
		code int
	}{{"/a", 200}, {"/none", 503}} {
		// A client of its own: the stuck write holds its connection.
		if r := get(t, client(), "http://"+g.Addr()+c.path); r.code != c.code {
			t.Fatalf("%s: got %d %q, want %d", c.path, r.code, r.body, c.code)
		}
		<-w.entered // the line is being written, after the answer came
		w.release <- struct{}{}
	}
}

// A split route sends each side its share, keeps a keyed client on one
// side on every transport, and counts each side's requests.
func TestSplitRoute(t *testing.T) {
	bs := backends(t, 2)
	g := start(t, base+`upstreams:
  v1: {targets: [{url: "`+bs[0].url()+`"}]}
  v2: {targets: [{url: "`+bs[1].url()+`"}]}
routes:
  - match: {path_prefix: /}
    split: [{upstream: v1, weight: 50}, {upstream: v2, weight: 50}]
    split_key: "header:X-User"
`)
	c := client()
	sides := map[string]int{}
	for u := range 40 {
		user := fmt.Sprint("u", u)
		first := ""
		for i := range 4 {
			var body io.Reader
			if i%2 == 1 {
				body = io.MultiReader(strings.NewReader("x")) // chunked: net/http's path
			}
			r := do(t, c, "POST", "http://"+g.Addr()+"/", body, "X-User", user)
			if first == "" {
				first = r.body
			}
			if r.code != 200 || r.body != first {
				t.Fatalf("user %s: request %d went to %q (%d), the first to %q", user, i, r.body, r.code, first)
			}
		}
		sides[first]++
	}
	if sides["b1"] == 0 || sides["b2"] == 0 {
		t.Fatalf("40 users on a 50/50 split: %v", sides)
	}
	m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
	for _, up := range []string{"v1", "v2"} {
		if !strings.Contains(m, `fulcrum_gateway_split_requests_total{route="0",upstream="`+up+`"}`) {
			t.Errorf("metrics lack side %s's requests", up)
		}
	}
}
