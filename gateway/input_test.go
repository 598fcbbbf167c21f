package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Malformed and ambiguous requests, sent on a raw socket, get the status
// RFC 9110/9112 calls for and never reach the target (a recording
// backend counts what arrives). A well-formed request on a fresh
// connection after each proves the backend was reachable all along.
func TestStrictInputNothingForwarded(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	cases := []struct {
		name, req string
		code      int
	}{
		{"NUL in target", "GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"0x01 in target", "GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"DEL in target", "GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"TAB in target", "GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"VT in target", "GET /a\vb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"ESC in target", "GET /a\x1bb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"CR in target", "GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"bad escape in the path", "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"cut escape in the path", "GET /a% HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"0x01 in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n", 400},
		{"DEL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n", 400},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400},
		{"ESC in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x1bb\r\n\r\n", 400},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
		{"CTL in Host", "GET / HTTP/1.1\r\nHost: x\x01y\r\n\r\n", 400},
		{"two different Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
		{"Content-Length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello", 400},
		{"signed Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400},
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n", 400},
		{"obsolete line folding", "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  2\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"bad version", "GET / HTTP/1.2\r\nHost: x\r\n\r\n", 400},
		{"method not a token", "G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"head too large", "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := b.hits.Load()
			c, err := net.Dial("tcp", g.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			res.Body.Close()
			if res.StatusCode != tc.code {
				t.Errorf("status %d, want %d", res.StatusCode, tc.code)
			}
			if r := get(t, client(), "http://"+g.Addr()+"/"); r.code != 200 {
				t.Fatalf("a good request after it: %d", r.code)
			}
			if got := b.hits.Load() - before; got != 1 {
				t.Errorf("the backend got %d requests, want only the good one", got)
			}
		})
	}
}

// HTAB inside a value is allowed, and a Content-Length repeated with the
// same value is forwarded once.
func TestStrictInputAccepted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heads := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var head strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" {
				break
			}
		}
		io.CopyN(io.Discard, br, 5)
		heads <- head.String()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}()
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \"http://"+ln.Addr().String()+"\"}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	head := <-heads
	if n := strings.Count(head, "Content-Length: 5\r\n"); n != 1 {
		t.Errorf("Content-Length forwarded %d times:\n%s", n, head)
	}
	if !strings.Contains(head, "X-A: a\tb\r\n") {
		t.Errorf("the value with a tab was not forwarded as is:\n%s", head)
	}
}

// A refused request whose body is still arriving gets its answer: the
// gateway half-closes and reads on (lingering close, as nginx does)
// instead of closing with the body unread, which makes the kernel reset
// the connection: the client's send then fails, and a reset can destroy
// the answer before the client reads it.
func TestRefusalSurvivesUnreadBody(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"max_body_size: 1KiB\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	// 8 MiB: more than loopback's socket buffers hold, so that most of
	// it is sent after the answer (with 1 MiB the old code passed too).
	body := strings.Repeat("x", 8<<20)
	cases := []struct {
		name, head string
		code       string
	}{
		{"body over max_body_size", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n\r\n", "413"},
		{"malformed head", "POST /echo HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\nContent-Length: 8388608\r\n\r\n", "400"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", g.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			// Head and body in one write, so that the body is waiting
			// unread when the gateway answers. A client that sends all
			// before it reads (most simple ones) sees a reset instead of
			// the answer if that write fails.
			if _, err := io.WriteString(c, tc.head+body); err != nil {
				t.Fatalf("sending the body: %v", err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the %s: %v", tc.code, err)
			}
			got, err := io.ReadAll(res.Body)
			if err != nil || !strings.HasPrefix(res.Status, tc.code) {
				t.Fatalf("got %q, body %q, err %v; want %s", res.Status, got, err, tc.code)
			}
		})
	}
	if n := b.hits.Load(); n != 0 {
		t.Errorf("%d refused requests reached the target", n)
	}
}

// Lingering is bounded, and it waits for a slow client, not a fast one.
func TestLingeringIsBounded(t *testing.T) {
	g := start(t, base+"max_body_size: 1KiB\nupstreams:\n  api:\n    targets:\n      - {url: \"http://127.0.0.1:1\"}\n")
	refused := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != 413 {
			t.Fatalf("answer: %v %v", res, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		return c
	}
	// A client that goes on sending is cut off once the gateway has
	// thrown away 16 MiB (it would otherwise read on for the whole
	// linger time, gigabytes on loopback).
	t.Run("fast sender", func(t *testing.T) {
		c := refused(t)
		chunk := make([]byte, 64<<10)
		sent := 0
		for ; sent < 256<<20; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				break
			}
		}
		if sent >= 256<<20 {
			t.Fatalf("the gateway read %d MiB of a refused body", sent>>20)
		}
	})
	// One that sends a little at a time, never silent for the idle limit,
	// is read from: its sends succeed (a per-64 KiB deadline cut it off).
	t.Run("slow sender", func(t *testing.T) {
		c := refused(t)
		chunk := make([]byte, 4<<10) // 40 KiB/s: no read of 64 KiB fills within the idle limit
		for i := range 20 {
			if _, err := c.Write(chunk); err != nil {
				t.Fatalf("send %d, %d ms after the answer: %v", i, i*100, err)
			}
			time.Sleep(100 * time.Millisecond) // the client's pace, not a wait for the gateway
		}
	})
}

// Shutdown does not wait for a lingering connection: a client that trickles
// its refused body for longer than the linger time does not hold the drain
// past its deadline.
func TestShutdownEndsLingering(t *testing.T) {
	g := start(t, base+"max_body_size: 1KiB\nupstreams:\n  api:\n    targets:\n      - {url: \"http://127.0.0.1:1\"}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 413 {
		t.Fatalf("answer: %v %v", res, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	stop := make(chan struct{})
	trickled := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				trickled <- nil
				return
			case <-time.After(50 * time.Millisecond): // the client's pace
			}
			if _, err := c.Write(make([]byte, 1024)); err != nil {
				trickled <- err
				return
			}
		}
	}()
	// Lingering has begun once the gateway half-closed: EOF after the 413.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // under the 5 s linger time
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown waited for the lingering connection: %v", err)
	}
	close(stop)
	<-trickled
}
