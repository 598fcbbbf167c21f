package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

const issueExample = `listen: 127.0.0.1:8080
admin: {listen: 127.0.0.1:9901, token: ""}   # token required off loopback
upstreams:
  api:
    strategy: round_robin        # any balance strategy name
    hash_key: client_ip          # client_ip | header:NAME | cookie:NAME | query:NAME | path
    targets:
      - {url: "http://127.0.0.1:9001", weight: 5, warmup: 30s, max_concurrency: 200}
    health:
      active:  {path: /healthz, interval: 5s, timeout: 2s, healthy_threshold: 2, unhealthy_threshold: 3}
      passive: {max_failures: 5, window: 10s, eject_for: 30s, max_ejected_percent: 50}
    retry:   {attempts: 2, on: [connect_error, 502, 503, 504]}
    queue:   {max_wait: 1s}
routes:
  - {match: {host: "", path_prefix: /}, upstream: api}
`

// The issue's example parses as written, with its values.
func TestIssueExample(t *testing.T) {
	c, err := config.Parse([]byte(issueExample))
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams["api"]
	tg := u.Targets[0]
	if tg.Addr != "127.0.0.1:9001" || tg.W() != 5 || tg.Warmup.D() != 30*time.Second || tg.MaxConcurrency != 200 {
		t.Errorf("target %+v", tg)
	}
	if u.Health.Active.UnhealthyThreshold != 3 || u.Health.Passive.MaxFailures != 5 || u.Health.Passive.MaxEjectFor.D() != 300*time.Second {
		t.Errorf("health %+v %+v", u.Health.Active, u.Health.Passive)
	}
	if u.Retry.Attempts != 2 || len(u.Retry.Statuses) != 3 || u.Queue.MaxWait.D() != time.Second {
		t.Errorf("retry %+v queue %+v", u.Retry, u.Queue)
	}
	if c.Routes[0].Upstream != "api" || c.Routes[0].Match.PathPrefix != "/" {
		t.Errorf("routes %+v", c.Routes)
	}
}

// Defaults fill a minimal config.
func TestDefaults(t *testing.T) {
	c, err := config.Parse([]byte("upstreams:\n  web:\n    targets: [{url: \"http://10.0.0.1:80\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams["web"]
	switch {
	case c.Listen != "127.0.0.1:8080", c.Admin.Listen != "127.0.0.1:9901", !c.AccessLog.On(), c.AccessLog.Format != "text":
		t.Errorf("top-level defaults: %+v", c)
	case u.Strategy != "round_robin", u.HashKey != "client_ip", u.Targets[0].W() != 1:
		t.Errorf("upstream defaults: %+v", u)
	case u.Retry.Attempts != 2, u.Retry.Budget != 0.2, u.Retry.MinPerSecond != 10, u.Retry.BufferBody != 64<<10:
		t.Errorf("retry defaults: %+v", u.Retry)
	case c.Timeouts.Dial.D() != 2*time.Second, c.Timeouts.ResponseHeader.D() != 30*time.Second, c.MaxBodySize != 10<<20:
		t.Errorf("timeouts/limits: %+v %d", c.Timeouts, c.MaxBodySize)
	case len(c.Routes) != 1 || c.Routes[0].Upstream != "web":
		t.Errorf("the single upstream is not routed by default: %+v", c.Routes)
	}
}

// retry.try_timeout is off by default, "auto" or a duration.
func TestTryTimeout(t *testing.T) {
	for _, tc := range []struct {
		v     string
		after time.Duration
		auto  bool
	}{{"", 0, false}, {"auto", 0, true}, {"250ms", 250 * time.Millisecond, false}} {
		y := "upstreams:\n  web:\n    targets: [{url: \"http://10.0.0.1:80\"}]\n    retry: {on: [timeout], try_timeout: \"" + tc.v + "\"}\n"
		c, err := config.Parse([]byte(y))
		if err != nil {
			t.Fatalf("%q: %v", tc.v, err)
		}
		if r := c.Upstreams["web"].Retry; r.TryAfter != tc.after || r.TryAuto != tc.auto {
			t.Errorf("%q: TryAfter %v, TryAuto %v", tc.v, r.TryAfter, r.TryAuto)
		}
	}
}

// An empty health.passive turns ejection on with the balance library's
// defaults, and the warm-up formula defaults to the library's: the file
// and a Go program using balance get the same behaviour.
func TestPassiveAndWarmupDefaultsAreBalances(t *testing.T) {
	c, err := config.Parse([]byte("upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    health: {passive: {}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams["api"]
	p := u.Health.Passive
	got := balance.Passive{MaxFailures: p.MaxFailures, Window: p.Window.D(), EjectFor: p.EjectFor.D(), MaxEjectFor: p.MaxEjectFor.D(), MaxEjectedPercent: p.MaxEjectedPercent}
	if want := (balance.Passive{MaxFailures: balance.DefaultMaxFailures}).WithDefaults(); got != want {
		t.Errorf("health.passive defaults %+v, want balance's %+v", got, want)
	}
	if u.Warmup != balance.DefaultWarmup {
		t.Errorf("warmup %q, want balance's %q", u.Warmup, balance.DefaultWarmup)
	}
}

// queue.lifo_after defaults to adaptive LIFO by the waiters' patience
// where requests wait; set, even to 0, it is kept.
func TestLIFODefault(t *testing.T) {
	for _, c := range []struct {
		queue string
		want  time.Duration
	}{
		{"{}", 0}, // no queue: nothing waits
		{"{max_wait: 100ms}", balance.LIFOPatience},
		{"{max_wait: 5s}", balance.LIFOPatience}, // the default
		{"{max_wait: 5s, lifo_after: 0s}", 0},    // first come, first served, asked for
		{"{max_wait: 5s, lifo_after: 1s}", time.Second},
	} {
		cfg, err := config.Parse([]byte("upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    queue: " + c.queue + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.queue, err)
		}
		if got := cfg.Upstreams["api"].Queue.LIFO(); got != c.want {
			t.Errorf("queue %s: lifo after %v, want %v", c.queue, got, c.want)
		}
	}
}

// Bad configs are refused with the field's path and line.
func TestBadConfigs(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown field", "upstreams:\n  api:\n    targets:\n      - {url: \"http://a:1\", wieght: 5}\n", []string{"line 4: upstreams.api.targets[0].wieght: unknown field (did you mean weight?)"}},
		{"unknown top field", "listne: x\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n", []string{"line 1: listne: unknown field (did you mean listen?)"}},
		{"bad duration", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    queue: {max_wait: 5 seconds}\n", []string{"line 4: upstreams.api.queue.max_wait", `"5 seconds" is not a duration`}},
		{"lifo without a queue", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    queue: {lifo_after: 100ms}\n", []string{"line 4: upstreams.api.queue.lifo_after", "without queue.max_wait"}},
		{"lifo past the wait", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    queue: {max_wait: 1s, lifo_after: 1s}\n", []string{"line 4: upstreams.api.queue.lifo_after", "1s is not below queue.max_wait (1s)"}},
		{"negative duration", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\", warmup: -1s}]\n", []string{"line 3: upstreams.api.targets[0].warmup", "negative"}},
		{"bad url scheme", "upstreams:\n  api:\n    targets:\n      - {url: \"ftp://a:1\"}\n", []string{"line 4: upstreams.api.targets[0].url", "scheme must be http"}},
		{"url with path", "upstreams:\n  api:\n    targets:\n      - {url: \"http://a:1/x\"}\n", []string{"targets[0].url", "only scheme, host and port"}},
		{"bad port", "upstreams:\n  api:\n    targets:\n      - {url: \"http://a:99999\"}\n", []string{"targets[0].url", "port"}},
		{"duplicate target", "upstreams:\n  api:\n    targets:\n      - {url: \"http://a:1\"}\n      - {url: \"http://a:1/\"}\n", []string{"line 5: upstreams.api.targets[1].url", "repeats targets[0]"}},
		{"no targets", "upstreams:\n  api:\n    strategy: random\n", []string{"upstreams.api.targets", "at least one target"}},
		{"unknown strategy", "upstreams:\n  api:\n    strategy: fastest\n    targets: [{url: \"http://a:1\"}]\n", []string{"line 3: upstreams.api.strategy", `unknown strategy "fastest"`, "round_robin"}},
		{"bad hash key", "upstreams:\n  api:\n    hash_key: header\n    targets: [{url: \"http://a:1\"}]\n", []string{"line 3: upstreams.api.hash_key", "needs a name"}},
		{"bad hash kind", "upstreams:\n  api:\n    hash_key: ip\n    targets: [{url: \"http://a:1\"}]\n", []string{"upstreams.api.hash_key", "client_ip, header:NAME"}},
		{"path with name", "upstreams:\n  api:\n    hash_key: path:x\n    targets: [{url: \"http://a:1\"}]\n", []string{"hash_key", "takes no name"}},
		{"route to nowhere", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\nroutes:\n  - {match: {path_prefix: /}, upstream: apx}\n", []string{"line 5: routes[0].upstream", `no upstream named "apx"`}},
		{"route prefix", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\nroutes:\n  - {match: {path_prefix: api}, upstream: api}\n", []string{"routes[0].match.path_prefix", "must start with /"}},
		{"routes needed", "upstreams:\n  a: {targets: [{url: \"http://a:1\"}]}\n  b: {targets: [{url: \"http://b:1\"}]}\n", []string{"routes", "more than one upstream"}},
		{"retry on", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {on: [connect_error, 404]}\n", []string{"upstreams.api.retry.on[1]", `"404" is not connect_error, timeout, 429 or a 5xx status`}},
		{"retry on 428", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {on: [429, 428]}\n", []string{"upstreams.api.retry.on[1]", `"428"`}},
		{"try timeout value", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {on: [timeout], try_timeout: 5}\n", []string{"line 4: upstreams.api.retry.try_timeout", `"5" is not auto or a positive duration with a unit`}},
		{"try timeout without timeout", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {try_timeout: auto}\n", []string{"upstreams.api.retry.try_timeout", "needs timeout in retry.on"}},
		{"try timeout one attempt", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {attempts: 1, on: [timeout], try_timeout: 1s}\n", []string{"upstreams.api.retry.try_timeout", "attempts 1"}},
		{"retry attempts", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {attempts: 50}\n", []string{"upstreams.api.retry.attempts", "1..10"}},
		{"retry requeues", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    retry: {requeues: -1}\n", []string{"upstreams.api.retry.requeues", "0..10"}},
		{"ejected percent", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    health: {passive: {max_ejected_percent: 150}}\n", []string{"health.passive.max_ejected_percent", "150"}},
		{"max eject below eject", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n    health: {passive: {eject_for: 10s, max_eject_for: 1s}}\n", []string{"health.passive.max_eject_for", "below eject_for"}},
		{"admin off loopback", "admin: {listen: \"0.0.0.0:9901\"}\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n", []string{"line 1: admin.token", "not a loopback"}},
		{"listen", "listen: 8080\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n", []string{"line 1: listen", "host:port"}},
		{"size", "max_body_size: 10 parsecs\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n", []string{"line 1: max_body_size", "not a size"}},
		{"wrong type", "upstreams:\n  api:\n    targets: [{url: \"http://a:1\", weight: heavy}]\n", []string{"line 3", "heavy"}},
		{"yaml syntax", "upstreams:\n  api: [\n", []string{"line 2: invalid YAML: did not find expected"}},
		{"empty", "", []string{"upstreams", "at least one upstream"}},
		{"http2 server", "http2_server: nghttp2\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n", []string{"line 1: http2_server", "nghttp2"}},
		{"log format", "access_log: {format: xml}\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n", []string{"line 1: access_log.format", "xml"}},
		{"several at once", "upstreams:\n  api:\n    strategy: nope\n    targets: [{url: \"gopher://x\"}]\n", []string{"2 problems", "upstreams.api.strategy", "targets[0].url"}},
		{"settings for none", "upstreams:\n  api:\n    strategy: round_robin\n    strategy_settings: 5\n    targets: [{url: \"http://a:1\"}]\n", []string{"line 4: upstreams.api.strategy_settings: this section takes no settings, got 5"}},
		// Checked upstreams first, listed in file order: the routes come first here.
		{"file order", "routes:\n  - {upstream: apx}\nupstreams:\n  api:\n    strategy: nope\n    targets: [{url: \"http://a:1\"}]\nlisten: x\n",
			[]string{"3 problems:\n  line 2: routes[0].upstream: no upstream named \"apx\"", "\n  line 5: upstreams.api.strategy", "\n  line 7: listen"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *config.Error: %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Sizes are read with confyaml's rules: bytes, KiB/MiB/GiB or KB/MB/GB.
func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "64KiB": 64 << 10, "10MiB": 10 << 20, "1KB": 1000, "2 MB": 2e6, "5B": 5} {
		c, err := config.Parse([]byte("max_body_size: " + in + "\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n"))
		if err != nil || c.MaxBodySize.Bytes() != want {
			t.Errorf("max_body_size: %s = %v, %v; want %d", in, c, err, want)
		}
	}
	for _, in := range []string{"-1", "1.5MiB", "10XB", "99999999999999999999"} {
		if _, err := config.Parse([]byte("max_body_size: " + in + "\nupstreams: {api: {targets: [{url: \"http://a:1\"}]}}\n")); err == nil || !strings.Contains(err.Error(), "line 1: max_body_size: ") {
			t.Errorf("max_body_size: %s: %v, want an error on line 1", in, err)
		}
	}
}

func TestParseTargets(t *testing.T) {
	for _, body := range []string{
		`[{"url": "http://a:1", "weight": 3}]`,
		`{"targets": [{"url": "http://a:1", "weight": 3}]}`,
		"- {url: \"http://a:1\", weight: 3}\n",
	} {
		ts, err := config.ParseTargets([]byte(body))
		if err != nil || len(ts) != 1 || ts[0].W() != 3 || ts[0].Addr != "a:1" {
			t.Errorf("ParseTargets(%s) = %+v, %v", body, ts, err)
		}
	}
	if _, err := config.ParseTargets([]byte(`[{"url": "http://a:1"}, {"url": ""}]`)); err == nil || !strings.Contains(err.Error(), "targets[1].url") {
		t.Errorf("empty url: %v", err)
	}
	// A bare list's errors name its own lines, as the wrapped form's do.
	for body, want := range map[string]string{
		"- {url: \"http://a:1\"}\n- {url: \"http://a:2\", weight: -2}\n":               "line 2: targets[1].weight: -2 is negative",
		"targets:\n  - {url: \"http://a:1\"}\n  - {url: \"http://a:2\", weight: -2}\n": "line 3: targets[1].weight: -2 is negative",
		"- url: http://a:1\n  wieght: 2\n":                                             "line 2: targets[0].wieght: unknown field (did you mean weight?)",
		"{\"targets\": [], \"extra\": 1}":                                              "line 1: extra: unknown field",
		"5":                                                                            `line 1: want a list of targets or {"targets": [...]}`,
		"{}":                                                                           "line 1: targets: at least one target is required",
		"\n\n{}":                                                                       "line 3: targets: at least one target is required",
		"[{url: \"http://a:1\"}]\n---\n[{url: \"http://a:2\"}]\n": "line 2: a second YAML document",
	} {
		if _, err := config.ParseTargets([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTargets(%q) = %v, want %q", body, err, want)
		}
	}
}

// FuzzParseTargets: no body panics; an accepted list is whole (every
// target has an address and a weight that is not negative); a refusal
// says something.
func FuzzParseTargets(f *testing.F) {
	for _, s := range []string{
		`[{"url": "http://a:1", "weight": 3}]`,
		`{"targets": [{"url": "http://a:1", "warmup": "5s", "started_at": "2026-11-23T21:00:00Z"}]}`,
		"- {url: \"http://a:1\"}\n- {url: \"ftp://x\", weight: -2}\n",
		"- &t {url: \"http://a:1\"}\n- *t\n",
		"targets: [\n",
		"5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := config.ParseTargets([]byte(s))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, tg := range ts {
			if tg.Addr == "" || tg.W() < 0 || tg.Warmup < 0 {
				t.Fatalf("accepted %+v", tg)
			}
		}
	})
}

// FuzzParse: no input panics; an accepted config is whole (every route
// names an upstream, every target has an address, every strategy exists).
func FuzzParse(f *testing.F) {
	f.Add(issueExample)
	f.Add("upstreams:\n  api:\n    targets: [{url: \"http://a:1\"}]\n")
	f.Add("upstreams:\n  api:\n    hash_key: cookie:s\n    strategy: hash\n    targets: [{url: \"http://a:1\", weight: 0}]\nroutes: [{match: {host: \"*.x\"}, upstream: api}]\n")
	f.Add("listen: [\n")
	f.Add("upstreams: {a: ~}\n")
	f.Add("upstreams: &a {x: *a}\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := config.Parse([]byte(s))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for i, r := range c.Routes {
			if c.Upstreams[r.Upstream] == nil {
				t.Fatalf("route %d names missing upstream %q", i, r.Upstream)
			}
		}
		for name, u := range c.Upstreams {
			if len(u.Targets) == 0 || u.Retry.Attempts < 1 {
				t.Fatalf("upstream %s accepted incomplete: %+v", name, u)
			}
			for _, tg := range u.Targets {
				if tg.Addr == "" || tg.W() < 0 {
					t.Fatalf("upstream %s target %+v", name, tg)
				}
			}
		}
	})
}

// Every example config in examples/gateway parses.
func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../../examples/gateway/*.yaml")
	if len(files) == 0 {
		t.Skip("no examples")
	}
	for _, f := range files {
		if _, err := config.Load(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// A type error inside a one-line entry names the field whose value is
// wrong, not the entry's first key.
func TestTypeErrorNamesTheField(t *testing.T) {
	_, err := config.Parse([]byte("upstreams:\n  api:\n    targets:\n      - {url: \"http://127.0.0.1:9001\", weight: abc}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 4: upstreams.api.targets[0].weight") {
		t.Fatalf("got %v, want the error on targets[0].weight", err)
	}
}

// Load reads a relative path against the file's folder, whatever the
// working directory; LoadWith's override goes over the file before
// validation; Parse leaves paths as written.
func TestLoadResolvesPathsAndOverrides(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	body := "listen: 127.0.0.1:8080\ntls: {cert_file: c.pem, key_file: /abs/k.pem}\naccess_log: {path: stderr}\n" +
		"upstreams:\n  web:\n    discovery: {file: {path: sub/targets.yaml}}\n" +
		"  api:\n    tls: {ca_file: ca.pem}\n    targets: [{url: \"https://127.0.0.1:9\"}]\n" +
		"routes: [{upstream: web}]\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.LoadWith(path, func(c *config.Config) { c.Listen = "127.0.0.1:18080" })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][2]string{
		{c.Upstreams["web"].Discovery.File.Path, filepath.Join(dir, "sub/targets.yaml")},
		{c.TLS.CertFile, filepath.Join(dir, "c.pem")},
		{c.TLS.KeyFile, "/abs/k.pem"},
		{c.Upstreams["api"].TLS.CAFile, filepath.Join(dir, "ca.pem")},
		{c.AccessLog.Path, "stderr"},
		{c.Listen, "127.0.0.1:18080"},
	} {
		if tc[0] != tc[1] {
			t.Errorf("got %q, want %q", tc[0], tc[1])
		}
	}
	if _, err := config.LoadWith(path, func(c *config.Config) { c.Admin.Listen = "0.0.0.0:9901" }); err == nil || !strings.Contains(err.Error(), "admin.token") {
		t.Errorf("an override is validated like the file: %v", err)
	}
}
