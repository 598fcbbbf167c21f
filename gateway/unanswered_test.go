package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// A target that accepts a request and never answers it (a black hole):
// the client that gives up must take the request's permit with it, on
// every path (CI runs this file with the event loop and without), and a
// client that waited well past the target's usual latency tells the
// balancer the target failed, while one that left sooner says nothing.
func TestClientLeavingAnUnansweredRequest(t *testing.T) {
	a := newBackend(t, "a")
	// response_header past the test's waits: only the client's leaving
	// can end the request.
	g := start(t, base+"timeouts: {response_header: 120s}\nupstreams:\n  api:\n    strategy: round_robin\n    targets:\n"+
		"      - {url: \""+a.url()+"\", max_concurrency: 1}\n    queue: {max_wait: 60s}\n")
	url := "http://" + g.Addr() + "/"
	for range 5 { // a mean latency of a millisecond or so
		if r := get(t, client(), url); r.code != 200 {
			t.Fatalf("warm-up: %d %q", r.code, r.body)
		}
	}
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	a.hold.Store(&stall)

	target := func() gateway.TargetView { return g.Upstreams()[0].Targets[0] }
	leave := func(after time.Duration) {
		t.Helper()
		c := &http.Client{Timeout: after}
		if res, err := c.Get(url); err == nil {
			res.Body.Close()
			t.Fatalf("answered %d, want the client's timeout", res.StatusCode)
		}
		testenv.Eventually(t, "the permit is back", func() bool { return target().InFlight == 0 })
	}

	// Left after 5 ms: far under the floor (100 ms, a margin for a busy
	// machine's late timer), nothing learned.
	leave(5 * time.Millisecond)
	if f := target().Failures; f != 0 {
		t.Fatalf("failures %d after a client left at 5 ms, want 0", f)
	}
	// Left after 400 ms: over four mean latencies and the floor, the
	// target was silent.
	leave(400 * time.Millisecond)
	if f := target().Failures; f != 1 {
		t.Fatalf("failures %d after a client left at 400 ms, want 1", f)
	}
	if avg := target().LatencyAvgMS; avg > 100 {
		t.Fatalf("mean latency %.1f ms: the silence counted as a latency", avg)
	}
	// Each is logged and counted as nginx does, 499 (no target answered).
	want := `fulcrum_gateway_requests_total{code="499",target="",upstream="api"} 2`
	testenv.Eventually(t, "two 499s counted", func() bool {
		return strings.Contains(get(t, client(), "http://"+g.AdminAddr()+"/metrics").body, want)
	})
	// The one permit is free: the next request takes it at once (it
	// would wait in the queue for the stalled one otherwise).
	a.hold.Store(nil)
	if r := get(t, client(), url); r.code != 200 {
		t.Fatalf("after: %d %q", r.code, r.body)
	}
}
