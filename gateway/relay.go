package gateway

import (
	"bufio"
	"strconv"

	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// Relay: the target's response to the client on the fast path (headers
// filtered, body streamed), and the responses the gateway makes itself.

// relay copies the response into cc.bw and the spool behind it (spool.go),
// for flush to send once the target is done; a streamed response (stream:
// the path is one of buffering.stream_paths) goes to the client as it
// comes. keep: the client connection stays open; upKeep: the target
// connection may go back to the pool.
func (cc *clientConn) relay(uc *upConn, res *h1.Response, isHead, clientClose, stream bool, ops *headerOps) (keep, upKeep bool, err error) {
	bw := cc.bw
	noBody := h1.NoBody(res.Status, isHead)
	untilEOF := !noBody && res.ContentLength < 0 && !res.Chunked
	closeClient := clientClose || untilEOF || cc.g.draining.Load()
	if !noBody && !stream {
		stream = streams(res)
	}
	if stream {
		if err := cc.sp.stream(); err != nil {
			return false, false, &h1.WriteError{Err: err}
		}
	}
	cc.scr2 = writeResponseHead(bw, res, ops, cc.rid, closeClient, cc.scr2)
	_, _ = uc.br.Discard(res.Size)
	upKeep = !res.Close
	switch {
	case noBody:
	case res.Chunked:
		err = h1.CopyChunked(bw, uc.br)
	case res.ContentLength >= 0:
		err = h1.CopyN(bw, uc.br, res.ContentLength)
	default:
		err = h1.CopyEOF(bw, uc.br)
		upKeep = false
	}
	if err != nil {
		return false, false, err
	}
	return !closeClient, upKeep, nil
}

// writeResponseHead writes a target's response head for the client:
// hop-by-hop fields and X-Accel-Buffering dropped, the route's
// response_headers applied, an X-Request-Id added when the target sent
// none, Connection: close when the client connection ends. Both the
// goroutine path and the event loop write heads here; scr is scratch
// space, returned for reuse.
func writeResponseHead(bw *bufio.Writer, res *h1.Response, ops *headerOps, rid []byte, closeClient bool, scr []byte) []byte {
	// The head is put together in scr and written with one call: most of
	// it is copied from the target's head in runs (lineRun).
	var run lineRun
	out := scr[:0]
	if l := h1.WithCRLF(res.StatusLine); l != nil {
		out = run.addRaw(out, l)
	} else {
		out = append(out, res.StatusLine...)
		out = append(out, "\r\n"...)
	}
	hasRID := false
	for i := range res.Headers {
		h := &res.Headers[i]
		if h1.IsHopByHop(h.Name) || (res.ConnTokens && h1.HasToken(res.Conn, h.Name)) {
			continue
		}
		if len(h.Name) == 12 && h1.EqFold(h.Name, "x-request-id") {
			hasRID = true
		}
		if len(h.Name) == 17 && h1.EqFold(h.Name, "x-accel-buffering") {
			continue // for the proxy, as nginx keeps it
		}
		if ops.drops(h.Name) {
			continue
		}
		if res.Canon {
			out = run.addRaw(out, h.Line())
		} else {
			out = run.add(out, h)
		}
	}
	out = run.flush(out)
	out = ops.appendTo(out)
	if !hasRID {
		out = append(out, "X-Request-Id: "...)
		out = append(out, rid...)
		out = append(out, "\r\n"...)
	}
	if closeClient {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	bw.Write(out)
	if cap(out) > keepScratch {
		return scr // a rare big head's buffer is not kept for the connection's life
	}
	return out
}

// keepScratch is the most scratch space a connection keeps between
// responses.
const keepScratch = 4 << 10

// streams reports whether a response must reach the client as it comes:
// server-sent events, or the target asked (X-Accel-Buffering: no, as
// nginx reads it).
func streams(res *h1.Response) bool {
	for _, h := range res.Headers {
		switch {
		case len(h.Name) == 12 && len(h.Value) >= 17:
			// The value first: it differs from the first bytes on.
			if h1.EqFold(h.Value[:17], "text/event-stream") && h1.EqFold(h.Name, "content-type") {
				return true
			}
		case len(h.Name) == 17 && h1.EqFold(h.Name, "x-accel-buffering"):
			if len(h.Value) == 2 && h1.EqFold(h.Value, "no") {
				return true
			}
		}
	}
	return false
}

// flush sends what relay left buffered, unless the client already sent
// its next request (pipelining) and the response is still in cc.bw: then
// two responses leave in one write.
func (cc *clientConn) flush(keep bool) bool {
	if keep && cc.br.Buffered() > 0 && cc.sp.empty() {
		return true
	}
	return cc.flushOut() == nil && keep
}

// skipBody reads and drops an unread request body so the connection can
// serve the next request; large bodies close the connection instead.
func (cc *clientConn) skipBody(n int64) bool {
	if n <= 0 {
		return true
	}
	if n > 256<<10 {
		return false
	}
	return h1.Discard(cc.br, n) == nil
}

// local writes a response the gateway makes itself. It reports whether
// the connection can stay open.
func (cc *clientConn) local(code int, body string, closeConn bool, extra []byte) bool {
	cc.scr = appendLocal(cc.scr[:0], code, body, closeConn, cc.rid, extra)
	_, _ = cc.bw.Write(cc.scr)
	return cc.flushOut() == nil && !closeConn
}

// appendLocal appends a response the gateway makes itself (a refusal, a
// 404, a redirect, a 429, a 502/503/504 with its reason), for both the
// goroutine path and the event loop.
func appendLocal(b []byte, code int, body string, closeConn bool, rid, extra []byte) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	text := statusText[code]
	if text == "" {
		text = "Error"
	}
	b = append(b, text...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	if len(rid) > 0 {
		b = append(b, "X-Request-Id: "...)
		b = append(b, rid...)
		b = append(b, "\r\n"...)
	}
	b = append(b, extra...)
	if closeConn {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}
