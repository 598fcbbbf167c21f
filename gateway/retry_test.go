package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// badTarget misbehaves on every request in one way: "refuse" (nothing
// listens), "reset" (reads the whole request, then resets the
// connection), "503" (answers 503), "503stall" (answers 503 and only
// part of its body), "101" (switches to protocol foo, whatever was
// asked) or "hang" (reads it and never answers). n counts the requests
// that reached it.
type badTarget struct {
	addr string
	n    atomic.Int64
}

func newBadTarget(t *testing.T, mode string) *badTarget {
	b := &badTarget{}
	if mode == "refuse" {
		b.addr = refusingAddr(t)
		return b
	}
	b.addr = serveRaw(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			b.n.Add(1)
			switch mode {
			case "reset":
				c.(*net.TCPConn).SetLinger(0)
				return
			case "503":
				io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 3\r\n\r\nbad")
			case "503stall":
				io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\nbad")
				io.Copy(io.Discard, c) // the rest of the body never comes
				return
			case "101":
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n")
				io.Copy(io.Discard, c)
				return
			case "hang":
				io.Copy(io.Discard, c)
				return
			}
		}
	})
	return b
}

// The retry decision, as a table both transports run: the first target
// (round robin's first pick) fails in one way, the second answers. What
// may go to the second target is the replay rule: nothing written to
// the first, or a replayable request (idempotent method or
// Idempotency-Key, and a body sent from the buffer). A retried status
// needs the latter; a timeout is retried only when retry.on lists it.
func TestRetryDecisionTable(t *testing.T) {
	type req struct {
		method, key string
		body        int // bytes; buffer_body is 16
	}
	get := req{"GET", "", 0}
	post := req{"POST", "", 5}
	postKey := req{"POST", "k", 5}
	bigPost := req{"POST", "k", 100}
	put := req{"PUT", "", 5}
	cases := []struct {
		mode    string
		r       req
		code    int    // what the client gets
		reached int64  // requests the second target got
		reason  string // the body's reason, for a gateway-made answer
	}{
		{"refuse", get, 200, 1, ""},
		{"refuse", post, 200, 1, ""},
		{"refuse", bigPost, 200, 1, ""},
		{"reset", get, 200, 1, ""},
		{"reset", put, 200, 1, ""},
		{"reset", post, 502, 0, "reset"},
		{"reset", postKey, 200, 1, ""},
		{"reset", bigPost, 502, 0, "reset"},
		{"503", get, 200, 1, ""},
		{"503", post, 503, 0, ""},
		{"503", postKey, 200, 1, ""},
		{"503", bigPost, 503, 0, ""},
		{"503stall", get, 200, 1, ""},
		{"503stall", postKey, 200, 1, ""},
		{"hang", get, 504, 0, "timeout"},
		{"hang", post, 504, 0, "timeout"},
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	transports := map[string]*http.Client{
		"fast":     client(),
		"net/http": {Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}, // h2c: served by net/http
	}
	for tname, c := range transports {
		for _, tc := range cases {
			name := fmt.Sprintf("%s/%s/%s%s-%d", tname, tc.mode, tc.r.method, tc.r.key, tc.r.body)
			t.Run(name, func(t *testing.T) {
				bad := newBadTarget(t, tc.mode)
				good := newBackend(t, "good")
				g := start(t, base+"h2c: true\ntimeouts: {response_header: 300ms}\nupstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+
					"      - {url: \"http://"+bad.addr+"\"}\n      - {url: \""+good.url()+"\"}\n"+
					"    retry: {attempts: 2, on: [connect_error, 503], buffer_body: 16}\n")
				var body io.Reader
				if tc.r.body > 0 {
					body = strings.NewReader(strings.Repeat("x", tc.r.body))
				}
				hdr := []string{}
				if tc.r.key != "" {
					hdr = append(hdr, "Idempotency-Key", tc.r.key)
				}
				r := do(t, c, tc.r.method, "http://"+g.Addr()+"/", body, hdr...)
				if r.code != tc.code {
					t.Errorf("status %d %q, want %d", r.code, r.body, tc.code)
				}
				if got := good.hits.Load(); got != tc.reached {
					t.Errorf("the second target got %d requests, want %d", got, tc.reached)
				}
				if tc.mode != "refuse" && bad.n.Load() != 1 {
					t.Errorf("the first target got %d requests, want 1", bad.n.Load())
				}
				if tc.reason != "" && !strings.Contains(r.body, ": "+tc.reason) {
					t.Errorf("body %q lacks the reason %q", r.body, tc.reason)
				}
			})
		}
	}
}

// A retry the rule allows but the budget refuses answers with reason
// budget: with every target refusing connections, retries are allowed
// while fewer than 1% of the requests plus a floor of 10 (1/s over the
// 10 s window) were made, so the first 11 requests are retried (and fail
// with connect_error) and the other 19 say budget.
func TestBudgetReason(t *testing.T) {
	a, b := newBadTarget(t, "refuse"), newBadTarget(t, "refuse")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \"http://"+a.addr+"\"}\n      - {url: \"http://"+b.addr+"\"}\n"+
		"    retry: {attempts: 2, budget: 0.01, min_per_second: 1}\n")
	c := client()
	reasons := map[string]int{}
	for range 30 {
		r := get(t, c, "http://"+g.Addr()+"/")
		reasons[r.body]++
	}
	if reasons["Bad Gateway: connect_error\n"] != 11 || reasons["Bad Gateway: budget\n"] != 19 {
		t.Fatalf("answers %v, want 11 connect_error and 19 budget", reasons)
	}
}

// A 101 the request did not ask for, or to another protocol than it
// asked for, is a bad gateway on both transports, and the pick ends (its
// permit back) before the client has the answer. Before, the fast path
// relayed the 101 and pooled the switched connection, and net/http's
// ReverseProxy refused it without closing the body, so the pick never
// ended: in_flight stayed 1 for good.
func TestUnaskedSwitchingProtocols(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	cases := []struct {
		name string
		send func(t *testing.T, addr string) int
	}{
		{"fast", func(t *testing.T, addr string) int { return get(t, client(), "http://"+addr+"/").code }},
		{"net/http", func(t *testing.T, addr string) int { return get(t, h2c, "http://"+addr+"/").code }},
		{"websocket asked", func(t *testing.T, addr string) int {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := newBadTarget(t, "101")
			g := start(t, base+"h2c: true\nupstreams:\n  api:\n    targets: [{url: \"http://"+bad.addr+"\"}]\n")
			if code := tc.send(t, g.Addr()); code != 502 {
				t.Errorf("status %d, want 502", code)
			}
			if tv, ok := view(t, g, "api")["http://"+bad.addr]; !ok || tv.InFlight != 0 {
				t.Errorf("in_flight %d (listed %v) after the answer, want 0", tv.InFlight, ok)
			}
		})
	}
}

// A client that leaves the net/http path (its request's context ends)
// is no failure of the target, waiting for the response head or reading
// its body, and is not retried on another: with max_failures 1, two
// clients that give up leave both targets with no failure and in
// rotation (before, each counted as a failure of the target it waited
// on, ejecting it, and the GET waiting for a head was retried on the
// other target, failing there too).
func TestClientLeavingNetHTTPIsNoTargetFailure(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &p}}
	arrived := make(chan struct{}, 2)
	slow := func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/body" { // a head and part of the body, then nothing
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
		}
		arrived <- struct{}{}
		io.Copy(io.Discard, c)
	}
	urls := []string{"http://" + serveRaw(t, slow), "http://" + serveRaw(t, slow)}
	g := start(t, base+"h2c: true\nupstreams:\n  api:\n    targets: [{url: \""+urls[0]+"\"}, {url: \""+urls[1]+"\"}]\n"+
		"    health: {passive: {max_failures: 1}}\n")
	for _, path := range []string{"/head", "/body"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.Addr()+path, nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if res, err := h2c.Do(req); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
		<-arrived
		cancel()
		<-done
		testenv.Eventually(t, "the gateway ends the picks of "+path, func() bool {
			v := view(t, g, "api")
			return v[urls[0]].InFlight == 0 && v[urls[1]].InFlight == 0
		})
	}
	for _, u := range urls {
		if tv := view(t, g, "api")[u]; tv.Failures != 0 || tv.Ejected {
			t.Errorf("%s after two clients left: %d failures, ejected %v; want none", u, tv.Failures, tv.Ejected)
		}
	}
}
