package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Active checks take a failing target out after unhealthy_threshold
// failures and bring it back after healthy_threshold successes.
func TestActiveHealthChecks(t *testing.T) {
	bs := backends(t, 2)
	g := start(t, base+`upstreams:
  api:
    targets:
`+targets(bs)+`    health:
      active: {path: /healthz, interval: 20ms, timeout: 1s, healthy_threshold: 2, unhealthy_threshold: 2}
`)
	c := client()
	url := "http://" + g.Addr() + "/"
	bs[1].health.Store(500)
	testenv.Eventually(t, "b2 marked unhealthy", func() bool { return !view(t, g, "api")[bs[1].url()].Healthy })
	before := bs[1].hits.Load()
	for range 20 {
		if r := get(t, c, url); r.code != 200 || r.body != "b1" {
			t.Fatalf("with b2 unhealthy got %d %q", r.code, r.body)
		}
	}
	if n := bs[1].hits.Load() - before; n != 0 {
		t.Fatalf("unhealthy b2 got %d requests", n)
	}
	bs[1].health.Store(0)
	testenv.Eventually(t, "b2 healthy again", func() bool { return view(t, g, "api")[bs[1].url()].Healthy })
	testenv.Eventually(t, "b2 back in rotation", func() bool { return get(t, c, url).body == "b2" })
	m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
	if !strings.Contains(m, `fulcrum_gateway_health_checks_total{result="fail",target="`+bs[1].addr+`",upstream="api"} `) ||
		strings.Contains(m, `fulcrum_gateway_health_checks_total{result="fail",target="`+bs[1].addr+`",upstream="api"} 0`+"\n") {
		t.Errorf("metrics lack failed health checks for b2 (the series exists from the start at 0; it must have counted)")
	}
}

// Consecutive failures eject a target; a repeat offender stays out longer;
// clients see no failure because the failed requests were retried.
func TestPassiveEjectionAndBackoff(t *testing.T) {
	bs := backends(t, 2)
	g := start(t, base+`upstreams:
  api:
    targets:
`+targets(bs)+`    health:
      passive: {max_failures: 3, window: 10s, eject_for: 500ms, max_eject_for: 10s, max_ejected_percent: 50}
    retry: {attempts: 2, on: [connect_error, 502, 503]}
`)
	c := client()
	url := "http://" + g.Addr() + "/"
	bs[1].status.Store(503)
	ejectedFor := func() time.Duration {
		for range 20 {
			if r := get(t, c, url); r.code != 200 || r.body != "b1" {
				t.Fatalf("got %d %q; failures should have been retried on b1", r.code, r.body)
			}
			if v := view(t, g, "api")[bs[1].url()]; v.Ejected {
				return time.Until(*v.EjectedUntil)
			}
		}
		t.Fatal("b2 was not ejected after 20 requests")
		return 0
	}
	first := ejectedFor()
	testenv.Eventually(t, "first ejection to end", func() bool { return !view(t, g, "api")[bs[1].url()].Ejected })
	second := ejectedFor()
	t.Logf("left of the ejections when seen: %v then %v", first, second)
	// Observed right after it began, what is left of the second ejection
	// exceeds the whole first one (500ms): the ejection time doubled.
	if second <= 500*time.Millisecond {
		t.Errorf("second ejection has %v left, want more than the first ejection's 500ms", second)
	}
	m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
	want := fmt.Sprintf(`fulcrum_gateway_ejections_total{target=%q,upstream="api"} 2`, bs[1].addr)
	if !strings.Contains(m, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// A target killed under load costs no failed GET: in-flight and new
// requests on it are retried on the others, and ejection takes it out.
func TestKilledTargetNoFailedGET(t *testing.T) {
	bs := backends(t, 3)
	g := start(t, base+`upstreams:
  api:
    targets:
`+targets(bs)+`    health:
      passive: {max_failures: 3, window: 10s, eject_for: 30s}
`)
	var done atomic.Int64
	killed := make(chan struct{})
	go func() {
		for done.Load() < 300 {
			time.Sleep(time.Millisecond)
		}
		bs[2].kill()
		close(killed)
	}()
	failed := load(t, "http://"+g.Addr()+"/", 8, 150, &done)
	<-killed
	if len(failed) > 0 {
		t.Fatalf("%d of %d GETs failed, first: %s", len(failed), done.Load(), failed[0])
	}
	if !view(t, g, "api")[bs[2].url()].Ejected {
		t.Errorf("killed target not ejected")
	}
}

// When every target is at max_concurrency, a request waits in the queue
// and is served when a permit returns; past max_wait it gets 503 with
// Retry-After. The target never sees more than its max_concurrency.
func TestQueueOnCapacity(t *testing.T) {
	b := newBackend(t, "b1")
	hold := make(chan struct{})
	b.hold.Store(&hold)
	conf := func(maxWait string) string {
		return base + `upstreams:
  api:
    targets:
      - {url: "` + b.url() + `", max_concurrency: 2}
    queue: {max_wait: ` + maxWait + `}
`
	}
	// A max_wait no step of the test can outlast on a busy machine, until
	// the part that waits it out.
	g := start(t, conf("10m"))
	url := "http://" + g.Addr() + "/"
	c := client()
	results := make(chan resp, 3)
	for range 3 {
		go func() {
			res, err := c.Get(url)
			if err != nil {
				results <- resp{code: -1, body: err.Error()}
				return
			}
			res.Body.Close()
			results <- resp{code: res.StatusCode}
		}()
	}
	testenv.Eventually(t, "two requests at the target", func() bool { return b.cur.Load() == 2 })
	testenv.Eventually(t, "the third request in the queue", func() bool {
		return strings.Contains(get(t, c, "http://"+g.AdminAddr()+"/metrics").body, `fulcrum_gateway_queue_waiting{upstream="api"} 1`)
	})
	// Release one permit: the queued request takes it.
	hold <- struct{}{}
	testenv.Eventually(t, "the queued request to reach the target", func() bool { return b.hits.Load() == 3 })
	close(hold)
	for range 3 {
		if r := <-results; r.code != 200 {
			t.Fatalf("queued request got %d %s", r.code, r.body)
		}
	}
	if p := b.peak.Load(); p > 2 {
		t.Fatalf("target saw %d requests at once, above max_concurrency 2", p)
	}

	// Now hold both permits past a short max_wait (a reload changes it).
	cfg, err := config.Parse([]byte(conf("300ms")))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	hold2 := make(chan struct{})
	b.hold.Store(&hold2)
	for range 2 {
		go func() {
			res, err := c.Get(url)
			if err == nil {
				res.Body.Close()
			}
		}()
	}
	testenv.Eventually(t, "two requests at the target", func() bool { return b.cur.Load() == 2 })
	r := get(t, c, url)
	close(hold2)
	testenv.Eventually(t, "the local 503 counted", func() bool {
		return strings.Contains(get(t, c, "http://"+g.AdminAddr()+"/metrics").body, `fulcrum_gateway_requests_total{code="503",target="",upstream="api"} 1`)
	})
	if r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("after max_wait got %d Retry-After %q, want 503 with Retry-After", r.code, r.hdr.Get("Retry-After"))
	}
	m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
	for _, want := range []string{`fulcrum_gateway_queue_waits_total{outcome="served",upstream="api"} 1`, `fulcrum_gateway_queue_waits_total{outcome="timeout",upstream="api"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Under many more clients than permits, every request is served through
// the queue and no target ever holds more than its max_concurrency.
func TestCapacityStress(t *testing.T) {
	bs := backends(t, 3)
	g := start(t, base+"upstreams:\n  api:\n    strategy: least_active\n    targets:\n"+
		targets(bs, ", max_concurrency: 2", ", max_concurrency: 3", ", max_concurrency: 1")+"    queue: {max_wait: 10s}\n")
	var done atomic.Int64
	failed := load(t, "http://"+g.Addr()+"/", 24, 40, &done)
	if len(failed) > 0 {
		t.Fatalf("%d of %d requests failed, first: %s", len(failed), done.Load(), failed[0])
	}
	var total int64
	for i, limit := range []int64{2, 3, 1} {
		if p := bs[i].peak.Load(); p > limit {
			t.Errorf("%s peaked at %d requests at once, above its max_concurrency %d", bs[i].name, p, limit)
		}
		total += bs[i].hits.Load()
	}
	if total != 24*40 {
		t.Errorf("targets saw %d requests, want %d", total, 24*40)
	}
}

// max_ejected_percent caps ejections: with every target failing, at most
// that share is ejected and the rest keep serving (here: answering 503).
func TestMaxEjectedPercent(t *testing.T) {
	bs := backends(t, 4)
	for _, b := range bs {
		b.status.Store(503)
	}
	g := start(t, base+"upstreams:\n  api:\n    targets:\n"+targets(bs)+
		"    health:\n      passive: {max_failures: 2, eject_for: 1m, max_ejected_percent: 50}\n    retry: {attempts: 1}\n")
	c := client()
	for range 60 {
		get(t, c, "http://"+g.Addr()+"/")
	}
	ejected := 0
	for _, v := range view(t, g, "api") {
		if v.Ejected {
			ejected++
		}
	}
	if ejected != 2 {
		t.Fatalf("%d of 4 failing targets ejected, want 2 (max_ejected_percent 50)", ejected)
	}
}

// A target that turns healthy again starts its warm-up over: its effective
// weight falls below that of a target that stayed up.
func TestWarmupRestartsWhenHealthyAgain(t *testing.T) {
	bs := backends(t, 2)
	g := start(t, base+`upstreams:
  api:
    targets:
`+targets(bs, ", weight: 1000, warmup: 20s", ", weight: 1000, warmup: 20s")+`    health:
      active: {path: /healthz, interval: 20ms, timeout: 1s, healthy_threshold: 1, unhealthy_threshold: 1}
`)
	// Let both warm a little, so a restart is visible.
	testenv.Eventually(t, "some warm-up", func() bool { return view(t, g, "api")[bs[0].url()].EffectiveWeight >= 100 })
	bs[1].health.Store(500)
	testenv.Eventually(t, "b2 unhealthy", func() bool { return !view(t, g, "api")[bs[1].url()].Healthy })
	bs[1].health.Store(0)
	testenv.Eventually(t, "b2 healthy", func() bool { return view(t, g, "api")[bs[1].url()].Healthy })
	v := view(t, g, "api")
	a, b := v[bs[0].url()], v[bs[1].url()]
	if !b.Warming || b.EffectiveWeight >= a.EffectiveWeight {
		t.Fatalf("recovered b2: warming %v weight %d; b1 (up all along) %d", b.Warming, b.EffectiveWeight, a.EffectiveWeight)
	}
}
