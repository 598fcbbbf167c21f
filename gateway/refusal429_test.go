package gateway_test

import (
	"testing"
	"time"
)

// A 429 listed in retry.on is retried like a 503 and counts as a refusal:
// the capacity strategy cuts the refusing target's learned limit, while
// the target that serves keeps its own. Real sockets.
func TestRetryOn429IsARefusal(t *testing.T) {
	full, ok := newBackend(t, "full"), newBackend(t, "ok")
	full.status.Store(429)
	// ok answers in 5 ms: slower than an unmeasured target ranks (1 ms),
	// so the strategy keeps trying full, which never succeeds, instead of
	// settling on ok after its first answers.
	ok.delay.Store(int64(5 * time.Millisecond))
	g := start(t, base+"upstreams:\n  api:\n    strategy: capacity\n    strategy_settings: {initial_limit: 20}\n"+
		"    retry: {attempts: 2, on: [connect_error, 429]}\n    targets:\n"+targets([]*backend{full, ok}))
	c := client()
	// Until the refusing target has been tried a few times: each request
	// that reached it was retried on the other and answered by it.
	for i := 0; full.hits.Load() < 3; i++ {
		if i == 500 {
			t.Fatalf("the refusing target was picked %d times in %d requests", full.hits.Load(), i)
		}
		if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 200 || r.body != "ok" {
			t.Fatalf("request %d: %d %q, want 200 from ok (a 429 retried on the other target)", i, r.code, r.body)
		}
	}
	v := view(t, g, "api")
	if tv := v[full.url()]; tv.PermitsSource != "learned" || tv.Permits >= 20 {
		t.Errorf("the refusing target: permits %d (%s), want a learned limit cut below 20 by its 429s", tv.Permits, tv.PermitsSource)
	}
	if tv := v[ok.url()]; tv.Permits < 20 {
		t.Errorf("the serving target: permits %d, want at least the initial 20", tv.Permits)
	}
}
