package relay

import (
	"bytes"
	"errors"
)

// ErrMalformed: a head the minimal parser does not accept.
var ErrMalformed = errors.New("relay: malformed head")

// Header is one header line, slices into the head.
type Header struct{ Name, Value []byte }

// Request is a parsed request head; its slices point into the head.
type Request struct {
	Method, URI   []byte
	Headers       []Header
	ContentLength int64 // 0 when absent
	Chunked       bool  // any Transfer-Encoding
	Close         bool  // HTTP/1.0 or Connection: close
	Upgrade       bool
	Expect        bool
}

// Response is a parsed response head.
type Response struct {
	Status        int
	StatusLine    []byte
	Headers       []Header
	ContentLength int64 // -1 when absent or chunked
	Close         bool
}

// ParseRequest parses a complete head (ending in CRLF CRLF); req.Headers'
// array is reused.
func ParseRequest(head []byte, req *Request) error {
	*req = Request{Headers: req.Headers[:0]}
	line, rest := nextLine(head)
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1+1 {
		return ErrMalformed
	}
	req.Method, req.URI = line[:sp1], line[sp1+1:sp2]
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		req.Close = true
	default:
		return ErrMalformed
	}
	var err error
	if req.Headers, err = parseHeaders(rest, req.Headers); err != nil {
		return err
	}
	seenCL := false
	for i := range req.Headers {
		h := &req.Headers[i]
		switch {
		case eqFold(h.Name, "content-length"):
			n, ok := parseLength(h.Value)
			if !ok || (seenCL && n != req.ContentLength) {
				return ErrMalformed
			}
			req.ContentLength, seenCL = n, true
		case eqFold(h.Name, "transfer-encoding"):
			req.Chunked = true
		case eqFold(h.Name, "connection"):
			if containsFold(h.Value, "close") {
				req.Close = true
			}
			if containsFold(h.Value, "upgrade") {
				req.Upgrade = true
			}
		case eqFold(h.Name, "upgrade"):
			req.Upgrade = true
		case eqFold(h.Name, "expect"):
			req.Expect = true
		}
	}
	if req.Chunked && seenCL {
		return ErrMalformed // request smuggling guard (RFC 9112 6.1)
	}
	return nil
}

// ParseResponse parses a complete response head.
func ParseResponse(head []byte, res *Response) error {
	*res = Response{Headers: res.Headers[:0], ContentLength: -1}
	line, rest := nextLine(head)
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return ErrMalformed
	}
	res.Close = line[7] == '0'
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return ErrMalformed
		}
		res.Status = res.Status*10 + int(c-'0')
	}
	res.StatusLine = line
	var err error
	if res.Headers, err = parseHeaders(rest, res.Headers); err != nil {
		return err
	}
	chunked := false
	for i := range res.Headers {
		h := &res.Headers[i]
		switch {
		case eqFold(h.Name, "content-length"):
			n, ok := parseLength(h.Value)
			if !ok {
				return ErrMalformed
			}
			res.ContentLength = n
		case eqFold(h.Name, "transfer-encoding"):
			chunked = true
		case eqFold(h.Name, "connection"):
			if containsFold(h.Value, "close") {
				res.Close = true
			}
		}
	}
	if chunked {
		res.ContentLength = -1
	}
	return nil
}

// NoBody reports whether a response with this status to a HEAD (head) or
// other request has no body whatever its headers say.
func NoBody(status int, head bool) bool {
	return head || status < 200 || status == 204 || status == 304
}

func nextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil
	}
	line = b[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, b[i+1:]
}

func parseHeaders(b []byte, hs []Header) ([]Header, error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if len(line) == 0 {
			break
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 || line[0] == ' ' || line[0] == '\t' || line[c-1] == ' ' {
			return hs, ErrMalformed
		}
		hs = append(hs, Header{Name: line[:c], Value: bytes.TrimSpace(line[c+1:])})
	}
	return hs, nil
}

func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// containsFold reports whether the comma-separated list v holds the
// lower-case token tok.
func containsFold(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, nil
		}
		if eqFold(bytes.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}
