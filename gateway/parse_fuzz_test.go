package gateway

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// FuzzParseForward checks the parser and the head it forwards against
// net/http: whatever the fast path would forward, net/http must read as
// the same request (method, target, host, body length, every forwarded
// field with its value). The f.Add seeds run under plain `go test`.
func FuzzParseForward(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a?b=c HTTP/1.1\r\nHost: x:80\r\nX-A: 1\r\nX-B:  two words \r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nX-Request-Id: abc\r\n\r\n",
		"GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\n\r\n",
		"GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	cc := &clientConn{g: &Gateway{ridPrefix: "fuzz"}, ip: []byte("127.0.0.1")}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The head as the reader cuts it: up to a blank line, CRLF or
		// bare LF.
		var head []byte
		if end := bytes.Index(data, []byte("\r\n\r\n")); end >= 0 {
			head = data[:end+4]
		}
		if end := bytes.Index(data, []byte("\n\n")); end >= 0 && (head == nil || end+2 < len(head)) {
			head = data[:end+2]
		}
		if head == nil {
			return
		}
		var r h1.Request
		if err := h1.ParseRequest(head, &r); err != nil {
			return // refused: nothing forwarded
		}
		if !fastPathServes(&r) {
			return // handed to net/http, which parses for itself
		}
		cc.buildHead(&r, nil)
		got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(cc.out)))
		if err != nil {
			t.Fatalf("net/http cannot read what we forward: %v\nin:  %q\nout: %q", err, head, cc.out)
		}
		if got.Method != string(r.Method) || got.RequestURI != string(r.URI) || got.Host != string(r.Host) {
			t.Fatalf("net/http reads %s %s host %q, we parsed %s %s host %q\nout: %q", got.Method, got.RequestURI, got.Host, r.Method, r.URI, r.Host, cc.out)
		}
		wantLen := max(r.ContentLength, 0)
		if got.ContentLength != wantLen && !(wantLen == 0 && got.ContentLength == -1) {
			t.Fatalf("net/http reads body length %d, we parsed %d\nout: %q", got.ContentLength, r.ContentLength, cc.out)
		}
		// Every field we kept arrives with the value we parsed.
		for _, h := range r.Headers {
			name := http.CanonicalHeaderKey(string(h.Name))
			if h1.IsHopByHop(h.Name) || (r.ConnTokens && h1.HasToken(r.Conn, h.Name)) {
				if _, ok := got.Header[name]; ok && !strings.EqualFold(name, "Connection") {
					t.Fatalf("hop-by-hop %s forwarded\nout: %q", name, cc.out)
				}
				continue
			}
			switch name {
			case "Host", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Content-Length":
				continue
			}
			found := false
			for _, v := range got.Header[name] {
				found = found || v == string(h.Value)
			}
			if !found {
				t.Fatalf("%s: %q parsed, net/http reads %q\nout: %q", name, h.Value, got.Header[name], cc.out)
			}
		}
	})
}
