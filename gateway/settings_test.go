package gateway_test

import "testing"

// An upstream's strategy_settings reach its strategy: capacity starts its
// learned limits at the configured initial_limit, not its default of 20.
func TestStrategySettingsReachTheStrategy(t *testing.T) {
	bs := backends(t, 2)
	g := start(t, base+"upstreams:\n  api:\n    strategy: capacity\n    strategy_settings: {initial_limit: 3, max_limit: 50}\n    targets:\n"+targets(bs))
	ups := g.ConsoleUpstreams()
	if len(ups) != 1 || len(ups[0].Targets) != 2 {
		t.Fatalf("upstreams %+v", ups)
	}
	for _, tv := range ups[0].Targets {
		if tv.Permits != 3 || tv.PermitsSource != "learned" {
			t.Errorf("%s: permits %d (%s), want 3 learned from initial_limit", tv.Addr, tv.Permits, tv.PermitsSource)
		}
	}
	// The admin API's GET /upstreams/{name} shows them too.
	for url, tv := range view(t, g, "api") {
		if tv.Permits != 3 || tv.PermitsSource != "learned" {
			t.Errorf("GET /upstreams/api, %s: permits %d (%q), want 3 learned", url, tv.Permits, tv.PermitsSource)
		}
	}
}
