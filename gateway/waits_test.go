package gateway_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func metricsText(t *testing.T, g *gateway.Gateway) string {
	t.Helper()
	return get(t, client(), "http://"+g.AdminAddr()+"/metrics").body
}

// A client that leaves while queued for capacity gives up its place: it
// takes no permit and nothing of it reaches the target.
func TestQueuedClientThatLeavesTakesNoPermit(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\", max_concurrency: 1}\n    queue: {max_wait: 30s}\n")
	first := make(chan resp, 1)
	go func() { first <- get(t, client(), "http://"+g.Addr()+"/") }()
	testenv.Eventually(t, "the first request holds the only permit", func() bool { return b.cur.Load() == 1 })

	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n")
	testenv.Eventually(t, "the second request queues", func() bool {
		return strings.Contains(metricsText(t, g), `fulcrum_gateway_queue_waiting{upstream="api"} 1`)
	})
	c.Close()
	testenv.Eventually(t, "the client that left leaves the queue", func() bool {
		return strings.Contains(metricsText(t, g), `fulcrum_gateway_queue_waits_total{outcome="client_gone",upstream="api"} 1`)
	})
	close(hold)
	if r := <-first; r.code != 200 {
		t.Fatalf("first request: %d", r.code)
	}
	if r := get(t, client(), "http://"+g.Addr()+"/"); r.code != 200 {
		t.Fatalf("third request: %d", r.code)
	}
	if n := b.hits.Load(); n != 2 {
		t.Fatalf("the target got %d requests, want 2 (the queued one left)", n)
	}
}

// A reload applies timeouts to both transports, or is refused naming the
// field and changes nothing.
func TestReloadTimeoutsAllOrNothing(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	t.Cleanup(func() { close(hold) })
	dir := t.TempDir()
	text := func(extra string) string {
		return "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\naccess_log: {enabled: false}\nh2c: true\n" + extra +
			"upstreams:\n  api:\n    targets:\n      - {url: \"" + b.url() + "\"}\n"
	}
	path := filepath.Join(dir, "gw.yaml")
	os.WriteFile(path, []byte(text("timeouts: {response_header: 1h}\n")), 0o644)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{ConfigPath: path})

	os.WriteFile(path, []byte(text("timeouts: {response_header: 200ms, idle: 5s}\n")), 0o644)
	err = g.Reload()
	if err == nil || !strings.Contains(err.Error(), "timeouts.idle") {
		t.Fatalf("reload changing timeouts.idle: %v, want a refusal naming it", err)
	}
	os.WriteFile(path, []byte(text("timeouts: {response_header: 200ms}\n")), 0o644)
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	// The target holds every request: only the new 200ms response_header
	// can end them (the old one was an hour; the client gives up at 10s).
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &p}}
	for name, c := range map[string]*http.Client{"fast": client(), "net/http": h2} {
		if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 504 || !strings.Contains(r.body, "timeout") {
			t.Errorf("%s path after the reload: %d %q, want 504 timeout", name, r.code, r.body)
		}
	}
}

// The access log says why the gateway answered itself and how many
// retries were made (not how many were allowed).
func TestAccessLogReasonAndRetriesMade(t *testing.T) {
	dead1, dead2 := newBadTarget(t, "refuse"), newBadTarget(t, "refuse")
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\naccess_log: {format: json}\nupstreams:\n  api:\n    targets:\n" +
		"      - {url: \"http://" + dead1.addr + "\"}\n      - {url: \"http://" + dead2.addr + "\"}\n    retry: {attempts: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuf
	g := startCfg(t, cfg, gateway.Options{AccessLog: &buf})
	r := get(t, client(), "http://"+g.Addr()+"/", "X-Request-Id", "r1")
	if r.code != 502 || r.body != "Bad Gateway: connect_error\n" {
		t.Fatalf("got %d %q, want 502 with the reason", r.code, r.body)
	}
	testenv.Eventually(t, "a log line", func() bool { return strings.Contains(buf.String(), `"r1"`) })
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(buf.String())), &m); err != nil {
		t.Fatal(err)
	}
	if m["reason"] != "connect_error" || m["retries"] != 1.0 || m["status"] != 502.0 {
		t.Fatalf("log line %v, want reason connect_error, 1 retry (two targets), status 502", m)
	}
}

// 503s say why: no target in rotation, or every target at capacity (with
// Retry-After), on both transports.
func TestServiceUnavailableReasons(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	g := start(t, base+"h2c: true\nupstreams:\n  busy:\n    targets:\n      - {url: \""+b.url()+"\", max_concurrency: 1}\n"+
		"  off:\n    targets:\n      - {url: \""+b.url()+"\", disabled: true}\n"+
		"routes:\n  - {match: {path_prefix: /off}, upstream: off}\n  - {match: {path_prefix: /}, upstream: busy}\n")
	held := make(chan int, 1)
	go func() {
		res, err := client().Get("http://" + g.Addr() + "/hold")
		if err != nil {
			held <- 0
			return
		}
		res.Body.Close()
		held <- res.StatusCode
	}()
	testenv.Eventually(t, "the only permit is taken", func() bool { return b.cur.Load() == 1 })
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &p}}
	for name, c := range map[string]*http.Client{"fast": client(), "net/http": h2} {
		if r := get(t, c, "http://"+g.Addr()+"/off"); r.code != 503 || r.body != "Service Unavailable: no_target\n" {
			t.Errorf("%s: disabled target: %d %q", name, r.code, r.body)
		}
		r := get(t, c, "http://"+g.Addr()+"/")
		if r.code != 503 || r.body != "Service Unavailable: at_capacity\n" || r.hdr.Get("Retry-After") == "" {
			t.Errorf("%s: at capacity: %d %q Retry-After %q", name, r.code, r.body, r.hdr.Get("Retry-After"))
		}
	}
	close(hold)
	if code := <-held; code != 200 {
		t.Errorf("the held request: %d", code)
	}
}
