// Package relay is the I/O-free part of the event-loop proxy prototypes
// (bench/proxy/evloop/gnet and epoll): finding, parsing and rewriting
// HTTP/1.1 heads, so the two prototypes differ only in how they move
// bytes. The gateway's parser (gateway/internal/h1) cannot be imported
// from here (Go's internal rule admits only packages under gateway/), so
// parse.go is a minimal one: enough for the benchmark's traffic, not a
// hardened parser.
//
// Scope, as the evaluation needs it: keep-alive, Content-Length bodies
// only (a chunked or upgrade request gets 501, a chunked response a 502),
// no pipelining (a client's next request waits until the response to the
// previous one is complete).
package relay

import (
	"bytes"
	"errors"
)

// MaxHead bounds a request or response head.
const MaxHead = 8 << 10

// ErrHeadTooLarge: no blank line within MaxHead bytes.
var ErrHeadTooLarge = errors.New("relay: head too large")

// HeadLen returns the length of the complete head at the start of b, or 0
// when more bytes are needed.
func HeadLen(b []byte) (int, error) {
	if i := bytes.Index(b, crlfcrlf); i >= 0 {
		return i + 4, nil
	}
	if len(b) >= MaxHead {
		return 0, ErrHeadTooLarge
	}
	return 0, nil
}

var crlfcrlf = []byte("\r\n\r\n")

// Canned answers; each closes the client connection.
var (
	BadRequest     = []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	NotImplemented = []byte("HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	BadGateway     = []byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
)

// Supported reports whether the prototypes relay req: Content-Length or
// no body, no upgrade, no Expect.
func Supported(req *Request) bool {
	return !req.Chunked && !req.Upgrade && !req.Expect
}

// AppendRequest appends the head sent upstream: req's request line and
// headers without the hop-by-hop ones and any X-Forwarded-For, then
// "X-Forwarded-For: xff" (as nginx's $proxy_add_x_forwarded_for for a
// client that sent none). The upstream connection is kept alive.
func AppendRequest(dst []byte, req *Request, xff []byte) []byte {
	dst = append(dst, req.Method...)
	dst = append(dst, ' ')
	dst = append(dst, req.URI...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	for i := range req.Headers {
		h := &req.Headers[i]
		if hopByHop(h.Name) || eqFold(h.Name, "x-forwarded-for") {
			continue
		}
		dst = appendHeader(dst, h)
	}
	dst = append(dst, "X-Forwarded-For: "...)
	dst = append(dst, xff...)
	return append(dst, "\r\n\r\n"...)
}

// AppendResponse appends the head sent to the client: the status line and
// headers without the hop-by-hop ones, "Connection: close" when the
// client's connection ends after it.
func AppendResponse(dst []byte, res *Response, closeClient bool) []byte {
	dst = append(dst, res.StatusLine...)
	dst = append(dst, "\r\n"...)
	for i := range res.Headers {
		h := &res.Headers[i]
		if hopByHop(h.Name) {
			continue
		}
		dst = appendHeader(dst, h)
	}
	if closeClient {
		dst = append(dst, "Connection: close\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// BodyLen is the number of response body bytes that follow the head, or
// -1 when the response is not relayable (chunked or close-delimited).
func BodyLen(res *Response, head bool) int64 {
	if NoBody(res.Status, head) {
		return 0
	}
	return res.ContentLength // -1 for chunked or until close
}

func appendHeader(dst []byte, h *Header) []byte {
	dst = append(dst, h.Name...)
	dst = append(dst, ": "...)
	dst = append(dst, h.Value...)
	return append(dst, "\r\n"...)
}

func hopByHop(name []byte) bool {
	switch len(name) {
	case 2:
		return eqFold(name, "te")
	case 7:
		return eqFold(name, "trailer") || eqFold(name, "upgrade")
	case 10:
		return eqFold(name, "connection") || eqFold(name, "keep-alive")
	case 16:
		return eqFold(name, "proxy-connection")
	case 17:
		return eqFold(name, "transfer-encoding")
	}
	return false
}

// eqFold compares b with the lower-case ASCII s, ignoring b's case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
