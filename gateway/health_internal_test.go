package gateway

import (
	"context"
	"strings"
	"testing"
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
