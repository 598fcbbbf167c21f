package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

func upstreamWith(strategy, settings string) string {
	return "upstreams:\n  api:\n    strategy: " + strategy + "\n    targets: [{url: \"http://a:1\"}]\n    strategy_settings:\n" + settings
}

// Each strategy's settings reach it from the upstream's strategy_settings,
// decoded by the strategy itself.
func TestStrategySettingsParse(t *testing.T) {
	for _, tc := range []struct {
		strategy, settings string
		check              func(balance.Settings) error
	}{
		{"bounded_hash", "      load_bound: 1.5\n      virtual_nodes: 64\n      function: md5\n", func(s balance.Settings) error {
			var v balance.BoundedHashSettings
			if err := s.Decode(&v); err != nil || v.LoadBound != 1.5 || v.VirtualNodes != 64 || v.Function != "md5" {
				return errors.New("bounded_hash settings lost")
			}
			return nil
		}},
		{"p2c", "      decay: 3s\n", func(s balance.Settings) error {
			var v balance.P2CSettings
			if err := s.Decode(&v); err != nil || v.Decay != 3*time.Second {
				return errors.New("p2c decay lost")
			}
			return nil
		}},
		{"capacity", "      initial_limit: 50\n      max_limit: 1000\n", func(s balance.Settings) error {
			var v map[string]float64
			if err := s.Decode(&v); err != nil || v["initial_limit"] != 50 || v["max_limit"] != 1000 {
				return errors.New("capacity settings lost")
			}
			return nil
		}},
	} {
		c, err := config.Parse([]byte(upstreamWith(tc.strategy, tc.settings)))
		if err != nil {
			t.Fatalf("%s: %v", tc.strategy, err)
		}
		u := c.Upstreams["api"]
		if err := tc.check(u.Settings()); err != nil {
			t.Errorf("%s: %v", tc.strategy, err)
		}
		if _, err := balance.New(u.Strategy, balance.Options{Settings: u.Settings()}); err != nil {
			t.Errorf("%s: %v", tc.strategy, err)
		}
	}
	c, err := config.Parse([]byte("upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n"))
	if err != nil || c.Upstreams["api"].Settings() != nil {
		t.Fatalf("no strategy_settings: %v, settings %v", err, c.Upstreams["api"].Settings())
	}
}

// A bad setting is refused like any other field: its path and line.
func TestStrategySettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		strategy, settings string
		want               []string
	}{
		{"bounded_hash", "      load_bound: 0.5\n", []string{"line 6: upstreams.api.strategy_settings.load_bound", "must be above 1"}},
		{"bounded_hash", "      load_bound: lots\n", []string{"line 6: upstreams.api.strategy_settings.load_bound", "lots"}},
		{"bounded_hash", "      virtual_nodes: 64\n      load_bund: 2\n", []string{"line 7: upstreams.api.strategy_settings.load_bund: unknown field (did you mean load_bound?)"}},
		{"hash", "      function: crc32\n", []string{"line 6: upstreams.api.strategy_settings.function", "crc32"}},
		{"hash", "      virtual_nodes: -1\n", []string{"line 6: upstreams.api.strategy_settings.virtual_nodes", "negative"}},
		{"p2c", "      decay: -2s\n", []string{"line 6: upstreams.api.strategy_settings.decay", "negative"}},
		{"shortest_response", "      window: soon\n", []string{"line 6: upstreams.api.strategy_settings.window"}},
		{"capacity", "      tolerance: 1\n", []string{"line 6: upstreams.api.strategy_settings.tolerance", "above 1"}},
		{"capacity", "      initial_limt: 5\n", []string{"line 6: upstreams.api.strategy_settings.initial_limt", "initial_limit"}},
		{"capacity", "      min_limit: few\n", []string{"line 6: upstreams.api.strategy_settings.min_limit", "few"}},
		{"round_robin", "      anything: 1\n", []string{"line 6: upstreams.api.strategy_settings.anything", "no settings"}},
		{"bounded_hash", "      - 1.5\n", []string{"line 6: upstreams.api.strategy_settings", "mapping"}},
	} {
		_, err := config.Parse([]byte(upstreamWith(tc.strategy, tc.settings)))
		if err == nil {
			t.Errorf("%s %q: accepted", tc.strategy, tc.settings)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %q: error %q lacks %q", tc.strategy, tc.settings, err, w)
			}
		}
	}
}

// Reloading with the same settings keeps the balancer; changed ones do not.
func TestSameSettings(t *testing.T) {
	parse := func(settings string) *config.Upstream {
		c, err := config.Parse([]byte(upstreamWith("bounded_hash", settings)))
		if err != nil {
			t.Fatal(err)
		}
		return c.Upstreams["api"]
	}
	a, b, c := parse("      load_bound: 1.5\n"), parse("      load_bound: 1.5   # same\n"), parse("      load_bound: 2\n")
	if !a.SameSettings(b) || a.SameSettings(c) {
		t.Errorf("SameSettings: same %v, changed %v", a.SameSettings(b), a.SameSettings(c))
	}
}

// warmup: linear is the default; seed, its old name, is accepted as
// linear; anything else is refused naming both.
func TestWarmupNames(t *testing.T) {
	for in, want := range map[string]string{"": "linear", "warmup: linear\n": "linear", "warmup: seed\n": "linear", "warmup: envoy\n": "envoy"} {
		c, err := config.Parse([]byte("upstreams:\n  api:\n    " + in + "    targets: [{url: \"http://a:1\"}]\n"))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := c.Upstreams["api"].Warmup; got != want {
			t.Errorf("%q: warmup %q, want %q", in, got, want)
		}
	}
	_, err := config.Parse([]byte("upstreams:\n  api:\n    warmup: cubic\n    targets: [{url: \"http://a:1\"}]\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3: upstreams.api.warmup") || !strings.Contains(err.Error(), "linear or envoy") {
		t.Errorf("warmup: cubic: %v", err)
	}
}
