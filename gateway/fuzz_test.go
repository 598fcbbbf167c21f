package gateway_test

import (
	"net"
	"testing"
	"time"
)

// FuzzClientBytes throws arbitrary bytes at a running gateway: whatever a
// client sends, the gateway neither crashes nor stops serving others.
func FuzzClientBytes(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: y\r\nConnection: close\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\n\r\n",
		"\x00\x01\x02garbage\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	b := newBackend(f, "b1")
	g := start(f, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(data)
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		c.Close()
		if r := get(t, client(), "http://"+g.Addr()+"/"); r.code != 200 {
			t.Fatalf("after %q the gateway answered %d", data, r.code)
		}
	})
}
