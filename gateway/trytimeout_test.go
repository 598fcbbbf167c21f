package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// retry.try_timeout: a request stuck at a target that accepted it and
// never answers (a black hole) is retried on another target long before
// timeouts.response_header (30 s here, past the client's 10 s), on every
// transport: the event loop or goroutine path (fast), net/http's server
// with the own exchange (h2c), and an https upstream (net/http's
// transport).
func TestTryTimeoutRetriesAStalledTarget(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	clients := map[string]*http.Client{
		"fast": client(),
		"h2c":  {Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second},
	}
	for cname, c := range clients {
		t.Run(cname+"/fixed", func(t *testing.T) {
			bad := newBadTarget(t, "hang")
			good := newBackend(t, "good")
			g := start(t, base+"h2c: true\nupstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+
				"      - {url: \"http://"+bad.addr+"\"}\n      - {url: \""+good.url()+"\"}\n"+
				"    retry: {attempts: 2, on: [connect_error, timeout], try_timeout: 200ms}\n")
			for i := range 4 {
				if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 200 || r.body != "good" {
					t.Fatalf("request %d: %d %q", i, r.code, r.body)
				}
			}
			if bad.n.Load() == 0 {
				t.Fatal("the stalled target was never tried: nothing was retried")
			}
		})
		t.Run(cname+"/auto", func(t *testing.T) {
			// auto needs the target's latency: both answer first, then
			// one stalls for good.
			a, b := newBackend(t, "a"), newBackend(t, "b")
			g := start(t, base+"h2c: true\nupstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+targets([]*backend{a, b})+
				"    retry: {attempts: 2, on: [connect_error, timeout], try_timeout: auto}\n")
			for range 6 {
				if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 200 {
					t.Fatalf("warm-up: %d %q", r.code, r.body)
				}
			}
			stall := make(chan struct{})
			t.Cleanup(func() { close(stall) })
			a.hold.Store(&stall)
			before := a.hits.Load()
			for i := range 4 {
				if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 200 || r.body != "b" {
					t.Fatalf("request %d: %d %q", i, r.code, r.body)
				}
			}
			if a.hits.Load() == before {
				t.Fatal("the stalled target was never tried: nothing was retried")
			}
		})
	}
	t.Run("https upstream", func(t *testing.T) {
		dir := t.TempDir()
		ca := newCA(t, "server-ca")
		var stalled atomic.Int64
		bad := stallingTLSBackend(t, ca, true, &stalled)
		good := stallingTLSBackend(t, ca, false, nil)
		caFile := writeFile(t, dir, "ca.pem", string(ca.pem))
		g := start(t, base+fmt.Sprintf("upstreams:\n  api:\n    strategy: round_robin\n    tls: {ca_file: %q, server_name: backend.test}\n"+
			"    targets: [{url: \"https://%s\"}, {url: \"https://%s\"}]\n"+
			"    retry: {attempts: 2, on: [connect_error, timeout], try_timeout: 200ms}\n", caFile, bad, good))
		for i := range 4 {
			if r := get(t, client(), "http://"+g.Addr()+"/"); r.code != 200 || r.body != "good" {
				t.Fatalf("request %d: %d %q", i, r.code, r.body)
			}
		}
		if stalled.Load() == 0 {
			t.Fatal("the stalled target was never tried: nothing was retried")
		}
	})
}

// stallingTLSBackend is an HTTPS server for "backend.test" that answers
// "good", or, stalling, holds every request until its client leaves.
func stallingTLSBackend(t *testing.T, ca *testCA, stall bool, n *atomic.Int64) string {
	t.Helper()
	return tlsServer(t, ca, nil, func(w http.ResponseWriter, r *http.Request) {
		if stall {
			n.Add(1)
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "good")
	})
}

// The try timeout bounds every attempt but the last: a request slower
// than it at every target is cut once, then answered by the last
// attempt, which waits for timeouts.response_header.
func TestTryTimeoutLastAttemptWaits(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.delay.Store(int64(400 * time.Millisecond))
	b.delay.Store(int64(400 * time.Millisecond))
	g := start(t, base+"upstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+targets([]*backend{a, b})+
		"    retry: {attempts: 2, on: [connect_error, timeout], try_timeout: 100ms}\n")
	if r := get(t, client(), "http://"+g.Addr()+"/"); r.code != 200 {
		t.Fatalf("%d %q: the last attempt was cut too", r.code, r.body)
	}
	if n := a.hits.Load() + b.hits.Load(); n != 2 {
		t.Fatalf("the targets got %d requests, want 2 (one cut, one answered)", n)
	}
}

// A retry after a timed-out attempt waits in the capacity queue, as a
// retried refusal does: the only other target is at its
// max_concurrency, and answering 504 would give up on a request that
// its permit, freed a moment later, serves.
func TestTimedOutRetryWaitsInTheQueue(t *testing.T) {
	bad := newBadTarget(t, "hang")
	b := newBackend(t, "b")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	g := start(t, base+"upstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+
		"      - {url: \"http://"+bad.addr+"\"}\n      - {url: \""+b.url()+"\", max_concurrency: 1}\n"+
		"    queue: {max_wait: 30s}\n"+
		"    retry: {attempts: 2, on: [connect_error, timeout], try_timeout: 200ms}\n")
	first, second := make(chan resp, 1), make(chan resp, 1)
	go func() { first <- get(t, client(), "http://"+g.Addr()+"/") }()
	testenv.Eventually(t, "the first request holds b's only permit", func() bool { return b.cur.Load() == 1 })
	go func() { second <- get(t, client(), "http://"+g.Addr()+"/") }()
	testenv.Eventually(t, "the second request's retry queues for b", func() bool {
		return strings.Contains(metricsText(t, g), `fulcrum_gateway_queue_waiting{upstream="api"} 1`)
	})
	close(hold)
	for i, ch := range []chan resp{first, second} {
		if r := <-ch; r.code != 200 || r.body != "b" {
			t.Fatalf("request %d: %d %q", i+1, r.code, r.body)
		}
	}
	if bad.n.Load() == 0 {
		t.Fatal("the stalled target was never tried")
	}
}
