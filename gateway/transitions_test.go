package gateway_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Target health transitions are logged once each, with the cause: an
// active check's unhealthy and healthy, a passive ejection and the
// target's return.
func TestHealthTransitionsLoggedOnce(t *testing.T) {
	bs := backends(t, 2)
	cfg, err := config.Parse([]byte(base + "upstreams:\n  api:\n    strategy: round_robin\n    targets:\n" + targets(bs) +
		"    health:\n      active: {interval: 20ms, timeout: 1s, healthy_threshold: 2, unhealthy_threshold: 2}\n" +
		"      passive: {max_failures: 1, eject_for: 200ms}\n    retry: {attempts: 2, on: [503]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	g := startCfg(t, cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	count := func(msg, target string) int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="`+msg+`"`) && strings.Contains(l, "target="+target) {
				if !strings.Contains(l, "cause=") {
					t.Errorf("no cause in %q", l)
				}
				n++
			}
		}
		return n
	}
	c := client()
	url := "http://" + g.Addr() + "/"

	// Active: b2's health check fails, then passes again.
	// Awaited on the log lines: a verdict reaches the balancer (and the
	// admin view) just before its line is written.
	bs[1].health.Store(500)
	testenv.Eventually(t, "b2 unhealthy, logged", func() bool { return count("target unhealthy", bs[1].addr) >= 1 })
	bs[1].health.Store(0)
	testenv.Eventually(t, "b2 healthy, logged", func() bool { return count("target healthy", bs[1].addr) >= 1 })
	if u, h := count("target unhealthy", bs[1].addr), count("target healthy", bs[1].addr); u != 1 || h != 1 {
		t.Errorf("b2 logged unhealthy %d and healthy %d times, want once each:\n%s", u, h, logs.String())
	}

	// Passive: b1 answers 503 once (max_failures 1): ejected; once the
	// ejection is over and b1 answers again, it is back.
	bs[0].status.Store(503)
	testenv.Eventually(t, "b1 ejected", func() bool { get(t, c, url); return view(t, g, "api")[bs[0].url()].Ejected })
	bs[0].status.Store(0)
	testenv.Eventually(t, "b1 back", func() bool { get(t, c, url); return count("target back", bs[0].addr) == 1 })
	if n := count("target ejected", bs[0].addr); n != 1 {
		t.Errorf("b1 logged ejected %d times, want once:\n%s", n, logs.String())
	}
}
