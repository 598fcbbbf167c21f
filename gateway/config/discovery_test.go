package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

func TestDiscoveryDefaults(t *testing.T) {
	c, err := config.Parse([]byte(`
upstreams:
  a: {discovery: {dns: {name: api.internal, port: 8080}, warmup: 30s}}
  s: {discovery: {dns: {name: _http._tcp.api.internal, type: srv}}}
  f: {discovery: {file: {path: targets.yaml}}}
  e: {discovery: {etcd: {prefix: /fulcrum/upstreams/e/}}}
routes: [{upstream: a}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, s, e := c.Upstreams["a"].Discovery, c.Upstreams["s"].Discovery, c.Upstreams["e"].Discovery
	switch {
	case a.Kind() != "dns" || a.DNS.Type != "A" || a.DNS.Refresh.D() != 30*time.Second || a.DNS.Timeout.D() != 2*time.Second || a.Warmup.D() != 30*time.Second:
		t.Errorf("dns defaults: %+v %+v", a, a.DNS)
	case s.DNS.Type != "SRV":
		t.Errorf("type srv not normalised: %q", s.DNS.Type)
	case c.Upstreams["f"].Discovery.Kind() != "file":
		t.Errorf("file kind")
	case e.Kind() != "etcd" || len(e.Etcd.Endpoints) != 1 || e.Etcd.Endpoints[0] != "http://127.0.0.1:2379" || e.Etcd.DialTimeout.D() != 5*time.Second:
		t.Errorf("etcd defaults: %+v", e.Etcd)
	}
}

func TestTargetStartedAt(t *testing.T) {
	c, err := config.Parse([]byte("upstreams:\n  a:\n    targets: [{url: \"http://a:1\", started_at: 2026-11-23T10:00:00Z}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Upstreams["a"].Targets[0].StartedAt.Time; !got.Equal(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("started_at = %v", got)
	}
	ts, err := config.ParseTargets([]byte(`[{"url": "http://a:1", "started_at": "2026-11-23T10:00:00.5+01:00"}]`))
	if err != nil || ts[0].StartedAt.IsZero() {
		t.Fatalf("JSON started_at: %v %v", ts, err)
	}
}

func TestBadDiscovery(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"both", "upstreams:\n  a:\n    targets: [{url: \"http://a:1\"}]\n    discovery: {file: {path: x}}\n", "line 4: upstreams.a.discovery: targets and discovery exclude each other"},
		{"none", "upstreams:\n  a:\n    discovery: {warmup: 1s}\n", "line 3: upstreams.a.discovery: give exactly one of dns, file, etcd or provider (have 0)"},
		{"two", "upstreams:\n  a:\n    discovery: {file: {path: x}, etcd: {prefix: /p/}}\n", "have 2"},
		{"no port", "upstreams:\n  a:\n    discovery:\n      dns: {name: api.internal}\n", "line 4: upstreams.a.discovery.dns.port: 0 is not a port"},
		{"srv port", "upstreams:\n  a:\n    discovery:\n      dns:\n        name: x\n        type: SRV\n        port: 80\n", "line 7: upstreams.a.discovery.dns.port: SRV records carry their own ports"},
		{"type", "upstreams:\n  a:\n    discovery:\n      dns:\n        name: x\n        type: MX\n", "line 6: upstreams.a.discovery.dns.type: \"MX\" is not A or SRV"},
		{"name", "upstreams:\n  a:\n    discovery:\n      dns: {name: \"http://x\", port: 80}\n", "line 4: upstreams.a.discovery.dns.name"},
		{"server", "upstreams:\n  a:\n    discovery:\n      dns: {name: x, port: 80, server: 8.8.8.8}\n", "line 4: upstreams.a.discovery.dns.server: \"8.8.8.8\" is not host:port"},
		{"refresh", "upstreams:\n  a:\n    discovery:\n      dns: {name: x, port: 80, refresh: 1ms}\n", "line 4: upstreams.a.discovery.dns.refresh: 1ms is below 100ms"},
		{"file path", "upstreams:\n  a:\n    discovery:\n      file: {}\n", "line 4: upstreams.a.discovery.file.path: required"},
		{"etcd prefix", "upstreams:\n  a:\n    discovery:\n      etcd: {endpoints: [\"http://e:2379\"]}\n", "line 4: upstreams.a.discovery.etcd.prefix: required"},
		{"unknown field", "upstreams:\n  a:\n    discovery:\n      dns: {nmae: x}\n", "line 4: upstreams.a.discovery.dns.nmae: unknown field (did you mean name?)"},
		{"started_at", "upstreams:\n  a:\n    targets:\n      - {url: \"http://a:1\", started_at: yesterday}\n", "line 4: upstreams.a.targets[0].started_at: \"yesterday\" is not an RFC 3339 time"},
		// Values are shown as confyaml shows them: a number bare.
		{"started_at number", "upstreams:\n  a:\n    targets:\n      - {url: \"http://a:1\", started_at: 20261123}\n", "line 4: upstreams.a.targets[0].started_at: 20261123 is not an RFC 3339 time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}
