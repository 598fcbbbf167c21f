package gateway_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
)

// rawUpstream answers every request with the same 2-byte response from
// fixed buffers, so it allocates nothing per request itself.
func rawUpstream(t testing.TB) string {
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
	t.Logf("event loops: %d", g.EventLoops())
	if runtime.GOOS == "linux" && os.Getenv("FULCRUM_GATEWAY_EVENT_LOOP") != "off" && g.EventLoops() == 0 {
		t.Fatal("no event loop on Linux: the loop's allocations are not what this measures")
	}
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	per := allocsPerRequest(t, c)
	t.Logf("%.3f allocations per request", per)
	if per > 0.05 {
		t.Fatalf("%.2f allocations per request, want none", per)
	}
}

// allocsPerRequest sends requests on c, each answered "ok", and returns
// the process's allocations per request in steady state.
func allocsPerRequest(t *testing.T, c io.ReadWriter) float64 {
	t.Helper()
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
	return float64(after.Mallocs-before.Mallocs) / n
}

// Over TLS the fast path allocates nothing per request either, beyond
// what crypto/tls itself does: the same client against a bare TLS server
// answering from fixed buffers sets the baseline (crypto/tls allocates a
// 24-byte reader per record read, one on each side of a request in Go
// 1.26), and the gateway in between must add nothing to it.
func TestFastPathOverTLSAllocatesNothingPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's bookkeeping allocates")
	}
	cert, key := selfSigned(t, t.TempDir())
	g := start(t, base+"tls: {cert_file: "+cert+", key_file: "+key+"}\nupstreams:\n  api:\n    targets:\n      - {url: \"http://"+rawUpstream(t)+"\"}\n")
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		res := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		buf := make([]byte, 8<<10)
		for { // one request per read: the client sends the next after the answer
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write(res); err != nil {
				return
			}
		}
	}()
	per := func(addr string) float64 {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return allocsPerRequest(t, c)
	}
	bare, via := per(ln.Addr().String()), per(g.Addr())
	t.Logf("%.3f allocations per request through the gateway, %.3f with a bare TLS server (crypto/tls's own)", via, bare)
	if via-bare > 0.05 {
		t.Fatalf("the gateway adds %.2f allocations per request over TLS, want none", via-bare)
	}
}
