package gateway_test

import (
	"bytes"
	"net"
	"runtime"
	"testing"
)

// rawUpstream answers every request with the same 2-byte response from
// fixed buffers, so it allocates nothing per request itself.
func rawUpstream(t *testing.T) string {
	res := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	return serveRaw(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 8<<10)
		n := 0
		for {
			k, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += k
			for {
				i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if i < 0 {
					break
				}
				if _, err := c.Write(res); err != nil {
					return
				}
				n = copy(buf, buf[i+4:n])
			}
		}
	})
}

// The fast path allocates nothing per request in steady state: the
// whole process (gateway, a raw client and a raw upstream, both
// allocation-free) makes well under one allocation per 20 requests.
func TestFastPathAllocatesNothingPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's bookkeeping allocates")
	}
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \"http://"+rawUpstream(t)+"\"}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: fixed\r\n\r\n")
	buf := make([]byte, 4<<10)
	one := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		n := 0
		for !bytes.HasSuffix(buf[:n], []byte("\r\n\r\nok")) {
			k, err := c.Read(buf[n:])
			if err != nil { // EOF too: the gateway closed the connection (it spun here)
				t.Fatal(err)
			}
			n += k
		}
	}
	for range 500 { // warm: pools, buffers, metric children
		one()
	}
	const n = 4000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		one()
	}
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.3f allocations per request", per)
	if per > 0.05 {
		t.Fatalf("%.2f allocations per request, want none", per)
	}
}
