package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// PUT /upstreams/{name}/targets replaces the set: targets that stay keep
// their counters, new ones start fresh and warm up, and a bad body is
// refused whole with the field named.
func TestAdminReplaceKeepsState(t *testing.T) {
	bs := backends(t, 3)
	g := start(t, base+"upstreams:\n  api:\n    targets:\n"+targets(bs[:2]))
	c := client()
	for range 10 {
		get(t, c, "http://"+g.Addr()+"/")
	}
	admin := "http://" + g.AdminAddr() + "/upstreams/api/targets"
	body := fmt.Sprintf(`{"targets": [{"url": %q}, {"url": %q, "weight": 2}, {"url": %q, "warmup": "1m"}]}`, bs[0].url(), bs[1].url(), bs[2].url())
	if r := do(t, c, "PUT", admin, strings.NewReader(body)); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	v := view(t, g, "api")
	if v[bs[0].url()].Requests != 5 || v[bs[1].url()].Requests != 5 {
		t.Errorf("kept targets lost their counters: %+v", v)
	}
	if v[bs[1].url()].Weight != 2 {
		t.Errorf("b2 weight %d, want 2", v[bs[1].url()].Weight)
	}
	if n := v[bs[2].url()]; n.Requests != 0 || !n.Warming {
		t.Errorf("new target: %+v, want fresh and warming", n)
	}

	bad := []struct{ body, want string }{
		{fmt.Sprintf(`[{"url": %q}, {"url": "ftp://x:1"}]`, bs[0].url()), "targets[1].url"},
		{fmt.Sprintf(`[{"url": %q, "wieght": 3}]`, bs[0].url()), "targets[0].wieght"},
		{fmt.Sprintf(`[{"url": %q, "weight": -1}]`, bs[0].url()), "targets[0].weight"},
		{fmt.Sprintf(`[{"url": %q, "warmup": "soon"}]`, bs[0].url()), "targets[0].warmup"},
		{fmt.Sprintf(`[{"url": %q}, {"url": %q}]`, bs[0].url(), bs[0].url()), "targets[1].url"},
		{`{"targets": `, "line 1: invalid YAML"},
	}
	for _, tc := range bad {
		r := do(t, c, "PUT", admin, strings.NewReader(tc.body))
		if r.code != 400 || !strings.Contains(r.body, tc.want) {
			t.Errorf("PUT %s: %d %s, want 400 naming %s", tc.body, r.code, r.body, tc.want)
		}
	}
	if n := len(view(t, g, "api")); n != 3 {
		t.Errorf("after refused bodies the upstream has %d targets, want the 3 it had", n)
	}
	if r := do(t, c, "PUT", "http://"+g.AdminAddr()+"/upstreams/nope/targets", strings.NewReader(body)); r.code != 404 {
		t.Errorf("unknown upstream: %d, want 404", r.code)
	}
}

// An admin listener off loopback requires a token; with one, requests
// without it get 401.
func TestAdminToken(t *testing.T) {
	b := newBackend(t, "b1")
	_, err := config.Parse([]byte("admin: {listen: 0.0.0.0:0}\nupstreams:\n  api:\n    targets:\n      - {url: \"" + b.url() + "\"}\n"))
	if err == nil || !strings.Contains(err.Error(), "admin.token") {
		t.Fatalf("off-loopback admin without token: %v, want an admin.token error", err)
	}
	g := start(t, "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token: s3cret}\naccess_log: {enabled: false}\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	c := client()
	if r := get(t, c, "http://"+g.AdminAddr()+"/upstreams"); r.code != 401 {
		t.Errorf("no token: %d, want 401", r.code)
	}
	if r := get(t, c, "http://"+g.AdminAddr()+"/upstreams", "Authorization", "Bearer wrong"); r.code != 401 {
		t.Errorf("wrong token: %d, want 401", r.code)
	}
	if r := get(t, c, "http://"+g.AdminAddr()+"/upstreams", "Authorization", "Bearer s3cret"); r.code != 200 {
		t.Errorf("right token: %d, want 200", r.code)
	}
}

// Reloading under load fails no request; a bad file is refused with its
// reason and the running config stays.
func TestReloadUnderLoad(t *testing.T) {
	bs := backends(t, 3)
	dir := t.TempDir()
	cfgA := base + "upstreams:\n  api:\n    targets:\n" + targets(bs[:2])
	cfgB := base + "upstreams:\n  api:\n    targets:\n" + targets(bs[1:])
	path := writeFile(t, dir, "gw.yaml", cfgA)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{ConfigPath: path})
	c := client()
	var done atomic.Int64
	stop := make(chan struct{})
	reloads := make(chan error, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				reloads <- nil
				return
			default:
			}
			text := cfgA
			if n%2 == 0 {
				text = cfgB
			}
			writeFile(t, dir, "gw.yaml", text)
			if r := do(t, c, "POST", "http://"+g.AdminAddr()+"/reload", nil); r.code != 200 {
				reloads <- fmt.Errorf("reload %d: %d %s", n, r.code, r.body)
				return
			}
			n++
			start := done.Load()
			for done.Load() < start+50 {
				select {
				case <-stop:
					reloads <- nil
					return
				case <-time.After(time.Millisecond):
				}
			}
		}
	}()
	failed := load(t, "http://"+g.Addr()+"/", 6, 150, &done)
	close(stop)
	if err := <-reloads; err != nil {
		t.Fatal(err)
	}
	if n := bs[2].hits.Load(); n == 0 {
		t.Fatal("no request reached b3: the reloads did not take effect")
	}
	if len(failed) > 0 {
		t.Fatalf("%d requests failed during reloads, first: %s", len(failed), failed[0])
	}

	// A bad file: refused with the reason; the running config serves on.
	before := view(t, g, "api")
	writeFile(t, dir, "gw.yaml", base+"upstreams:\n  api:\n    strategy: round_robbin\n    targets:\n"+targets(bs))
	r := do(t, c, "POST", "http://"+g.AdminAddr()+"/reload", nil)
	if r.code != 400 || !strings.Contains(r.body, "upstreams.api.strategy") || !strings.Contains(r.body, "round_robbin") {
		t.Fatalf("bad reload: %d %s, want 400 naming upstreams.api.strategy", r.code, r.body)
	}
	after := view(t, g, "api")
	if len(after) != len(before) {
		t.Fatalf("bad reload changed the targets: %d → %d", len(before), len(after))
	}
	if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 200 {
		t.Fatalf("after a bad reload: %d", r.code)
	}
	// Settings bound at start are refused too, with nothing applied.
	writeFile(t, dir, "gw.yaml", "listen: 127.0.0.1:1\nadmin: {listen: 127.0.0.1:0}\naccess_log: {enabled: false}\nupstreams:\n  api:\n    targets:\n"+targets(bs))
	if err := g.Reload(); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("reload changing listen: %v", err)
	}
}

// Shutdown lets an in-flight request finish and stops accepting.
func TestShutdownDrains(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	cfg, err := config.Parse([]byte(base + "upstreams:\n  api:\n    targets:\n      - {url: \"" + b.url() + "\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	c := client()
	idle := client()
	get(t, idle, "http://"+g.Addr()+"/warm") // leaves an idle keep-alive conn
	b.hold.Store(&hold)
	got := make(chan resp, 1)
	go func() {
		res, err := c.Get("http://" + g.Addr() + "/")
		if err != nil {
			got <- resp{code: -1, body: err.Error()}
			return
		}
		defer res.Body.Close()
		buf := make([]byte, 10)
		n, _ := res.Body.Read(buf)
		hdr := http.Header{}
		if res.Close { // the client strips "Connection: close" into res.Close
			hdr.Set("Connection", "close")
		}
		got <- resp{code: res.StatusCode, body: string(buf[:n]), hdr: hdr}
	}()
	testenv.Eventually(t, "request at the target", func() bool { return b.cur.Load() == 1 })
	shut := startDrain(t, g)
	close(hold)
	r := <-got
	if r.code != 200 || r.body != "b1" {
		t.Fatalf("in-flight request during drain: %d %q", r.code, r.body)
	}
	if r.hdr.Get("Connection") != "close" {
		t.Errorf("response during drain lacks Connection: close")
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// The admin listener's root lists its endpoints instead of a bare 404.
func TestAdminIndex(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+"upstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	r := get(t, client(), "http://"+g.AdminAddr()+"/")
	if r.code != 200 || !strings.Contains(r.body, `"/upstreams"`) || !strings.Contains(r.body, `"/reload"`) || !strings.Contains(r.body, `"/metrics"`) {
		t.Fatalf("GET /: %d %s", r.code, r.body)
	}
	if r := get(t, client(), "http://"+g.AdminAddr()+"/nope"); r.code != 404 {
		t.Fatalf("GET /nope: %d, want 404", r.code)
	}
}

// Past shutdown_grace the gateway exits even while a target holds a
// request: the wait on the target ends with the client's connection.
func TestShutdownEndsWaitOnHungTarget(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	defer close(hold)
	g := start(t, base+"timeouts: {response_header: 1h}\nupstreams:\n  api:\n    targets:\n      - {url: \""+b.url()+"\"}\n")
	held := make(chan error, 1)
	go func() {
		res, err := client().Get("http://" + g.Addr() + "/")
		if err == nil {
			res.Body.Close()
		}
		held <- err
	}()
	testenv.Eventually(t, "the target holds the request", func() bool { return b.cur.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Shutdown(ctx) }()
	// With the wait on the target left alone, Shutdown would return only
	// after response_header (an hour): the test's own timeout would fire.
	if err := <-done; err == nil {
		t.Fatalf("Shutdown past its grace returned no error")
	}
	<-held
}

// GET /routes lists the compiled routes: a split's sides with their ramp
// and requests, a rate limit with its refusals, a rewrite.
func TestAdminRoutes(t *testing.T) {
	bs := backends(t, 2)
	g := start(t, base+`upstreams:
  v1: {targets: [{url: "`+bs[0].url()+`"}]}
  v2: {targets: [{url: "`+bs[1].url()+`"}]}
routes:
  - match: {path_prefix: /login}
    upstream: v1
    strip_prefix: true
    rate_limit: {per_second: 1, burst: 1}
  - match: {path_prefix: /}
    split: [{upstream: v1, weight: 90}, {upstream: v2, weight: 10, ramp: 1h}]
`)
	c := client()
	for range 3 {
		get(t, c, "http://"+g.Addr()+"/login")
		get(t, c, "http://"+g.Addr()+"/x")
	}
	var v struct{ Routes []gateway.RouteView }
	if err := json.Unmarshal([]byte(get(t, c, "http://"+g.AdminAddr()+"/routes").body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Routes) != 2 {
		t.Fatalf("%d routes: %+v", len(v.Routes), v.Routes)
	}
	login, split := v.Routes[0], v.Routes[1]
	if login.Match.PathPrefix != "/login" || login.Rewrite != "strip_prefix" || login.RateLimit == nil || login.RateLimit.Limited != 2 {
		t.Errorf("login route: %+v (rate limit %+v)", login, login.RateLimit)
	}
	if len(split.Split) != 2 {
		t.Fatalf("split route: %+v", split)
	}
	side := split.Split[1]
	if side.Upstream != "v2" || side.Ramp != "1h0m0s" || side.RampPercent >= 100 || side.WeightNow >= 10 {
		t.Errorf("the ramping side: %+v", side)
	}
	if n := split.Split[0].Requests + split.Split[1].Requests; n != 3 {
		t.Errorf("the split's sides got %d requests, want 3", n)
	}
}

// startDrain starts g's Shutdown and returns once its listener is
// closed, with the channel Shutdown's error arrives on. A bare dial
// tells: a request sent while the listener is still open would be held
// by the backend too, and Shutdown would wait for it.
func startDrain(t *testing.T, g *gateway.Gateway) <-chan error {
	t.Helper()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- g.Shutdown(ctx)
	}()
	testenv.Eventually(t, "listener closed", func() bool {
		c, err := net.Dial("tcp", g.Addr())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	return shut
}
