package gateway

import (
	"bytes"
	"errors"
	"strconv"
	"time"
	"unsafe"

	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// Parse: read one request head off a fast-path connection and check it
// (internal/h1 refuses anything RFC 9112 calls invalid or ambiguous:
// control bytes in the target or a field value, conflicting or
// malformed Content-Length, Content-Length with Transfer-Encoding, line
// folding, two Hosts). What net/http must serve instead is handed off.

type parseOutcome int

const (
	parseServe   parseOutcome = iota // a head in cc.req for the fast path
	parseHandOff                     // for net/http: HTTP/2, upgrades, chunked, HTTP/1.0, ...
	parseClose                       // refused (answered) or the client left
)

// parse reads the next head into cc.req. A head still arriving gets
// read_header to complete.
func (cc *clientConn) parse(headTO time.Duration) parseOutcome {
	if !bytes.Contains(peekAll(cc), crlf2) {
		cc.deadline = time.Now().Add(headTO)
		_ = cc.c.SetReadDeadline(cc.deadline)
	}
	err := h1.ReadRequest(cc.br, cc.br.Size(), &cc.req)
	switch {
	case err == nil:
	case errors.Is(err, h1.ErrHeadTooLarge):
		cc.refuse(431, "request head too large\n")
		return parseClose
	case errors.Is(err, h1.ErrMalformed):
		if bytes.HasPrefix(peekAll(cc), []byte("PRI * HTTP/2.0")) {
			return parseHandOff
		}
		cc.refuse(400, "malformed request\n")
		return parseClose
	default:
		return parseClose
	}
	r := &cc.req
	if !fastPathServes(r) {
		return parseHandOff
	}
	// Route here, once: the config and upstream found are the ones
	// serveOne uses, so a reload in between cannot send a request it
	// routed to an https upstream over the cleartext fast path.
	cc.lc = cc.g.rt.Load()
	cc.rte = cc.lc.route(r)
	cc.up = cc.rte.upstream((*h1View)(r), cc.clientIP)
	if cc.up != nil && cc.up.tls != nil {
		cc.lc, cc.rte, cc.up = nil, nil, nil
		return parseHandOff // https targets: net/http sends it (upstream_tls.go)
	}
	return parseServe
}

// fastPathServes reports whether the fast path serves a parsed head
// itself: HTTP/1.1, no upgrade, no Expect, no chunked body, an
// origin-form target. The rest goes to net/http.
func fastPathServes(r *h1.Request) bool {
	return r.Minor != 0 && !r.Upgrade && !r.Expect && !r.Chunked && len(r.URI) > 0 && r.URI[0] == '/'
}

// refuse answers a head that cannot be served, logs it (no method or
// path: they may be what was wrong) and ends the connection.
func (cc *clientConn) refuse(code int, body string) {
	cc.buildRID()
	cc.logLine(&accessLine{start: time.Now()}, code)
	cc.local(code, body, true, nil)
	cc.linger = true
}

var crlf2 = []byte("\r\n\r\n")

func peekAll(cc *clientConn) []byte {
	b, _ := cc.br.Peek(cc.br.Buffered())
	return b
}

// buildHead writes the head to send upstream into cc.out, the request ID
// into cc.rid, and notes an Idempotency-Key. A Content-Length repeated
// with the same value (the parser refuses differing ones) is sent once.
func (cc *clientConn) buildHead(r *h1.Request, rte *route) {
	var rw *rewrite
	var ops *headerOps
	if rte != nil {
		rw, ops = rte.rewrite, rte.reqHdr
	}
	out := cc.out[:0]
	out = append(out, r.Method...)
	out = append(out, ' ')
	out = rw.appendURI(out, r.URI)
	out = append(out, " HTTP/1.1\r\n"...)
	var xff []byte
	cc.rid = cc.rid[:0]
	cc.idemKey = false
	sawCL := false
	var run lineRun
	for i := range r.Headers {
		h := &r.Headers[i]
		name := h.Name
		if h1.IsHopByHop(name) || (r.ConnTokens && h1.HasToken(r.Conn, name)) || ops.drops(name) {
			continue
		}
		switch len(name) {
		case 12:
			if h1.EqFold(name, "x-request-id") {
				cc.rid = append(cc.rid, h.Value...)
			}
		case 14:
			if h1.EqFold(name, "content-length") {
				if sawCL {
					continue
				}
				sawCL = true
			}
		case 15:
			if h1.EqFold(name, "x-forwarded-for") {
				if xff != nil {
					xff = append(xff, ", "...)
				}
				xff = append(xff, h.Value...)
				continue
			}
			if h1.EqFold(name, "idempotency-key") {
				cc.idemKey = true
			}
		case 16:
			if h1.EqFold(name, "x-forwarded-host") {
				continue
			}
		case 17:
			if h1.EqFold(name, "x-forwarded-proto") {
				continue
			}
		}
		if r.Canon {
			out = run.addRaw(out, h.Line())
		} else {
			out = run.add(out, h)
		}
	}
	out = run.flush(out)
	out = ops.appendTo(out)
	proto := "http"
	if cc.tls {
		proto = "https"
	}
	out = appendForwarded(out, xff, cc.ip, proto, r.Host)
	if len(cc.rid) == 0 {
		cc.buildRID()
		out = append(out, "X-Request-Id: "...)
		out = append(out, cc.rid...)
		out = append(out, "\r\n\r\n"...) // the field's line end and the blank line
	} else {
		out = append(out, "\r\n"...)
	}
	cc.out = out
}

// lineRun gathers lines that lie back to back in the head they were
// parsed from (most of a head is forwarded as it came), so they are
// copied with one append rather than four per field. Whatever is
// appended to out between adds must come after a flush.
type lineRun []byte

// add appends the field h to out, or to the run when its line is in
// written form and follows the run in the head.
func (r *lineRun) add(out []byte, h *h1.Header) []byte {
	raw := h.Raw()
	if raw == nil {
		out = r.flush(out)
		out = append(out, h.Name...)
		out = append(out, ": "...)
		out = append(out, h.Value...)
		return append(out, "\r\n"...)
	}
	return r.addRaw(out, raw)
}

// addRaw adds raw, a complete line, to the run.
func (r *lineRun) addRaw(out, raw []byte) []byte {
	if q := *r; len(raw) > 0 && cap(q)-len(q) >= len(raw) && len(q) > 0 &&
		unsafe.Add(unsafe.Pointer(unsafe.SliceData(q)), len(q)) == unsafe.Pointer(unsafe.SliceData(raw)) {
		*r = q[:len(q)+len(raw)] // raw lies right after q, inside q's array
		return out
	}
	out = r.flush(out)
	*r = raw
	return out
}

// flush appends the run to out and empties it.
func (r *lineRun) flush(out []byte) []byte {
	out = append(out, *r...)
	*r = nil
	return out
}

// appendForwarded appends X-Forwarded-For (the client's chain, then its
// address), X-Forwarded-Proto and X-Forwarded-Host, as
// httputil.ReverseProxy's SetXForwarded writes them; both transports'
// heads use it.
func appendForwarded[S ~string | ~[]byte](out []byte, prior, ip S, proto string, host S) []byte {
	out = append(out, "X-Forwarded-For: "...)
	if len(prior) > 0 {
		out = append(out, prior...)
		out = append(out, ", "...)
	}
	out = append(out, ip...)
	if proto == "http" {
		out = append(out, "\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: "...) // one copy
	} else {
		out = append(out, "\r\nX-Forwarded-Proto: "...)
		out = append(out, proto...)
		out = append(out, "\r\nX-Forwarded-Host: "...)
	}
	out = append(out, host...)
	return append(out, "\r\n"...)
}

// buildRID makes a request ID: a random per-process prefix and a counter.
func (cc *clientConn) buildRID() {
	cc.rid = append(cc.rid[:0], cc.g.ridPrefix...)
	cc.rid = append(cc.rid, '-')
	cc.rid = strconv.AppendUint(cc.rid, cc.g.ridCtr.Add(1), 36)
}
