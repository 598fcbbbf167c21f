package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway/demo"
)

// BenchmarkProxy compares the gateway with httputil.ReverseProxy in the
// same run: keep-alive clients on raw connections (so the client's cost is
// small and equal for both) send GETs through the proxy to three demo
// upstreams, round robin.
//
//	go test -run XXX -bench Proxy -benchmem ./gateway/
func BenchmarkProxy(b *testing.B) {
	us, err := demo.StartAll([]string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer demo.CloseAll(us)

	b.Run("fulcrum", func(b *testing.B) {
		var ts bytes.Buffer
		for _, u := range us {
			fmt.Fprintf(&ts, "      - {url: \"http://%s\"}\n", u.Addr)
		}
		g := start(b, base+"upstreams:\n  api:\n    targets:\n"+ts.String())
		hammer(b, g.Addr())
	})
	b.Run("httputil", func(b *testing.B) {
		var n atomic.Uint64
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: us[n.Add(1)%3].Addr})
			pr.SetXForwarded()
		}}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: rp}
		go srv.Serve(ln)
		defer srv.Close()
		hammer(b, ln.Addr().String())
	})
}

// hammer sends b.N GETs over 16 keep-alive connections.
func hammer(b *testing.B, addr string) {
	b.SetParallelism(8) // 8 x GOMAXPROCS connections
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req := []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			if err := readResponse(br); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// readResponse reads one response with a Content-Length body.
func readResponse(br *bufio.Reader) error {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if bytes.HasPrefix(bytes.ToLower(line), []byte("content-length:")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
	}
	if n < 0 {
		return fmt.Errorf("no content-length")
	}
	_, err := io.CopyN(io.Discard, br, int64(n))
	return err
}
