package gateway

import (
	"bufio"
	"context"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Tests that drive the request path's steps one at a time, to put an
// event (a reload, a client leaving) exactly between two of them.

const testBase = "listen: 127.0.0.1:0\nadmin: {listen: off}\naccess_log: {enabled: false}\n"

func testConfig(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(testBase + text))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, text)
	}
	return cfg
}

// newTestGateway makes cfg live without listening: tests hand it
// connections themselves.
func newTestGateway(t *testing.T, text string) *Gateway {
	t.Helper()
	g, err := New(testConfig(t, text), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g
}

// connPair is a loopback TCP connection: the gateway's side as a
// clientConn, the client's as a net.Conn.
func connPair(t *testing.T, g *Gateway) (*clientConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	cc := g.newClientConn(s)
	t.Cleanup(func() { c.Close(); g.release(cc, false) })
	return cc, c
}

// countingServer answers "ok" and counts what reaches it.
func countingServer(t *testing.T, n *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A request is routed once, by parse, and served with that config's
// upstream: a reload between parse and serveOne that now routes the path
// to an https upstream must not send it over the cleartext fast path
// (before, serveOne looked the route up again in the new config and sent
// the request in clear text to the https target).
func TestRoutedOnceAcrossAReload(t *testing.T) {
	var hits atomic.Int64
	srv := countingServer(t, &hits)
	ups := "upstreams:\n  api: {targets: [{url: \"" + srv.URL + "\"}]}\n" +
		"  secure: {tls: {}, targets: [{url: \"https://127.0.0.1:1\"}]}\n"
	g := newTestGateway(t, ups+"routes:\n  - {match: {path_prefix: /}, upstream: api}\n")
	cc, c := connPair(t, g)
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := cc.parse(5 * time.Second); got != parseServe {
		t.Fatalf("parse: %v, want parseServe", got)
	}
	if err := g.ApplyConfig(testConfig(t, ups+"routes:\n  - {match: {path_prefix: /}, upstream: secure}\n")); err != nil {
		t.Fatal(err)
	}
	if !cc.serveOne() {
		t.Fatal("serveOne closed the connection")
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("status %d, %d requests at the upstream routed to at parse; want 200 and 1", res.StatusCode, hits.Load())
	}
}

// A reload closes the idle connections of the https transports it
// replaces (before, each reload left the old transport's pool open until
// upstream_idle, 90 s by default).
func TestReloadClosesReplacedTLSConnections(t *testing.T) {
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	text := "upstreams:\n  secure: {tls: {ca_file: \"" + ca + "\"}, targets: [{url: \"" + srv.URL + "\"}]}\n"
	g := newTestGateway(t, text)
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	res, err := g.rt.Load().ups["secure"].tls.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close() // the connection is idle in the transport now
	if err := g.ApplyConfig(testConfig(t, text)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the replaced transport's idle connection closed", func() bool { return closed.Load() == 1 })
}
