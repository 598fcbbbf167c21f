// Package relaytest checks an event-loop proxy prototype end to end: real
// upstreams over loopback, requests over one keep-alive client
// connection.
package relaytest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Upstreams starts n upstreams answering "<name> <method> <body>" with an
// X-Upstream header and the X-Forwarded-For they got; it returns their
// host:port addresses.
func Upstreams(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for i := range n {
		name := fmt.Sprintf("u%d", i+1)
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("X-Upstream", name)
			w.Header().Set("X-Got-Forwarded-For", r.Header.Get("X-Forwarded-For"))
			out := fmt.Sprintf("%s %s %s", name, r.Method, body)
			// Content-Length, as the prototypes relay no chunked body.
			w.Header().Set("Content-Length", strconv.Itoa(len(out)))
			_, _ = io.WriteString(w, out)
		}))
		t.Cleanup(s.Close)
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	return addrs
}

// WaitUp waits until addr accepts connections.
func WaitUp(t *testing.T, addr string) {
	t.Helper()
	testenv.Eventually(t, "proxy listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// Exchange sends, over one client connection, GET, a POST whose body is
// larger than the prototypes' read buffers, and GET again, and checks
// each answer, that the two upstreams alternate (round robin) and that
// the upstream saw X-Forwarded-For.
func Exchange(t *testing.T, proxy string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	var seen []string
	for i, body := range [][]byte{nil, big, nil} {
		method := http.MethodGet
		if body != nil {
			method = http.MethodPost
		}
		req, _ := http.NewRequest(method, "http://"+proxy+"/x", bytes.NewReader(body))
		if err := req.Write(c); err != nil {
			t.Fatalf("request %d: write: %v", i, err)
		}
		res, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("request %d (%s): read response: %v", i, method, err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("request %d: body: %v", i, err)
		}
		up := res.Header.Get("X-Upstream")
		if want := up + " " + method + " " + string(body); res.StatusCode != 200 || string(got) != want {
			t.Fatalf("request %d: %d %q (%d bytes), want 200 with %d bytes %.40q", i, res.StatusCode, got[:min(len(got), 40)], len(got), len(want), want)
		}
		if xff := res.Header.Get("X-Got-Forwarded-For"); xff != "127.0.0.1" {
			t.Errorf("request %d: upstream got X-Forwarded-For %q, want 127.0.0.1", i, xff)
		}
		seen = append(seen, up)
	}
	if seen[0] == seen[1] || seen[1] == seen[2] {
		t.Errorf("upstreams %v, want round robin over two", seen)
	}
}
