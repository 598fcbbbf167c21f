package gateway

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// A reload keeps an upstream's active checker when the check and the
// balancer stay, and replaces it when the check changes or the upstream
// gets a new balancer (verdicts must reach the balancer in use).
func TestReloadKeepsUnchangedChecker(t *testing.T) {
	conf := func(strategy, interval string) string {
		return "upstreams:\n  api:\n    strategy: " + strategy + "\n    targets: [{url: \"http://127.0.0.1:1\"}]\n" +
			"    health: {active: {path: /healthz, interval: " + interval + "}}\n"
	}
	g := newTestGateway(t, conf("round_robin", "1h"))
	checker := func() any { return g.rt.Load().ups["api"].checker.Load() }
	first := checker()
	if first == nil {
		t.Fatal("no checker")
	}
	steps := []struct {
		strategy, interval string
		same               bool
	}{
		{"round_robin", "1h", true},
		{"round_robin", "2h", false},
		{"least_active", "2h", false},
		{"least_active", "2h", true},
	}
	prev := first
	for _, s := range steps {
		if err := g.ApplyConfig(testConfig(t, conf(s.strategy, s.interval))); err != nil {
			t.Fatal(err)
		}
		now := checker()
		if (now == prev) != s.same {
			t.Errorf("reload to %s/%s: checker kept %v, want %v", s.strategy, s.interval, now == prev, s.same)
		}
		prev = now
	}
}

// Once Shutdown has begun, a reload is refused and a target change starts
// no checker: either would leave probe loops (and discovery watchers)
// running after the gateway stopped them.
func TestNoChecksAfterShutdown(t *testing.T) {
	text := "upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\n    health: {active: {path: /healthz, interval: 1h}}\n"
	g := newTestGateway(t, text)
	if err := g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplyConfig(testConfig(t, text)); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("reload after shutdown: %v, want a refusal", err)
	}
	u := g.rt.Load().ups["api"]
	if u.checker.Load() != nil {
		t.Fatal("a checker survived Shutdown")
	}
	g.mu.Lock()
	err := g.applySet(u, &targetSet{source: sourceAdmin, targets: u.set.Load().targets})
	g.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if u.checker.Load() != nil {
		t.Error("a target change after Shutdown started a checker")
	}
}

// A reload that changes only a strategy's settings hands them to the live
// balancer, whose targets keep what they learned; one that changes the
// strategy builds a new balancer and says so in the log.
func TestReloadKeepsLearnedState(t *testing.T) {
	conf := func(strategy, settings string) string {
		return "upstreams:\n  api:\n    strategy: " + strategy + "\n    targets: [{url: \"http://127.0.0.1:1\"}]\n" + settings
	}
	var logs syncLog
	cfg := testConfig(t, conf("capacity", ""))
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	bal := g.rt.Load().ups["api"].bal
	var held []balance.Pick
	for range 20 {
		p, err := bal.Pick("")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	held[19].Report(time.Millisecond, errStatus(503)) // refused at 20 in flight: 19 permits learned
	limit := func() int64 { return g.rt.Load().ups["api"].bal.Endpoints()[0].Limit }
	if l := limit(); l != 19 {
		t.Fatalf("learned limit %d, want 19", l)
	}
	if err := g.ApplyConfig(testConfig(t, conf("capacity", "    strategy_settings: {tolerance: 3}\n"))); err != nil {
		t.Fatal(err)
	}
	if g.rt.Load().ups["api"].bal != bal || limit() != 19 || bal.Endpoints()[0].InFlight != 19 {
		t.Fatalf("new settings: balancer kept %v, limit %d, in flight %d; want kept, 19, 19",
			g.rt.Load().ups["api"].bal == bal, limit(), bal.Endpoints()[0].InFlight)
	}
	if !strings.Contains(logs.String(), "strategy settings applied") {
		t.Errorf("reload log does not say the settings went to the live balancer:\n%s", logs.String())
	}
	if err := g.ApplyConfig(testConfig(t, conf("least_active", ""))); err != nil {
		t.Fatal(err)
	}
	if g.rt.Load().ups["api"].bal == bal {
		t.Fatal("a new strategy kept the old balancer")
	}
	if !strings.Contains(logs.String(), "balancer rebuilt") || !strings.Contains(logs.String(), "strategy changed from capacity") {
		t.Errorf("reload log does not say the balancer was rebuilt and why:\n%s", logs.String())
	}
	for _, p := range held[:19] {
		p.Done(nil)
	}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
