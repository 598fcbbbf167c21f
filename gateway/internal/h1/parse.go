package h1

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
)

// Errors the parser returns.
var (
	ErrHeadTooLarge = errors.New("h1: head too large")
	ErrMalformed    = errors.New("h1: malformed head")
)

// Header is one header line, slices into the head.
type Header struct {
	Name, Value []byte
}

// Raw returns the field's line as it stands in the head it was parsed
// from when that line is exactly Name ": " Value CRLF, the form heads are
// written in; else nil. Such a line can be copied whole.
func (h *Header) Raw() []byte {
	k := len(h.Name)
	n := k + len(h.Value) + 4
	if cap(h.Name) < n {
		return nil
	}
	l := h.Name[:n] // its capacity runs on in the head: lineRun joins the next line to it
	if binary.LittleEndian.Uint16(l[k:]) != ':'|' '<<8 || binary.LittleEndian.Uint16(l[n-2:]) != '\r'|'\n'<<8 {
		return nil
	}
	if len(h.Value) > 0 && &l[k+2] != &h.Value[0] {
		return nil
	}
	return l
}

// Line is the field's line, Name ": " Value CRLF, as it stands in the
// head: for a field of a head parsed with Canon set.
func (h *Header) Line() []byte {
	return h.Name[:len(h.Name)+len(h.Value)+4]
}

// WithCRLF returns line and the CRLF that follows it in its head, or nil
// when CRLF does not follow it there.
func WithCRLF(line []byte) []byte {
	n := len(line)
	if n == 0 || cap(line) < n+2 {
		return nil
	}
	l := line[:n+2]
	if l[n] != '\r' || l[n+1] != '\n' {
		return nil
	}
	return l
}

// Request is a parsed request head. Its slices point into the reader's
// buffer and are valid until the reader is read again.
type Request struct {
	Method  []byte
	URI     []byte
	Minor   int // HTTP/1.x
	Headers []Header

	Host          []byte
	ContentLength int64 // -1 when absent
	Chunked       bool  // Transfer-Encoding present (chunked or other)
	Close         bool  // the client asked to close after this request
	Upgrade       bool  // Upgrade header or Connection: upgrade
	Expect        bool  // Expect header present
	ConnTokens    bool  // Connection lists tokens other than close/keep-alive
	Conn          []byte
	Size          int  // bytes of the head, to Discard
	Canon         bool // every field line is Name ": " Value CRLF (Header.Line)
}

// Response is a parsed response head.
type Response struct {
	Status        int
	StatusLine    []byte // "HTTP/1.1 200 OK" without CRLF
	Minor         int
	Headers       []Header
	ContentLength int64
	Chunked       bool
	Close         bool
	ConnTokens    bool
	Conn          []byte
	Size          int
	Canon         bool // every field line is Name ": " Value CRLF (Header.Line)
}

// peekHead returns the buffered bytes up to and including the blank line
// ending a head, reading more as needed. The reader's buffer must be at
// least max bytes.
func peekHead(r *bufio.Reader, limit int) ([]byte, error) {
	n := r.Buffered()
	if n == 0 {
		n = 1
	}
	searched := 0
	for {
		buf, err := r.Peek(n)
		if err == nil && r.Buffered() > n {
			buf, _ = r.Peek(r.Buffered()) // everything the read brought
		}
		if len(buf) > 0 {
			// The three bytes before the new ones are scanned again:
			// a blank line's end may have arrived in two reads.
			from := max(searched-3, 0)
			if n := HeadLen(buf[from:]); n > 0 {
				return buf[:from+n], nil
			}
			searched = len(buf)
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, ErrHeadTooLarge
			}
			if err == io.EOF && len(buf) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(buf) >= limit {
			return nil, ErrHeadTooLarge
		}
		n = r.Buffered() + 1
		if n > r.Size() {
			return nil, ErrHeadTooLarge
		}
	}
}

// HeadLen is the length of the head at the start of b, ending in a
// blank line, or 0 while it is incomplete: the first CRLF CRLF or bare
// LF LF, whichever ends first. Every reader of a head (the goroutine
// path's peek, the event loop, ParseRequestIn) cuts it by this one rule:
// two rules would let a front proxy and us disagree on where a request
// ends (before, the peek took a later CRLF CRLF over an earlier LF LF and
// swallowed the request after it).
func HeadLen(b []byte) int {
	// One scan from LF to LF: the first that ends a blank line wins,
	// whichever of the two endings it closes.
	for p := 0; ; p++ {
		i := bytes.IndexByte(b[p:], '\n')
		if i < 0 {
			return 0
		}
		p += i
		if p+1 >= len(b) {
			return 0
		}
		// Most LFs are followed by the next field's name: one test.
		switch b[p+1] {
		case '\n':
			return p + 2
		case '\r':
			if p > 0 && p+2 < len(b) && b[p-1] == '\r' && b[p+2] == '\n' {
				return p + 3
			}
		}
	}
}

// ReadRequest parses the next request head from r without consuming it;
// call r.Discard(req.Size) once done with the slices. req.Headers' array
// is reused.
func ReadRequest(r *bufio.Reader, limit int, req *Request) error {
	head, err := peekHead(r, limit)
	if err != nil {
		return err
	}
	return ParseRequest(head, req)
}

// ParseRequest parses a complete head (ending in a blank line).
func ParseRequest(head []byte, req *Request) error {
	_, err := parseRequest(head, req)
	return err
}

// ParseRequestIn parses the request head at the start of b, which may
// hold less or more than a head: n is the head's length, ending at the
// first LF LF or CRLF CRLF (HeadLen), and
// req.Size is n. n is 0, whatever the error, when b holds no complete
// head or the head does not end where that rule ends it, and when the
// head is malformed: the caller then cuts the head as before and calls
// ParseRequest, so one scan serves a well-formed head.
func ParseRequestIn(b []byte, req *Request) (int, error) {
	n, err := parseRequest(b, req)
	if err != nil || n <= 0 {
		return 0, err
	}
	req.Size = n
	return n, nil
}

// firstCRLF reports whether the first line of b (rest is what follows
// it, from nextLine) ended in CRLF.
func firstCRLF(b, rest []byte) bool {
	i := len(b) - len(rest) - 1 // the LF
	return rest != nil && i > 0 && b[i-1] == '\r'
}

func parseRequest(head []byte, req *Request) (int, error) {
	hs := req.Headers[:0]
	*req = Request{Headers: hs, ContentLength: -1, Size: len(head)}
	line, rest := nextLine(head)
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return 0, ErrMalformed
	}
	// The version is the last 8 bytes: its space is found without a
	// scan when it is there (and the line is refused below when it is
	// not: the version holds no space).
	sp2 := len(line) - 9
	if sp2 < 0 || line[sp2] != ' ' {
		sp2 = bytes.LastIndexByte(line, ' ')
	}
	if sp2 <= sp1+1 {
		return 0, ErrMalformed
	}
	req.Method, req.URI = line[:sp1], line[sp1+1:sp2]
	if !isToken(req.Method) || !validTarget(req.URI) {
		return 0, ErrMalformed
	}
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
		req.Minor = 1
	case "HTTP/1.0":
		req.Minor = 0
		req.Close = true
	default:
		return 0, ErrMalformed
	}
	hs, canon, end, err := parseHeaders(rest, hs, firstCRLF(head, rest))
	req.Headers, req.Canon = hs, canon
	if err != nil {
		return 0, err
	}
	if end > 0 {
		end += len(head) - len(rest)
	}
	for i := range hs {
		h := &hs[i]
		switch len(h.Name) {
		case 4:
			if eqFold(h.Name, "host") {
				if req.Host != nil {
					return 0, ErrMalformed // two Host headers
				}
				req.Host = h.Value
			}
		case 6:
			if eqFold(h.Name, "expect") {
				req.Expect = true
			}
		case 7:
			if eqFold(h.Name, "upgrade") {
				req.Upgrade = true
			}
		case 10:
			if eqFold(h.Name, "connection") {
				req.Conn = h.Value
				connTokens(h.Value, &req.Close, &req.Upgrade, &req.ConnTokens, req.Minor)
			}
		case 14:
			if eqFold(h.Name, "content-length") {
				n, ok := parseLength(h.Value)
				if !ok || (req.ContentLength >= 0 && req.ContentLength != n) {
					return 0, ErrMalformed
				}
				req.ContentLength = n
			}
		case 17:
			if eqFold(h.Name, "transfer-encoding") {
				req.Chunked = true
			}
		}
	}
	if req.Chunked && req.ContentLength >= 0 {
		return 0, ErrMalformed // request smuggling guard (RFC 9112 6.1)
	}
	if req.Minor == 1 && req.Host == nil {
		return 0, ErrMalformed
	}
	return end, nil
}

// ReadResponse parses the next response head from r without consuming it.
func ReadResponse(r *bufio.Reader, limit int, res *Response) error {
	head, err := peekHead(r, limit)
	if err != nil {
		return err
	}
	return ParseResponse(head, res)
}

// ParseResponse parses a complete response head.
func ParseResponse(head []byte, res *Response) error {
	_, err := parseResponse(head, res)
	return err
}

// ParseResponseIn is ParseRequestIn for a response head.
func ParseResponseIn(b []byte, res *Response) (int, error) {
	n, err := parseResponse(b, res)
	if err != nil || n <= 0 {
		return 0, err
	}
	res.Size = n
	return n, nil
}

func parseResponse(head []byte, res *Response) (int, error) {
	hs := res.Headers[:0]
	*res = Response{Headers: hs, ContentLength: -1, Size: len(head)}
	line, rest := nextLine(head)
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, ErrMalformed
	}
	switch line[7] {
	case '1':
		res.Minor = 1
	case '0':
		res.Close = true
	default:
		return 0, ErrMalformed
	}
	s := line[9:12]
	if s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' || (len(line) > 12 && line[12] != ' ') {
		return 0, ErrMalformed
	}
	for _, c := range line[12:] {
		// The reason phrase: HTAB, SP, VCHAR and obs-text (RFC 9112), as
		// a field value's bytes are checked. A bare CR or a NUL from a
		// target would otherwise reach the client as it came.
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, ErrMalformed
		}
	}
	res.Status = int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0')
	res.StatusLine = line
	hs, canon, end, err := parseHeaders(rest, hs, firstCRLF(head, rest))
	res.Headers, res.Canon = hs, canon
	if err != nil {
		return 0, err
	}
	if end > 0 {
		end += len(head) - len(rest)
	}
	var up bool
	for i := range hs {
		h := &hs[i]
		switch len(h.Name) {
		case 10:
			if eqFold(h.Name, "connection") {
				res.Conn = h.Value
				connTokens(h.Value, &res.Close, &up, &res.ConnTokens, res.Minor)
			}
		case 14:
			if eqFold(h.Name, "content-length") {
				n, ok := parseLength(h.Value)
				if !ok || (res.ContentLength >= 0 && res.ContentLength != n) {
					return 0, ErrMalformed
				}
				res.ContentLength = n
			}
		case 17:
			if eqFold(h.Name, "transfer-encoding") {
				if !eqFold(bytes.TrimSpace(h.Value), "chunked") {
					return 0, ErrMalformed // only plain chunked is relayed
				}
				res.Chunked = true
			}
		}
	}
	if res.Chunked {
		res.ContentLength = -1
	}
	return end, nil
}

// NoBody reports whether a response to method with this status has no
// body whatever its headers say.
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

// parseHeaders parses header lines up to the blank line, and reports
// whether every line was in written form (Request.Canon) and where the
// head ends: the bytes up to and including the blank line, 0 when b ends
// before one, -1 when the blank line is CRLF after a bare LF line end
// (crlf tells how the line before b ended), where HeadLen's rule (a head
// ends at LF LF or CRLF CRLF) looks further on. One pass per
// line: the name's bytes are checked against the token table until the
// colon, the value's eight at a time (valueStop) until the line's end, so
// a request costs no IndexByte call per line. Line ends are CRLF or bare
// LF; a CR elsewhere, any other control byte but HTAB, and DEL are
// refused, as validValue refuses them.
func parseHeaders(b []byte, hs []Header, crlf bool) ([]Header, bool, int, error) {
	canon := true
	n0 := len(b)
	for len(b) > 0 {
		if b[0] == '\n' {
			return hs, canon, n0 - len(b) + 1, nil // blank line
		}
		if b[0] == '\r' {
			if len(b) > 1 && b[1] == '\n' {
				if !crlf {
					// LF CR LF: a blank line here, not to HeadLen's
					// rule (that head ends further on).
					return hs, canon, -1, nil
				}
				return hs, canon, n0 - len(b) + 2, nil
			}
			return hs, false, 0, ErrMalformed
		}
		if b[0] == ' ' || b[0] == '\t' {
			return hs, false, 0, ErrMalformed // obsolete line folding
		}
		c := 0
		for c < len(b) && tokenTable[b[c]] {
			c++
		}
		if c == 0 || c == len(b) || b[c] != ':' {
			return hs, false, 0, ErrMalformed
		}
		name := b[:c]
		i := c + 1
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		vs := i
		// Find the line's end: the first control byte or DEL that is
		// not HTAB.
		end, next := len(b), len(b)
		for i < len(b) {
			i = valueStop(b, i)
			if i == len(b) {
				break
			}
			switch b[i] {
			case '\t':
				i++
				continue
			case '\n':
				end, next = i, i+1
			case '\r':
				if i+1 >= len(b) || b[i+1] != '\n' {
					return hs, false, 0, ErrMalformed
				}
				end, next = i, i+2
			default:
				return hs, false, 0, ErrMalformed
			}
			break
		}
		for end > vs && (b[end-1] == ' ' || b[end-1] == '\t') {
			end--
		}
		// Written form: one SP after the colon, none after the value, CRLF.
		canon = canon && vs == c+2 && b[c+1] == ' ' && next == end+2 && b[end] == '\r'
		hs = append(hs, Header{Name: name, Value: b[vs:end]})
		crlf = next == i+2
		b = b[next:]
	}
	return hs, canon, 0, nil // no blank line
}

// valueStop returns the index of the first byte at or after i that is a
// control byte (below 0x20) or DEL, or len(b): eight bytes a word while
// eight remain (bytes from 0x80 pass, as obs-text).
func valueStop(b []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		// Bytes below 0x20, and bytes equal to 0x7f: the lowest flagged
		// byte of each test is exact (a borrow only flags bytes above a
		// true hit).
		m := (x - 0x20*ones) &^ x & highs
		d := x ^ 0x7f*ones
		m |= (d - ones) &^ d & highs
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < ' ' || c == 0x7f {
			return i
		}
	}
	return i
}

// validTarget: a request target is visible ASCII (RFC 9112 3.2); no
// control byte, space or DEL. Bytes past ASCII pass, as nginx and
// net/http let them.
// In the path, a '%' starts a two-hex-digit escape (RFC 3986 2.1), as
// net/http and nginx insist; the query is passed as it comes.
func validTarget(b []byte) bool {
	inPath := true
	for i, c := range b {
		if c <= ' ' || c == 0x7f {
			return false
		}
		switch {
		case c == '?':
			inPath = false
		case c == '%' && inPath:
			if i+2 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validValue: a field value is visible characters, SP, HTAB and obs-text
// (RFC 9110 5.5); any other control byte, or DEL, is refused.
func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func connTokens(v []byte, close, upgrade, other *bool, minor int) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = trimOWS(v[:i]), v[i+1:]
		} else {
			tok, v = trimOWS(v), nil
		}
		switch {
		case len(tok) == 0:
		case eqFold(tok, "close"):
			*close = true
		case eqFold(tok, "keep-alive"):
			if minor == 0 {
				*close = false
			}
		case eqFold(tok, "upgrade"):
			*upgrade = true
		default:
			*other = true
		}
	}
}

// HasToken reports whether a Connection value lists name.
func HasToken(v, name []byte) bool {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = trimOWS(v[:i]), v[i+1:]
		} else {
			tok, v = trimOWS(v), nil
		}
		if bytes.EqualFold(tok, name) {
			return true
		}
	}
	return false
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

// eqFold compares b with a lower-case ASCII string, ignoring case.
func eqFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// EqFold is eqFold for other packages.
func EqFold(b []byte, lower string) bool { return eqFold(b, lower) }

var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenTable[c] {
			return false
		}
	}
	return true
}

// IsHopByHop reports whether a header is hop-by-hop (RFC 9110 7.6.1) and
// must not be forwarded. Transfer-Encoding is handled by the caller.
func IsHopByHop(name []byte) bool {
	switch len(name) {
	case 2:
		return eqFold(name, "te")
	case 7:
		return eqFold(name, "upgrade") || eqFold(name, "trailer")
	case 10:
		return eqFold(name, "connection") || eqFold(name, "keep-alive")
	case 16:
		return eqFold(name, "proxy-connection")
	case 18:
		return eqFold(name, "proxy-authenticate")
	case 19:
		return eqFold(name, "proxy-authorization")
	}
	return false
}
