package gateway

import (
	"bytes"
	"net"
	"net/http"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// Route: a request's host, path, method, headers and query name its
// upstream (the first route that matches wins; router.go compiles the
// lookup), and the upstream's strategy may want a hash key from the
// request.

// match finds the upstream for a host (without port), a path (without
// query) and the rest of the request (router.go).
func (rt *liveConfig) match(host, path []byte, q reqView) *route {
	return rt.router.find(host, path, q)
}

func eqFoldStr(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// route finds the fast-path request's upstream: the host without its
// port, the path without its query.
func (rt *liveConfig) route(r *h1.Request) *route {
	path := r.URI
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	host := r.Host
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 {
		host = host[:i]
	}
	return rt.match(host, path, (*h1View)(r))
}

// routeHTTP is route for a net/http request.
func (rt *liveConfig) routeHTTP(r *http.Request) *route {
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	return rt.match([]byte(host), []byte(r.URL.Path), (*httpView)(r))
}

// requestKey is a request's key as k names it (an upstream's hash_key, a
// route's split_key), read one way on every transport (the event loop,
// the goroutine path, net/http's): the raw path and query as the client
// sent them, a header's first value (lower is its name in lower case), a
// cookie. A client keeps its target and its split side whichever
// protocol it speaks. clientIP is called only for client_ip.
func requestKey(v reqView, k config.HashKey, lower string, clientIP func() string) string {
	switch k.Kind {
	case "client_ip":
		return clientIP()
	case "path":
		return string(v.path())
	case "header":
		b, _ := v.header(lower)
		return string(b)
	case "cookie":
		c, _ := v.cookie(k.Name)
		return c
	case "query":
		return queryValue(string(v.rawQuery()), k.Name)
	}
	return ""
}

// clientIP is the client's address as a string, made once per
// connection.
func (cc *clientConn) clientIP() string {
	if cc.ipStr == "" {
		cc.ipStr = string(cc.ip)
	}
	return cc.ipStr
}

func cookieValue(v []byte, name string) (string, bool) {
	for len(v) > 0 {
		var part []byte
		if i := bytes.IndexByte(v, ';'); i >= 0 {
			part, v = v[:i], v[i+1:]
		} else {
			part, v = v, nil
		}
		part = bytes.TrimSpace(part)
		if eq := bytes.IndexByte(part, '='); eq > 0 && string(part[:eq]) == name {
			return string(bytes.Trim(part[eq+1:], `"`)), true
		}
	}
	return "", false
}

func queryValue(q, name string) string {
	for q != "" {
		var part string
		if i := bytesIndex(q, '&'); i >= 0 {
			part, q = q[:i], q[i+1:]
		} else {
			part, q = q, ""
		}
		k, v, _ := cut(part, '=')
		if k == name {
			return v
		}
	}
	return ""
}

func bytesIndex(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func cut(s string, c byte) (string, string, bool) {
	if i := bytesIndex(s, c); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// slowClientIP is the client's address of a net/http request.
func slowClientIP(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}
