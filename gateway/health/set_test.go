package health_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/health"
)

// probed is a target that counts its probes and reports each on a channel.
type probed struct {
	srv  *httptest.Server
	n    atomic.Int64
	seen chan struct{}
}

func newProbed(t *testing.T) *probed {
	p := &probed{seen: make(chan struct{}, 16)}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.n.Add(1)
		p.seen <- struct{}{}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *probed) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *probed) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-p.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("no probe of %s", what)
	}
}

// Changing the target set keeps the probe loop of a target that stays (it
// is not probed again at once, as a restarted checker would), starts one
// for a new target, and ends the loop of a removed one.
func TestSetKeepsStayingTargets(t *testing.T) {
	a, b, c := newProbed(t), newProbed(t), newProbed(t)
	// An interval far past the test: each loop probes once when it starts.
	ch := health.Start(health.Config{Path: "/", Interval: time.Hour, Timeout: 5 * time.Second, HealthyThreshold: 1, UnhealthyThreshold: 1},
		[]health.Target{{Addr: a.addr(), Healthy: true}, {Addr: b.addr(), Healthy: true}}, &verdicts{}, nil, nil)
	defer ch.Stop()
	a.await(t, "a at start")
	b.await(t, "b at start")

	ch.Set([]health.Target{{Addr: a.addr(), Healthy: true}, {Addr: c.addr(), Healthy: true}})
	c.await(t, "c, added")
	// Set again with b back: b's loop ended, so it starts anew.
	ch.Set([]health.Target{{Addr: a.addr(), Healthy: true}, {Addr: b.addr(), Healthy: true}, {Addr: c.addr(), Healthy: true}})
	b.await(t, "b, added back")
	ch.Stop()
	if n := a.n.Load(); n != 1 {
		t.Errorf("a, in every set, was probed %d times, want 1 (its loop restarted)", n)
	}
	if n := c.n.Load(); n != 1 {
		t.Errorf("c was probed %d times, want 1", n)
	}
	if n := b.n.Load(); n != 2 {
		t.Errorf("b was probed %d times, want 2 (removed, then added back)", n)
	}

}
