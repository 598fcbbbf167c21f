package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// bigBody is a response larger than buffering.memory and than the
// kernel's socket buffers on loopback (autotuned up to a few MiB each
// way), so a client that does not read it stalls the relay unless the
// gateway spools it.
var bigBody = func() []byte {
	b := make([]byte, 32<<20)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(b)
	return b
}()

// bigServer answers /big with bigBody and anything else with "ok"; done
// counts the /big answers written in full.
func bigServer(t *testing.T) (addr string, done *atomic.Int64) {
	done = new(atomic.Int64)
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
			if _, err := w.Write(bigBody); err == nil {
				done.Add(1)
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), done
}

func startTestGateway(t *testing.T, text string) *Gateway {
	t.Helper()
	g := newTestGateway(t, text)
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	return g
}

// stalledClient sends GET path and reads nothing.
func stalledClient(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

func inFlight(g *Gateway) int64 {
	var n int64
	for _, u := range g.Upstreams() {
		for _, tv := range u.Targets {
			n += tv.InFlight
		}
	}
	return n
}

func openConns(g *Gateway) int {
	g.connMu.Lock()
	defer g.connMu.Unlock()
	return len(g.conns) + int(g.loopConns.Load())
}

// readResponse reads one response off c and returns its status and a
// digest of its body.
func readResponse(t *testing.T, c net.Conn) (int, [32]byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, res.Body); err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return res.StatusCode, sum
}

// Clients that request a large response and never read it hold no
// permit: the gateway reads the whole response from the target (memory,
// then a temporary file), the permit goes back, and everyone else is
// served; each stalled client still gets its whole response when it reads.
func TestStalledClientsHoldNoPermit(t *testing.T) {
	up, done := bigServer(t)
	g := startTestGateway(t,
		"buffering: {temp_dir: "+strconv.Quote(t.TempDir())+"}\n"+
			"upstreams:\n  api:\n    targets: [{url: \"http://"+up+"\", max_concurrency: 2}]\n"+
			"    queue: {max_wait: 10s}\n")
	var stalled []net.Conn
	for range 4 { // twice the permits: each waits for one, then lets it go
		stalled = append(stalled, stalledClient(t, g.Addr(), "/big"))
	}
	// Every stalled request took a permit (the queue served all four);
	// none holds one now.
	testenv.Eventually(t, "the stalled clients' permits back", func() bool {
		return done.Load() == 4 && inFlight(g) == 0
	})
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 20 {
		res, err := c.Get("http://" + g.Addr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d beside stalled clients: %d %q", i, res.StatusCode, body)
		}
	}
	want := sha256.Sum256(bigBody)
	for i, sc := range stalled {
		if code, sum := readResponse(t, sc); code != 200 || sum != want {
			t.Fatalf("stalled client %d: status %d, body intact %v", i, code, sum == want)
		}
	}
}

// A client that stops reading loses its connection after timeouts.send.
func TestSendTimeoutEndsAStalledClient(t *testing.T) {
	up, done := bigServer(t)
	g := startTestGateway(t,
		"timeouts: {send: 200ms}\nbuffering: {temp_dir: "+strconv.Quote(t.TempDir())+"}\n"+
			"upstreams:\n  api:\n    targets: [{url: \"http://"+up+"\"}]\n")
	sc := stalledClient(t, g.Addr(), "/big")
	testenv.Eventually(t, "the gateway to serve the request", func() bool { return done.Load() == 1 })
	testenv.Eventually(t, "the stalled connection closed", func() bool { return openConns(g) == 0 })
	_ = sc.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.Copy(io.Discard, sc)
	if int(got) >= len(bigBody) {
		t.Fatalf("a client past its send timeout got the whole response (%d bytes, %v)", got, err)
	}
}

// A connection that never sends a byte is closed at read_header, not at
// idle.
func TestSilentConnectionClosedAtReadHeader(t *testing.T) {
	up, _ := bigServer(t)
	g := startTestGateway(t,
		"timeouts: {read_header: 100ms, idle: 1h}\n"+
			"upstreams:\n  api:\n    targets: [{url: \"http://"+up+"\"}]\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Far below idle: a close here can only be read_header's.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent connection: read %d, %v; want EOF at read_header", n, err)
	}
	// A keep-alive connection between requests keeps idle.
	c2, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	br := bufio.NewReader(c2)
	for i := range 2 {
		if _, err := io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on a kept-alive connection: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if i == 0 {
			// Past read_header between requests: still open.
			time.Sleep(300 * time.Millisecond)
		}
	}
}

// Past buffering.memory with no temporary file, the rest is relayed at
// the client's pace, intact; streamed paths and X-Accel-Buffering: no go
// out as they come.
func TestBufferingLimitsAndStreams(t *testing.T) {
	next := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(bigBody) })
	stream := func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}
	mux.HandleFunc("/poll/", stream)
	mux.HandleFunc("/accel", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Accel-Buffering", "no")
		stream(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	g := startTestGateway(t,
		"buffering: {memory: 4KiB, max_temp_file: 0, stream_paths: [/poll/]}\n"+
			"upstreams:\n  api:\n    targets: [{url: \"http://"+ln.Addr().String()+"\"}]\n")

	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, sum := readResponse(t, c); code != 200 || sum != sha256.Sum256(bigBody) {
		t.Fatalf("past the buffer limits: status %d, body intact %v", code, sum == sha256.Sum256(bigBody))
	}

	for _, path := range []string{"/poll/a", "/accel"} {
		res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + g.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		if h := res.Header.Get("X-Accel-Buffering"); h != "" {
			t.Errorf("%s: X-Accel-Buffering %q reached the client; it is for the proxy", path, h)
		}
		br := bufio.NewReader(res.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("part %d\n", i) {
				t.Fatalf("%s part %d: %q %v", path, i, line, err)
			}
			next <- struct{}{} // the target sends the next part only after this one arrived
		}
		rest, _ := io.ReadAll(br)
		res.Body.Close()
		if len(bytes.TrimSpace(rest)) != 0 {
			t.Fatalf("%s: trailing %q", path, rest)
		}
	}
}

func TestBufferingConfigErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"buffering: {memory: 1KiB}\n", "buffering.memory"},
		{"buffering: {temp_dir: /nonexistent/dir}\n", "buffering.temp_dir"},
		{"buffering: {stream_paths: [events]}\n", "buffering.stream_paths[0]"},
	} {
		_, err := config.Parse([]byte(tc.text + "upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.text, err, tc.want)
		}
	}
}
