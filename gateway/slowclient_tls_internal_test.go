package gateway

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// tlsFiles writes a self-signed certificate for 127.0.0.1 and its key,
// and returns the config line that serves them.
func tlsFiles(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	cert, k := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return "tls: {cert_file: " + strconv.Quote(cert) + ", key_file: " + strconv.Quote(k) + "}\n"
}

var clientTLS = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}

// stalledTLSClient sends GET path over TLS and reads nothing.
func stalledTLSClient(t *testing.T, addr, path string) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// Over TLS too (on Linux, on the event loop after the handshake), a
// client that does not read a large response holds no permit, everyone
// else is served, and the stalled client still gets its whole response
// when it reads.
func TestStalledTLSClientsHoldNoPermit(t *testing.T) {
	up, done := bigServer(t)
	g := startTestGateway(t, tlsFiles(t)+
		"buffering: {temp_dir: "+strconv.Quote(t.TempDir())+"}\n"+
		"upstreams:\n  api:\n    targets: [{url: \"http://"+up+"\", max_concurrency: 2}]\n"+
		"    queue: {max_wait: 10s}\n")
	var stalled []*tls.Conn
	for range 4 { // twice the permits: each waits for one, then lets it go
		stalled = append(stalled, stalledTLSClient(t, g.Addr(), "/big"))
	}
	testenv.Eventually(t, "the stalled clients' permits back", func() bool {
		return done.Load() == 4 && inFlight(g) == 0
	})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS}}
	defer c.CloseIdleConnections()
	for i := range 20 {
		res, err := c.Get("https://" + g.Addr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d beside stalled clients: %d %q", i, res.StatusCode, body)
		}
	}
	want := sha256.Sum256(bigBody)
	for i, sc := range stalled {
		_ = sc.SetReadDeadline(time.Now().Add(30 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(sc), nil)
		if err != nil {
			t.Fatalf("stalled client %d: %v", i, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || [32]byte(h.Sum(nil)) != want {
			t.Fatalf("stalled client %d: status %d, %v, body intact %v", i, res.StatusCode, err, [32]byte(h.Sum(nil)) == want)
		}
	}
}

// A TLS client that stops reading loses its connection after
// timeouts.send, as a cleartext one does.
func TestSendTimeoutEndsAStalledTLSClient(t *testing.T) {
	up, done := bigServer(t)
	g := startTestGateway(t, tlsFiles(t)+
		"timeouts: {send: 200ms}\nbuffering: {temp_dir: "+strconv.Quote(t.TempDir())+"}\n"+
		"upstreams:\n  api:\n    targets: [{url: \"http://"+up+"\"}]\n")
	sc := stalledTLSClient(t, g.Addr(), "/big")
	testenv.Eventually(t, "the gateway to serve the request", func() bool { return done.Load() == 1 })
	testenv.Eventually(t, "the stalled connection closed", func() bool { return openConns(g) == 0 })
	_ = sc.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.Copy(io.Discard, sc)
	if int(got) >= len(bigBody) {
		t.Fatalf("a client past its send timeout got the whole response (%d bytes, %v)", got, err)
	}
}
