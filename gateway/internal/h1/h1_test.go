package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseRequest(t *testing.T) {
	cases := []struct {
		head string
		ok   bool
		chk  func(r *Request) bool
	}{
		{"GET /a?b HTTP/1.1\r\nHost: x\r\n\r\n", true, func(r *Request) bool {
			return string(r.Method) == "GET" && string(r.URI) == "/a?b" && string(r.Host) == "x" && r.ContentLength == -1 && !r.Close
		}},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: close\r\n\r\n", true, func(r *Request) bool { return r.ContentLength == 12 && r.Close }},
		{"GET / HTTP/1.0\r\n\r\n", true, func(r *Request) bool { return r.Minor == 0 && r.Close }},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true, func(r *Request) bool { return !r.Close }},
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, X-Foo\r\nUpgrade: websocket\r\n\r\n", true, func(r *Request) bool { return r.Upgrade && r.ConnTokens }},
		{"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", true, func(r *Request) bool { return r.Chunked }},
		{"GET / HTTP/1.1\nHost: x\n\n", true, nil},
		{"GET / HTTP/1.1\r\n\r\n", false, nil},                                                                // no Host
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false, nil},                                          // two Hosts
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", false, nil}, // smuggling
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", false, nil},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", false, nil},
		{"GET / HTTP/2.0\r\nHost: x\r\n\r\n", false, nil},
		{"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", false, nil},
		{"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", false, nil},
		{"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", false, nil},
	}
	for _, tc := range cases {
		var r Request
		err := ParseRequest([]byte(tc.head), &r)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok=%v", tc.head, err, tc.ok)
			continue
		}
		if tc.chk != nil && !tc.chk(&r) {
			t.Errorf("%q: parsed %+v", tc.head, r)
		}
	}
}

func TestParseResponse(t *testing.T) {
	var r Response
	if err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), &r); err != nil || r.Status != 200 || r.ContentLength != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	if err := ParseResponse([]byte("HTTP/1.1 404 Not\tFound \xc3\xa9\r\n\r\n"), &r); err != nil || r.Status != 404 {
		t.Fatalf("reason phrase with HTAB and obs-text: %+v %v", r, err)
	}
	if err := ParseResponse([]byte("HTTP/1.1 204\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"), &r); err != nil || !r.Chunked || !r.Close {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"HTTP/1.1 2000 OK\r\n\r\n", "HTTP/2 200\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 099 X\r\n\r\n",
		"HTTP/1.1 200 OK\r\r\n\r\n", "HTTP/1.1 200 O\x00K\r\n\r\n", "HTTP/1.1 200 OK\x7f\r\n\r\n"} {
		if err := ParseResponse([]byte(bad), &r); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// Heads arriving a byte at a time are found; heads past the limit are
// refused.
func TestReadRequestSlowAndLarge(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 100) + "\r\n\r\nNEXT"
	br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(head)), 1024)
	var r Request
	if err := ReadRequest(br, 1024, &r); err != nil {
		t.Fatal(err)
	}
	br.Discard(r.Size)
	if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
		t.Fatalf("left %q", rest)
	}
	big := "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 2000) + "\r\n\r\n"
	br = bufio.NewReaderSize(strings.NewReader(big), 1024)
	if err := ReadRequest(br, 1024, &r); !errors.Is(err, ErrHeadTooLarge) {
		t.Fatalf("large head: %v", err)
	}
}

func TestCopyChunked(t *testing.T) {
	body := "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\nNEXT"
	src := bufio.NewReaderSize(iotest.HalfReader(strings.NewReader(body)), 64)
	var out bytes.Buffer
	dst := bufio.NewWriter(&out)
	if err := CopyChunked(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Flush()
	if want := strings.TrimSuffix(body, "NEXT"); out.String() != want {
		t.Fatalf("relayed %q, want %q", out.String(), want)
	}
	for _, bad := range []string{"zz\r\nx\r\n", "5\r\nhel", "3\r\nabcXX\r\n0\r\n\r\n"} {
		src := bufio.NewReader(strings.NewReader(bad))
		if err := CopyChunked(bufio.NewWriter(io.Discard), src); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestCopyN(t *testing.T) {
	src := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 10000)+"REST"), 16)
	var out bytes.Buffer
	dst := bufio.NewWriter(&out)
	if err := CopyN(dst, src, 10000); err != nil {
		t.Fatal(err)
	}
	dst.Flush()
	if out.Len() != 10000 {
		t.Fatalf("copied %d", out.Len())
	}
	if err := CopyN(dst, bufio.NewReader(strings.NewReader("ab")), 5); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %v", err)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close, x\r\n\r\n")
	f.Add("GET / HTTP/1.0\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		var r Request
		if ParseRequest([]byte(s), &r) != nil {
			return
		}
		if r.Chunked && r.ContentLength >= 0 {
			t.Fatal("accepted both framings")
		}
		if len(r.Method) == 0 || !isToken(r.Method) {
			t.Fatalf("method %q", r.Method)
		}
		for _, h := range r.Headers {
			if bytes.ContainsAny(h.Value, "\r\n") || !isToken(h.Name) {
				t.Fatalf("header %q: %q", h.Name, h.Value)
			}
		}
	})
}

func FuzzCopyChunked(f *testing.F) {
	f.Add("5\r\nhello\r\n0\r\n\r\n")
	f.Add("1;a=b\r\nx\r\n0\r\nT: v\r\n\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		var out bytes.Buffer
		dst := bufio.NewWriter(&out)
		src := bufio.NewReaderSize(strings.NewReader(s), 16)
		if err := CopyChunked(dst, src); err != nil {
			return
		}
		dst.Flush()
		// What was relayed is a prefix of the input: the body, unchanged.
		if !strings.HasPrefix(s, out.String()) {
			t.Fatalf("relayed %q from %q", out.String(), s)
		}
	})
}

// dechunk decodes a chunked body with ChunkSize, ChunkEnd and Trailers,
// as the gateway's own exchange relays one.
func dechunk(in string) (body, trailers string, err error) {
	src := bufio.NewReader(iotest.OneByteReader(strings.NewReader(in)))
	var b, tr strings.Builder
	for {
		n, err := ChunkSize(src)
		if err != nil {
			return b.String(), "", err
		}
		if n == 0 {
			break
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(src, data); err != nil {
			return b.String(), "", err
		}
		b.Write(data)
		if err := ChunkEnd(src); err != nil {
			return b.String(), "", err
		}
	}
	err = Trailers(src, func(name, value []byte) { tr.WriteString(string(name) + "=" + string(value) + ";") })
	return b.String(), tr.String(), err
}

func TestDechunk(t *testing.T) {
	cases := []struct {
		in, body, trailers string
		err                error
	}{
		{"5\r\nhello\r\n0\r\n\r\n", "hello", "", nil},
		{"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nbad line\r\nX-Bad: a\x01b\r\n\r\n", "hello world", "X-Sum=42;", nil},
		{"5\r\nhelloX\r\n0\r\n\r\n", "hello", "", ErrBadChunk}, // data longer than its size
		{"zz\r\nhello\r\n", "", "", ErrBadChunk},
		{"5\r\nhel", "", "", io.ErrUnexpectedEOF},
		{"5\r\nhello\r\n0\r\nX-Sum: 42\r\n", "hello", "", io.ErrUnexpectedEOF}, // no blank line after the trailers
	}
	for _, c := range cases {
		body, tr, err := dechunk(c.in)
		if !errors.Is(err, c.err) || (err == nil && (body != c.body || tr != c.trailers)) {
			t.Errorf("%q: body %q trailers %q err %v, want %q %q %v", c.in, body, tr, err, c.body, c.trailers, c.err)
		}
	}
}

// TestChunkScan feeds chunked bodies to ChunkScan in every split, as the
// event loop receives them, and expects the end found at the same byte
// CopyChunked stops at.
func TestChunkScan(t *testing.T) {
	bodies := []string{
		"0\r\n\r\n",
		"5\r\nhello\r\n0\r\n\r\n",
		"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: yes\r\n\r\n",
		"1\nx\n0\n\n",
	}
	for _, body := range bodies {
		whole := body + "NEXT"
		for split := 0; split <= len(whole); split++ {
			var s ChunkScan
			s.Reset()
			n1, done, err := s.Scan([]byte(whole[:split]))
			if err != nil {
				t.Fatalf("%q split %d: %v", body, split, err)
			}
			total := n1
			if !done {
				n2, done2, err := s.Scan([]byte(whole[split:]))
				if err != nil || !done2 {
					t.Fatalf("%q split %d: done=%v err=%v", body, split, done2, err)
				}
				total += n2
			}
			if total != len(body) {
				t.Fatalf("%q split %d: body ends at %d, want %d", body, split, total, len(body))
			}
		}
	}
	for _, bad := range []string{"zz\r\n", "5\r\nhelloXX\r\n", "-1\r\n"} {
		var s ChunkScan
		s.Reset()
		if _, _, err := s.Scan([]byte(bad)); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
	var s ChunkScan
	s.Reset()
	if _, _, err := s.Scan(bytes.Repeat([]byte("1"), maxChunkLine+1)); err == nil {
		t.Fatal("an endless size line: no error")
	}
}

// parseHeadersLineByLine is parseHeaders as it was before the one-pass
// scan (a line cut at LF, then the name and value checked): the
// reference the fast scan must agree with.
func parseHeadersLineByLine(b []byte, hs []Header) ([]Header, error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return hs, ErrMalformed
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 || !isToken(line[:c]) {
			return hs, ErrMalformed
		}
		v := trimOWS(line[c+1:])
		if !validValue(v) {
			return hs, ErrMalformed
		}
		hs = append(hs, Header{Name: line[:c], Value: v})
	}
	return hs, nil
}

// FuzzParseHeaders checks the one-pass header scan against the line by
// line reference: the same fields, values and refusals.
func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{
		"Host: x\r\n\r\n",
		"Host: x\r\nUser-Agent: a b c d e f g h i j\r\n\r\n",
		"A:b\nC:  d \t\n\n",
		"A: \t \r\n\r\n",
		"A: x\ty\x80\xff long value over eight bytes\r\n\r\n",
		"A: x\x7fyyyyyyyyyyy\r\n\r\n",
		"A: xxxxxxxxxxxx\ryy\r\n\r\n",
		"A: xxxxxxxxxxxx\r\r\n\r\n",
		"A: x\x01\r\n\r\n",
		"A: x\r\n B\r\n\r\n",
		"A x: y\r\n\r\n",
		": y\r\n\r\n",
		"A: y",
		"A: y\r",
		"A",
		"\r",
		"\rX",
		"A: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\t",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := parseHeadersLineByLine(b, nil)
		got, canon, _, gerr := parseHeaders(b, nil, true)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: error %v, want %v", b, gerr, werr)
		}
		if werr != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d fields, want %d", b, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].Name, want[i].Name) || !bytes.Equal(got[i].Value, want[i].Value) {
				t.Fatalf("%q: field %d %q: %q, want %q: %q", b, i, got[i].Name, got[i].Value, want[i].Name, want[i].Value)
			}
			// A line in written form is what the field's parts make.
			line := append(append(append(bytes.Clone(got[i].Name), ": "...), got[i].Value...), "\r\n"...)
			if raw := got[i].Raw(); raw != nil && !bytes.Equal(raw, line) {
				t.Fatalf("%q: field %d: Raw %q, want %q", b, i, raw, line)
			}
			if canon && !bytes.Equal(got[i].Line(), line) {
				t.Fatalf("%q: field %d: Line %q, want %q", b, i, got[i].Line(), line)
			}
		}
	})
}

// headEnd is HeadLen's rule written the plain way: the first CRLF CRLF
// or LF LF, whichever closes first; 0 for none.
func headEnd(b []byte) int {
	i := bytes.Index(b, []byte("\r\n\r\n"))
	j := bytes.Index(b, []byte("\n\n"))
	switch {
	case i >= 0 && (j < 0 || i+2 <= j):
		return i + 4
	case j >= 0:
		return j + 2
	}
	return 0
}

// FuzzParseIn checks ParseRequestIn and ParseResponseIn against the two
// steps they stand for, the head cut by headEnd then parsed: where they
// give a length it is headEnd's, and the parse is the same.
func FuzzParseIn(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
		"GET / HTTP/1.1\r\nHost: x\n\r\nX: y\r\n\r\n",
		"GET / HTTP/1.1\n\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\nA: b\n\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end := headEnd(b)
		var in, want Request
		n, err := ParseRequestIn(b, &in)
		if n > 0 {
			if err != nil || n != end {
				t.Fatalf("%q: ParseRequestIn %d, %v; the head ends at %d", b, n, err, end)
			}
			if werr := ParseRequest(b[:end], &want); werr != nil {
				t.Fatalf("%q: ParseRequestIn took what ParseRequest refuses: %v", b, werr)
			}
			if fmt.Sprintf("%v", in) != fmt.Sprintf("%v", want) {
				t.Fatalf("%q: ParseRequestIn\n%v\nParseRequest\n%v", b, in, want)
			}
		} else if err != nil && end > 0 && ParseRequest(b[:end], &want) == nil {
			t.Fatalf("%q: ParseRequestIn refused (%v) a head ParseRequest takes", b, err)
		}
		var rin, rwant Response
		n, err = ParseResponseIn(b, &rin)
		if n > 0 {
			if err != nil || n != end {
				t.Fatalf("%q: ParseResponseIn %d, %v; the head ends at %d", b, n, err, end)
			}
			if werr := ParseResponse(b[:end], &rwant); werr != nil {
				t.Fatalf("%q: ParseResponseIn took what ParseResponse refuses: %v", b, werr)
			}
			if fmt.Sprintf("%v", rin) != fmt.Sprintf("%v", rwant) {
				t.Fatalf("%q: ParseResponseIn\n%v\nParseResponse\n%v", b, rin, rwant)
			}
		}
	})
}

func TestHeadLen(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"GET / HTTP/1.1\r\nHost: a\r\n", 0},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /next", 27},
		{"GET / HTTP/1.1\nHost: a\n\n", 24},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", 0}, // LF CR LF is not a blank line
		{"\n\n", 2},
		{"\r\n\r\n", 4},
		{"a\r\n\n", 4},
	} {
		if got := HeadLen([]byte(c.in)); got != c.want {
			t.Errorf("HeadLen(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	// Against the plain rule, on inputs made of the bytes that matter.
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("\r\na")
	for range 200000 {
		b := make([]byte, rng.IntN(16))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := HeadLen(b), headEnd(b); got != want {
			t.Fatalf("HeadLen(%q) = %d, want %d", b, got, want)
		}
	}
}

// The goroutine path's reader cuts a head where the event loop does
// (HeadLen), however the bytes arrive. It used to take a later CRLF CRLF
// over an earlier bare LF LF: a head ending "\n\n" followed by a second
// request in CRLF form was read as one request, and the second was lost
// inside it, where a front proxy that ends heads at LF LF saw two.
func TestReadRequestEndsWhereHeadLenDoes(t *testing.T) {
	two := "GET / HTTP/1.1\r\nHost: a\n\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, rd := range []func(string) io.Reader{
		func(s string) io.Reader { return strings.NewReader(s) },
		func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
	} {
		br := bufio.NewReaderSize(rd(two), 1024)
		var r Request
		if err := ReadRequest(br, 1024, &r); err != nil {
			t.Fatal(err)
		}
		if r.Size != 25 || string(r.URI) != "/" {
			t.Fatalf("first head: size %d URI %q, want 25 and /", r.Size, r.URI)
		}
		br.Discard(r.Size)
		if err := ReadRequest(br, 1024, &r); err != nil {
			t.Fatalf("second head: %v", err)
		}
		if string(r.URI) != "/x" {
			t.Fatalf("second head's URI %q, want /x", r.URI)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("\r\na")
	for range 20000 {
		b := make([]byte, 1+rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		want := headEnd(b)
		br := bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(b)), 64)
		head, err := peekHead(br, 64)
		switch {
		case want == 0 && err == nil:
			t.Fatalf("peekHead(%q) = %q, want no head", b, head)
		case want > 0 && (err != nil || len(head) != want):
			t.Fatalf("peekHead(%q) = %q, %v; want the first %d bytes", b, head, err, want)
		}
	}
}
