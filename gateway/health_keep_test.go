package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// A target change through the admin API keeps the probe loops of targets
// that stay: with an interval longer than the test, each target is probed
// once, when it joins. A checker restarted on every change (as discovery
// updates would cause) probes the staying targets again at once.
func TestTargetChangeKeepsHealthProbes(t *testing.T) {
	bs := backends(t, 3)
	g := start(t, base+`upstreams:
  api:
    targets:
`+targets(bs[:2])+`    health:
      active: {path: /healthz, interval: 1h, timeout: 5s, healthy_threshold: 1, unhealthy_threshold: 1}
`)
	c := client()
	probes := func(b *backend) string {
		m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
		prefix := `fulcrum_gateway_health_checks_total{result="ok",target="` + b.addr + `",upstream="api"} `
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				return v
			}
		}
		return "0"
	}
	testenv.Eventually(t, "first probes", func() bool { return probes(bs[0]) == "1" && probes(bs[1]) == "1" })
	body := fmt.Sprintf(`{"targets": [{"url": %q}, {"url": %q}, {"url": %q}]}`, bs[0].url(), bs[1].url(), bs[2].url())
	if r := do(t, c, "PUT", "http://"+g.AdminAddr()+"/upstreams/api/targets", strings.NewReader(body)); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	testenv.Eventually(t, "the new target probed", func() bool { return probes(bs[2]) == "1" })
	for _, b := range bs[:2] {
		if n := probes(b); n != "1" {
			t.Errorf("%s, in both sets, was probed %s times: its check restarted", b.name, n)
		}
	}

}
