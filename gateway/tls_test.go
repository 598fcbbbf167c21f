package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
)

// selfSigned writes a certificate and key for 127.0.0.1 and returns their
// paths.
func selfSigned(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fulcrum-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cert := writeFile(t, dir, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	k := writeFile(t, dir, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	return cert, k
}

// tlsGateway starts a gateway serving TLS with a fresh self-signed
// certificate in front of target, with extra config lines.
func tlsGateway(t *testing.T, target, extra string) *gateway.Gateway {
	t.Helper()
	cert, key := selfSigned(t, t.TempDir())
	return start(t, base+extra+"tls: {cert_file: "+cert+", key_file: "+key+"}\nupstreams:\n  api:\n    targets:\n      - {url: \""+target+"\"}\n")
}

// headRecorder answers every request with "ok" and sends each request
// head it read, bytes as they came, to heads.
func headRecorder(t *testing.T) (string, chan string) {
	heads := make(chan string, 16)
	addr := serveRaw(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				head.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			heads <- head.String()
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return "http://" + addr, heads
}

// HTTP/1.1 over TLS is served by the fast path, several requests on one
// keep-alive connection: the target gets the head as the client wrote it
// (a lower-case field name stays lower-case; net/http's transport would
// have sent X-Probe), with X-Forwarded-Proto: https.
func TestTLSHTTP1OnFastPath(t *testing.T) {
	target, heads := headRecorder(t)
	g := tlsGateway(t, target, "")
	c, err := tls.Dial("tcp", g.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Fatalf("ALPN chose %q", p)
	}
	br := bufio.NewReader(c)
	for i := range 3 {
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a.example\r\nx-probe: "+strconv.Itoa(i)+"\r\nX-Forwarded-Proto: spoofed\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the same connection: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(body) != "ok" || res.Close {
			t.Fatalf("request %d: %d %q close=%v", i, res.StatusCode, body, res.Close)
		}
		head := <-heads
		if !strings.Contains(head, "\r\nx-probe: "+strconv.Itoa(i)+"\r\n") {
			t.Errorf("request %d reached the target not as written (not the fast path?):\n%s", i, head)
		}
		if !strings.Contains(head, "\r\nX-Forwarded-Proto: https\r\n") || strings.Contains(head, "spoofed") {
			t.Errorf("request %d: X-Forwarded-Proto is not https alone:\n%s", i, head)
		}
	}
}

// HTTP/2 over TLS (ALPN h2) still reaches net/http's HTTP/2 server, the
// connection handed over as a bare *tls.Conn.
func TestTLSHTTP2ByALPN(t *testing.T) {
	b := newBackend(t, "b1")
	g := tlsGateway(t, b.url(), "")
	var p http.Protocols
	p.SetHTTP2(true) // h2 only: a fallback to HTTP/1.1 would fail the request
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: &p}}
	defer c.CloseIdleConnections()
	for range 3 {
		res, err := c.Get("https://" + g.Addr() + "/echo")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e echoed
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%s %d %q", res.Proto, res.StatusCode, body)
		}
		if res.ProtoMajor != 2 || e.Header.Get("X-Forwarded-Proto") != "https" {
			t.Fatalf("%s, target saw X-Forwarded-Proto %q", res.Proto, e.Header.Get("X-Forwarded-Proto"))
		}
	}
}

// What the fast path hands to net/http over TLS (a chunked upload,
// HTTP/1.0) is still known there to have come over TLS.
func TestTLSHandedOffKeepsHTTPS(t *testing.T) {
	b := newBackend(t, "b1")
	g := tlsGateway(t, b.url(), "")
	var p http.Protocols
	p.SetHTTP1(true)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: &p}}
	defer c.CloseIdleConnections()
	// A reader of unknown length: the client sends it chunked.
	body := io.MultiReader(strings.NewReader("chunked "), strings.NewReader("over tls"))
	r := do(t, c, "POST", "https://"+g.Addr()+"/echo", body)
	e := echo(t, r)
	if e.Body != "chunked over tls" || e.Proto != "HTTP/1.1" {
		t.Errorf("chunked upload over TLS: %d %+v", r.code, e)
	}
	if got := e.Header.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("chunked upload over TLS: target saw X-Forwarded-Proto %q, want https", got)
	}
	// HTTP/1.0 is handed off as well.
	conn, err := tls.Dial("tcp", g.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /echo HTTP/1.0\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	e = echo(t, resp{code: res.StatusCode, body: string(raw)})
	if got := e.Header.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("HTTP/1.0 over TLS: target saw X-Forwarded-Proto %q, want https", got)
	}
}

// A client that connects and never sends a ClientHello is closed at
// read_header (the idle timeout is far longer).
func TestTLSSilentClientClosedAtReadHeader(t *testing.T) {
	b := newBackend(t, "b1")
	g := tlsGateway(t, b.url(), "timeouts: {read_header: 200ms, idle: 1h}\n")
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A guard against a hang, not a measurement: far below idle.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the silent client was not closed at read_header")
	}
	if n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
	// The gateway still serves afterwards.
	tc, err := tls.Dial("tcp", g.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	tc.Close()
}

// A head refused over TLS is answered, then the connection half-closes
// (close_notify, lingerClose's CloseWrite on a *tls.Conn): the client
// reads the whole answer and then the end of the stream.
func TestTLSRefusedHeadAnsweredThenClosed(t *testing.T) {
	b := newBackend(t, "b1")
	g := tlsGateway(t, b.url(), "")
	c, err := tls.Dial("tcp", g.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard against a hang
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("after %q: %v, want a clean end (close_notify)", all, err)
	}
	if !bytes.HasPrefix(all, []byte("HTTP/1.1 400 ")) {
		t.Fatalf("answer %q, want 400", all)
	}
	if b.hits.Load() != 0 {
		t.Errorf("the refused request reached the target")
	}
}

// HTTP/1.1 over TLS on the event loop (where it runs: Linux): on one
// connection, pipelined in one write, a response far larger than the
// socket buffers (so the loop meets a full socket with records still
// to write), a chunked upload it hands over to the goroutine path with
// the decrypted bytes already read, and a request after it; all are
// answered in order, whole, and the upload still reaches the target as
// HTTPS.
func TestTLSPipelineBigResponseAndHandOver(t *testing.T) {
	const size = 24 << 20
	big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	b := newBackend(t, "b1")
	bigSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(big)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go bigSrv.Serve(ln)
	t.Cleanup(func() { bigSrv.Close() })
	cert, key := selfSigned(t, t.TempDir())
	g := start(t, base+"tls: {cert_file: "+cert+", key_file: "+key+"}\n"+
		"routes:\n  - {match: {path: /big}, upstream: big}\n  - {match: {path_prefix: /}, upstream: api}\n"+
		"upstreams:\n  big:\n    targets:\n      - {url: \"http://"+ln.Addr().String()+"\"}\n"+
		"  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	t.Logf("event loops: %d", g.EventLoops())
	c, err := tls.Dial("tcp", g.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // a guard against a hang
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"+
		"GET /third HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReaderSize(c, 4096)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || !bytes.Equal(got, big) {
		t.Fatalf("big response: %d, %d bytes (want %d), equal %v, %v", res.StatusCode, len(got), size, bytes.Equal(got, big), err)
	}
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the upload after it: %v", err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	e := echo(t, resp{code: res.StatusCode, body: string(raw)})
	if e.Body != "hello world" || e.Header.Get("X-Forwarded-Proto") != "https" {
		t.Fatalf("the handed-over upload: body %q, X-Forwarded-Proto %q", e.Body, e.Header.Get("X-Forwarded-Proto"))
	}
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the request after the handover: %v", err)
	}
	raw, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(raw) != "b1" {
		t.Fatalf("the request after the handover: %d %q", res.StatusCode, raw)
	}
}

// batchConn holds a TLS client's records and sends them in one write.
type batchConn struct {
	net.Conn
	held bytes.Buffer
	hold bool
}

func (b *batchConn) Write(p []byte) (int, error) {
	if b.hold {
		return b.held.Write(p)
	}
	return b.Conn.Write(p)
}

// Requests in separate TLS records that arrive in one segment are all
// served: the loop reads on while crypto/tls holds a whole record it has
// not decrypted, though the socket is drained.
func TestTLSRecordsInOneSegment(t *testing.T) {
	b := newBackend(t, "b1")
	g := tlsGateway(t, b.url(), "")
	raw, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang
	bc := &batchConn{Conn: raw}
	c := tls.Client(bc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for round := range 3 {
		bc.hold = true
		for i := range 3 {
			io.WriteString(c, "GET /r"+strconv.Itoa(round)+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		bc.hold = false
		if _, err := raw.Write(bc.held.Bytes()); err != nil {
			t.Fatal(err)
		}
		bc.held.Reset()
		for i := range 3 {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("round %d, response %d: %v", round, i+1, err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(body) != "b1" {
				t.Fatalf("round %d, response %d: %d %q", round, i+1, res.StatusCode, body)
			}
		}
	}
}

// A TLS 1.2 client that sends its request and close_notify in one
// segment gets its answer (crypto/tls reads the alert with the request's
// record and reports the end with the request's bytes).
func TestTLSRequestWithCloseNotifyAnswered(t *testing.T) {
	b := newBackend(t, "b1")
	b.delay.Store(int64(20 * time.Millisecond)) // the answer comes after the alert is read
	g := tlsGateway(t, b.url(), "")
	raw, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang
	bc := &batchConn{Conn: raw}
	c := tls.Client(bc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, MaxVersion: tls.VersionTLS12})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	bc.hold = true
	io.WriteString(c, "GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	bc.hold = false
	_ = raw.SetDeadline(time.Now().Add(20 * time.Second)) // CloseWrite left a past write deadline on raw
	if _, err := raw.Write(bc.held.Bytes()); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the request sent with close_notify: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "b1" {
		t.Fatalf("the request sent with close_notify: %d %q", res.StatusCode, body)
	}
}
