package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// testCA is a certificate authority for TLS upstream tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for dnsName (server) or with CommonName cn
// (client) and returns it with its key, in PEM.
func (ca *testCA) issue(t *testing.T, cn, dnsName string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	if dnsName != "" {
		tmpl.DNSNames = []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// tlsBackend is an HTTPS server for "backend.test" that requires a client
// certificate from clientCA and answers with the SNI name and client CN it
// saw.
func tlsBackend(t *testing.T, serverCA, clientCA *testCA, checks *atomic.Int64) string {
	t.Helper()
	return tlsServer(t, serverCA, clientCA, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks.Add(1)
			return
		}
		fmt.Fprintf(w, "sni=%s client=%s path=%s", r.TLS.ServerName, r.TLS.PeerCertificates[0].Subject.CommonName, r.URL.Path)
	})
}

// tlsServer serves h over HTTPS as "backend.test", with a certificate
// from serverCA; with clientCA, it requires a client certificate from it.
func tlsServer(t *testing.T, serverCA, clientCA *testCA, h http.HandlerFunc) string {
	t.Helper()
	cp, kp := serverCA.issue(t, "backend", "backend.test", x509.ExtKeyUsageServerAuth)
	cert, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		conf.ClientAuth, conf.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestTLSUpstream(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newCA(t, "server-ca"), newCA(t, "client-ca"), newCA(t, "other-ca")
	var checks atomic.Int64
	addr := tlsBackend(t, serverCA, clientCA, &checks)
	cp, kp := clientCA.issue(t, "fulcrum-gateway", "", x509.ExtKeyUsageClientAuth)
	caFile := writeFile(t, dir, "ca.pem", string(serverCA.pem))
	otherFile := writeFile(t, dir, "other.pem", string(otherCA.pem))
	certFile := writeFile(t, dir, "client.pem", string(cp))
	keyFile := writeFile(t, dir, "client-key.pem", string(kp))
	plain := newBackend(t, "plain")

	cfgText := base + fmt.Sprintf(`upstreams:
  secure:
    tls: {ca_file: %q, server_name: backend.test, cert_file: %q, key_file: %q}
    health: {active: {interval: 100ms, healthy_threshold: 1, unhealthy_threshold: 1}}
    targets: [{url: "https://%s"}]
  untrusted:
    tls: {ca_file: %q, server_name: backend.test, cert_file: %q, key_file: %q}
    retry: {attempts: 1}
    targets: [{url: "https://%s"}]
  plain:
    targets: [{url: %q}]
routes:
  - {match: {path_prefix: /untrusted}, upstream: untrusted}
  - {match: {path_prefix: /plain}, upstream: plain}
  - {match: {path_prefix: /}, upstream: secure}
`, caFile, certFile, keyFile, addr, otherFile, certFile, keyFile, addr, plain.url())
	g := start(t, cfgText)
	c := client()
	// The fast path hands these to net/http; one keep-alive connection
	// carries https- and http-target requests in turn.
	for i := range 3 {
		if r := get(t, c, "http://"+g.Addr()+"/x"); r.code != 200 || r.body != "sni=backend.test client=fulcrum-gateway path=/x" {
			t.Fatalf("request %d to the TLS upstream: %d %q", i, r.code, r.body)
		}
		if r := get(t, c, "http://"+g.Addr()+"/plain"); r.code != 200 || r.body != "plain" {
			t.Fatalf("request %d to the plain upstream: %d %q", i, r.code, r.body)
		}
	}
	// A target whose certificate the CA file does not vouch for: no
	// answer from it.
	if r := get(t, c, "http://"+g.Addr()+"/untrusted"); r.code != 502 {
		t.Fatalf("untrusted certificate: %d %q, want 502", r.code, r.body)
	}
	v := view(t, g, "secure")
	if tv, ok := v["https://"+addr]; !ok || !tv.Healthy || tv.Requests != 3 {
		t.Fatalf("secure upstream view: %+v", v)
	}
	// The admin API refuses http targets for it.
	if r := do(t, c, "PUT", "http://"+g.AdminAddr()+"/upstreams/secure/targets", strings.NewReader(`[{"url": "http://127.0.0.1:1"}]`)); r.code != 400 || !strings.Contains(r.body, "tls block") {
		t.Fatalf("PUT of an http target into a tls upstream: %d %s, want 400", r.code, r.body)
	}
	// The active checks reach the target over TLS too.
	testenv.Eventually(t, "a health check over TLS", func() bool { return checks.Load() > 0 })
}

func TestTLSUpstreamConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"upstreams:\n  a:\n    targets: [{url: \"https://a:1\"}]\n", "line 3: upstreams.a.targets[0].url: \"https://a:1\": an https target needs the upstream's tls block"},
		{"upstreams:\n  a:\n    tls: {}\n    targets: [{url: \"http://a:1\"}]\n", "line 4: upstreams.a.targets[0].url: \"http://a:1\": the upstream has a tls block"},
		{"upstreams:\n  a:\n    tls: {cert_file: c.pem}\n    targets: [{url: \"https://a:1\"}]\n", "line 3: upstreams.a.tls: cert_file and key_file go together"},
	} {
		if _, err := config.Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.yaml, err, tc.want)
		}
	}
	cfg, err := config.Parse([]byte(base + "upstreams:\n  a:\n    tls: {ca_file: /nonexistent/ca.pem}\n    targets: [{url: \"https://127.0.0.1:1\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(cfg, gateway.Options{Logger: quietLog()}); err == nil || !strings.Contains(err.Error(), "upstreams.a.tls.ca_file") {
		t.Fatalf("New with a missing CA file: %v, want an upstreams.a.tls.ca_file error", err)
	}
	if d, err := config.Parse([]byte("upstreams:\n  a:\n    tls: {}\n    discovery: {dns: {name: x.test, port: 443}}\n")); err != nil || d.Upstreams["a"].Discovery.DNS.Scheme != "https" {
		t.Fatalf("DNS discovery in a tls upstream: %v", err)
	}
}
