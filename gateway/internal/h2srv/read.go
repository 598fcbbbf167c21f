package h2srv

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// handle acts on one frame read; false ends the connection.
func (c *conn) handle(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return true
		}
		c.mu.Lock()
		c.readerBusy = true
		if !c.closed {
			c.beginFrames()
			_ = c.fr.WritePing(true, f.Data)
		}
		c.mu.Unlock()
		return true
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PushPromiseFrame:
		c.goAway(http2.ErrCodeProtocol, false) // clients must not push
		return false
	case *http2.GoAwayFrame:
		// The client opens no more streams; those open finish, and it
		// closes the connection when it is done with them.
		return true
	}
	return true // PRIORITY, unknown frame types: ignored
}

func (c *conn) onSettings(f *http2.SettingsFrame) bool {
	if f.IsAck() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readerBusy = true
	var bad http2.ErrCode
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			bad = http2.ErrCodeProtocol
			if ce, ok := err.(http2.ConnectionError); ok {
				bad = http2.ErrCode(ce)
			}
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			d := int64(s.Val) - c.peerInit
			c.peerInit = int64(s.Val)
			for _, st := range c.streams {
				if st.sendWin += d; st.sendWin > maxWindow {
					bad = http2.ErrCodeFlowControl
					return errStreamClosed
				}
			}
			c.cond.Broadcast()
		case http2.SettingHeaderTableSize:
			c.enc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if bad != 0 {
		c.writeGoAwayLocked(bad)
		c.endLocked()
		return false
	}
	if !c.closed {
		c.beginFrames()
		_ = c.fr.WriteSettingsAck()
	}
	return true
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readerBusy = true
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if c.sendWin += inc; c.sendWin > maxWindow {
			c.writeGoAwayLocked(http2.ErrCodeFlowControl)
			c.endLocked()
			return false
		}
	} else if st := c.streams[f.StreamID]; st != nil {
		if st.sendWin += inc; st.sendWin > maxWindow {
			c.resetLocked(st.id, st, http2.ErrCodeFlowControl)
		}
	} else if f.StreamID > c.lastID {
		c.writeGoAwayLocked(http2.ErrCodeProtocol) // an idle stream
		c.endLocked()
		return false
	}
	c.cond.Broadcast()
	return true
}

func (c *conn) onReset(f *http2.RSTStreamFrame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readerBusy = true
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.lastID { // an idle stream (RFC 9113 6.4)
			c.writeGoAwayLocked(http2.ErrCodeProtocol)
			c.endLocked()
			return false
		}
		return true
	}
	if !st.sendDone {
		// CVE-2023-44487: a client that opens streams and resets them
		// at once makes handlers start for nothing. Past a floor, more
		// resets than half the streams opened is not a client
		// cancelling now and then.
		c.resets++
		if c.resets > rapidResetMin && 2*c.resets > c.opened {
			c.writeGoAwayLocked(http2.ErrCodeEnhanceYourCalm)
			c.endLocked()
			return false
		}
	}
	c.endStreamLocked(st, errStreamReset{f.ErrCode})
	return true
}

func (c *conn) onData(f *http2.DataFrame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readerBusy = true
	n := int64(f.Length) // padding included: it counts against the windows
	if n > c.recvWin {
		c.writeGoAwayLocked(http2.ErrCodeFlowControl)
		c.endLocked()
		return false
	}
	c.recvWin -= n
	id := f.StreamID
	st := c.streams[id]
	if st == nil || !st.recvOpen {
		if id > c.lastID { // an idle stream
			c.writeGoAwayLocked(http2.ErrCodeProtocol)
			c.endLocked()
			return false
		}
		// A stream already closed or reset (frames in flight when it
		// ended): the connection's window comes back at once.
		c.creditConnLocked(n)
		if st != nil { // half-closed (remote): DATA is a stream error
			c.resetLocked(id, st, http2.ErrCodeStreamClosed)
		}
		return true
	}
	if n > st.recvWin {
		c.creditConnLocked(n)
		c.resetLocked(id, st, http2.ErrCodeFlowControl)
		return true
	}
	st.recvWin -= n
	data := f.Data()
	if pad := n - int64(len(data)); pad > 0 {
		c.creditConnLocked(pad)
		st.credit += pad
	}
	st.recvd += int64(len(data))
	if st.declCL >= 0 && st.recvd > st.declCL {
		c.creditConnLocked(int64(len(data)))
		c.resetLocked(id, st, http2.ErrCodeProtocol) // more than Content-Length
		return true
	}
	if len(data) > 0 {
		if !st.body.push(data) {
			c.creditConnLocked(int64(len(data))) // the handler closed the body
		}
	}
	if f.StreamEnded() {
		c.endRequestLocked(st)
	}
	return true
}

// endRequestLocked: the client's END_STREAM. The body ends, or fails if
// it is shorter than its Content-Length.
func (c *conn) endRequestLocked(st *stream) {
	if st.declCL >= 0 && st.recvd != st.declCL {
		c.resetLocked(st.id, st, http2.ErrCodeProtocol)
		return
	}
	st.recvOpen = false
	st.body.closeWith(nil)
	if st.sendDone && st.inMap {
		st.inMap = false
		delete(c.streams, st.id)
		c.afterStreamGone()
	}
}

func (c *conn) onHeaders(f *http2.MetaHeadersFrame) bool {
	id := f.StreamID
	c.mu.Lock()
	c.readerBusy = true
	if id%2 == 0 {
		c.writeGoAwayLocked(http2.ErrCodeProtocol)
		c.endLocked()
		c.mu.Unlock()
		return false
	}
	if st := c.streams[id]; st != nil {
		c.onTrailers(st, f)
		c.mu.Unlock()
		return true
	}
	if id <= c.lastID { // a closed stream cannot open again
		c.writeGoAwayLocked(http2.ErrCodeStreamClosed)
		c.endLocked()
		c.mu.Unlock()
		return false
	}
	c.lastID = id
	switch {
	case c.goAwaySent:
		c.mu.Unlock() // past the last stream GOAWAY named: ignored
		return true
	case uint32(len(c.streams)) >= c.maxStreams:
		c.resetLocked(id, nil, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return true
	case c.handlers >= maxPendingHandlers*int(c.maxStreams):
		// Handlers of reset streams still running, as many again as
		// streams may be open: a client resetting faster than handlers
		// end (CVE-2023-44487).
		c.writeGoAwayLocked(http2.ErrCodeEnhanceYourCalm)
		c.endLocked()
		c.mu.Unlock()
		return false
	case f.Truncated:
		// The header list went past what SETTINGS_MAX_HEADER_LIST_SIZE
		// allows: 431, as net/http answers.
		c.writeStatusLocked(id, http.StatusRequestHeaderFieldsTooLarge, !f.StreamEnded())
		c.mu.Unlock()
		return true
	}
	c.mu.Unlock()
	st, ok := c.newStream(f)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		c.resetLocked(id, nil, http2.ErrCodeProtocol)
		return true
	}
	if c.closed {
		return false
	}
	st.inMap = true
	c.streams[id] = st
	c.opened++
	c.handlers++
	c.srv.dispatch(st)
	return true
}

// writeStatusLocked answers a stream with a bare status, and resets it
// when the client is still sending.
func (c *conn) writeStatusLocked(id uint32, code int, reset bool) {
	if c.closed {
		return
	}
	c.hbuf.Reset()
	_ = c.enc.WriteField(hf(":status", strconv.Itoa(code)))
	c.beginFrames()
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	if reset {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeNo)
	}
}

// onTrailers takes a request's trailers: they end the stream.
func (c *conn) onTrailers(st *stream, f *http2.MetaHeadersFrame) {
	if !st.recvOpen {
		c.resetLocked(st.id, st, http2.ErrCodeStreamClosed)
		return
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		c.resetLocked(st.id, st, http2.ErrCodeProtocol)
		return
	}
	if tr := st.req.Trailer; tr != nil {
		for _, h := range f.RegularFields() {
			k := canonicalKey(h.Name)
			if !httpguts.ValidTrailerHeader(k) {
				c.resetLocked(st.id, st, http2.ErrCodeProtocol)
				return
			}
			if _, declared := tr[k]; declared {
				st.body.setTrailer(tr, k, h.Value)
			}
		}
	}
	c.endRequestLocked(st)
}

// newStream makes a stream and its request from a HEADERS frame; false
// for a malformed request (RFC 9113 8.1.1: a stream error).
func (c *conn) newStream(f *http2.MetaHeadersFrame) (*stream, bool) {
	method, scheme := f.PseudoValue("method"), f.PseudoValue("scheme")
	path, authority := f.PseudoValue("path"), f.PseudoValue("authority")
	if f.PseudoValue("protocol") != "" || f.PseudoValue("status") != "" {
		return nil, false // no extended CONNECT; :status is a response's
	}
	if !httpguts.ValidHeaderFieldName(method) { // a token
		return nil, false
	}
	connect := method == http.MethodConnect
	if connect {
		if scheme != "" || path != "" || authority == "" {
			return nil, false
		}
	} else if scheme == "" || path == "" || (path[0] != '/' && !(path == "*" && method == http.MethodOptions)) {
		return nil, false
	}
	fields := f.RegularFields()
	hdr := make(http.Header, len(fields))
	var cookies []string
	for _, h := range fields {
		switch h.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return nil, false // connection-specific (RFC 9113 8.2.2)
		case "te":
			if h.Value != "trailers" {
				return nil, false
			}
		case "cookie":
			cookies = append(cookies, h.Value) // one field, as HTTP/1.1 sends it (8.2.3)
			continue
		}
		k := canonicalKey(h.Name)
		hdr[k] = append(hdr[k], h.Value)
	}
	if len(cookies) > 0 {
		hdr["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if authority == "" {
		authority = hdr.Get("Host")
	}
	cl := int64(-1)
	if vs := hdr["Content-Length"]; len(vs) > 0 {
		for _, v := range vs[1:] {
			if v != vs[0] {
				return nil, false
			}
		}
		n, err := strconv.ParseUint(vs[0], 10, 63)
		if err != nil {
			return nil, false
		}
		cl = int64(n)
	}
	ended := f.StreamEnded()
	if ended && cl > 0 {
		return nil, false
	}
	var u *url.URL
	uri := path
	switch {
	case connect:
		u, uri = &url.URL{Host: authority}, authority
	case path == "*":
		u = &url.URL{Path: "*"}
	default:
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return nil, false
		}
	}
	st := &stream{c: c, id: f.StreamID, sendWin: c.peerInit, recvWin: recvWindow, declCL: cl, recvOpen: !ended}
	st.ctx, st.cancel = context.WithCancel(c.ctx)
	r := &http.Request{Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: hdr,
		Host: authority, RemoteAddr: c.remote, RequestURI: uri, TLS: c.tlsState, Body: http.NoBody}
	if ended {
		r.ContentLength = 0
	} else {
		r.ContentLength = cl
		st.body = &reqBody{st: st, gap: c.o.Idle}
		st.body.cond.L = &st.body.mu
		if v := hdr["Expect"]; len(v) == 1 && strings.EqualFold(v[0], "100-continue") {
			st.body.expect = true
		}
		r.Body = st.body
	}
	for _, v := range hdr["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if k != "" && httpguts.ValidTrailerHeader(k) {
				if r.Trailer == nil {
					r.Trailer = http.Header{}
				}
				r.Trailer[k] = nil
			}
		}
	}
	st.req = r.WithContext(st.ctx)
	st.rw.st = st
	st.rw.isHead = method == http.MethodHead
	return st, true
}
