package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// One connection carries, pipelined in one write, a request the event
// loop serves, a chunked upload it hands over to the goroutine path with
// the bytes already read, and a request after it: all three are answered,
// in order, with their bodies intact. (Without the loop the same bytes
// take the goroutine path alone; the test holds either way.)
func TestPipelineAcrossTheHandOver(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"+
		"GET /third HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	for i, want := range []string{"b1", "hello world", "b1"} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got := string(body)
		if i == 1 {
			var echo struct{ Body string }
			if err := json.Unmarshal(body, &echo); err != nil {
				t.Fatalf("response 2: %v in %q", err, body)
			}
			got = echo.Body
		}
		if res.StatusCode != 200 || got != want {
			t.Fatalf("response %d: %d %q, want 200 %q", i+1, res.StatusCode, got, want)
		}
	}
}

// A request whose head arrives a byte at a time, and a body in pieces,
// is served whole: the loop keeps partial heads and bodies across reads.
func TestRequestInPieces(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	head := "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n"
	for i := range len(head) {
		if _, err := c.Write([]byte{head[i]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, part := range []string{"hel", "lo wo", "rld"} {
		if _, err := io.WriteString(c, part); err != nil {
			t.Fatal(err)
		}
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), `"body":"hello world"`) {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
}

// A head answers the same whether it comes in one write or a byte at a
// time: the search for its end goes on across reads without missing an
// end that straddles two of them (CRLF CRLF, bare LF LF, mixed) or
// finding one that is not there.
func TestHeadInPiecesAnswersAsWhole(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	heads := []string{
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /b HTTP/1.1\nHost: x\n\n",
		"GET /c HTTP/1.1\r\nHost: x\n\n",
		"GET /d HTTP/1.1\r\nHost: x\r\n\n",
		"GET /e HTTP/1.1\r\nHost: x\r\nX-A: \r\r\n\r\n",
		"GET /f HTTP/1.1\r\nHost: x\r\nX-A: a\r\n \r\n\r\n",
	}
	status := func(head string, trickle bool) int {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if trickle {
			for i := range len(head) {
				if _, err := c.Write([]byte{head[i]}); err != nil {
					t.Fatal(err)
				}
			}
		} else if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, h := range heads {
		whole, pieces := status(h, false), status(h, true)
		if whole != pieces {
			t.Errorf("%q: %d in one write, %d a byte at a time", h, whole, pieces)
		}
	}
}
