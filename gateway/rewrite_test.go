package gateway_test

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Rewrites, header changes and redirects apply the same way on the fast
// path, on net/http's own exchange (a chunked upload) and over HTTP/2.
func TestRouteRewritesAndHeaders(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("Cache-Control", "public")
		json.NewEncoder(w).Encode(map[string]any{"uri": r.RequestURI, "header": r.Header})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cert, key := selfSigned(t, t.TempDir())
	g := start(t, base+"tls: {cert_file: "+cert+", key_file: "+key+"}\n"+`upstreams:
  api: {targets: [{url: "http://`+ln.Addr().String()+`"}]}
routes:
  - match: {path_prefix: /old/}
    redirect: {status: 301, location: "https://{host}{uri}"}
  - match: {path_prefix: /api/}
    upstream: api
    strip_prefix: true
    request_headers: {set: {X-Env: prod}, add: {X-Via: fulcrum}, remove: [X-Secret]}
    response_headers: {set: {Cache-Control: no-store}, add: {X-Served-By: gw}, remove: [X-Internal]}
  - match: {path: /v1}
    upstream: api
    rewrite_prefix: /v2/
`)
	h2 := h2client()
	h2.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	clients := map[string]*http.Client{"http/1.1 over tls": tlsClient(), "http/2": h2}
	for name, c := range clients {
		for _, chunked := range []bool{false, true} {
			send := func(method, path string, hdr ...string) *http.Response {
				t.Helper()
				var body io.Reader
				if chunked {
					body = io.MultiReader(strings.NewReader("x")) // unknown length: net/http's own exchange
				}
				req, _ := http.NewRequest(method, "https://"+g.Addr()+path, body)
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				res, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s chunked %v %s: %v", name, chunked, path, err)
				}
				return res
			}
			res := send("POST", "/api/users/7?x=1", "X-Env", "dev", "X-Secret", "s3", "X-Keep", "k")
			var got struct {
				URI    string
				Header http.Header
			}
			json.NewDecoder(res.Body).Decode(&got)
			res.Body.Close()
			switch {
			case got.URI != "/users/7?x=1":
				t.Errorf("%s chunked %v: the target saw %q, want the prefix stripped", name, chunked, got.URI)
			case got.Header.Get("X-Env") != "prod" || got.Header.Get("X-Via") != "fulcrum" || got.Header.Get("X-Secret") != "" || got.Header.Get("X-Keep") != "k":
				t.Errorf("%s chunked %v: request headers at the target: %v", name, chunked, got.Header)
			case res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("X-Served-By") != "gw" || res.Header.Get("X-Internal") != "":
				t.Errorf("%s chunked %v: response headers: %v", name, chunked, res.Header)
			}
			res = send("GET", "/v1?q=2")
			json.NewDecoder(res.Body).Decode(&got)
			res.Body.Close()
			if got.URI != "/v2/?q=2" {
				t.Errorf("%s chunked %v: /v1 rewritten to %q, want /v2/?q=2", name, chunked, got.URI)
			}
			res = send("GET", "/old/a?b=c")
			res.Body.Close()
			if res.StatusCode != 301 || res.Header.Get("Location") != "https://"+g.Addr()+"/old/a?b=c" {
				t.Errorf("%s chunked %v: redirect %d to %q", name, chunked, res.StatusCode, res.Header.Get("Location"))
			}
		}
	}
}

func tlsClient() *http.Client {
	c := h2client()
	tr := c.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}
