package gateway

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

func splitRoutes(t *testing.T, text string) ([]config.Route, map[string]*upstream) {
	t.Helper()
	cfg := testConfig(t, "upstreams:\n  v1: {targets: [{url: \"http://127.0.0.1:1\"}]}\n  v2: {targets: [{url: \"http://127.0.0.1:2\"}]}\nroutes:\n"+text)
	ups := map[string]*upstream{}
	for name := range cfg.Upstreams {
		ups[name] = &upstream{name: name}
	}
	return cfg.Routes, ups
}

// share draws n picks at now and returns v2's share.
func share(sp *split, n int, now time.Time, key func(i int) (string, bool)) float64 {
	v2 := 0
	for i := range n {
		k, keyed := key(i)
		if sp.choose(k, keyed, now).name == "v2" {
			v2++
		}
	}
	return float64(v2) / float64(n)
}

func noKey(int) (string, bool) { return "", false }

// A 90/10 split over 10,000 requests lands within 1 % of 10 %.
func TestSplitShares(t *testing.T) {
	routes, ups := splitRoutes(t, "  - split: [{upstream: v1, weight: 90}, {upstream: v2, weight: 10}]\n")
	sp := newSplit(&routes[0], 0, ups, nil, nil, time.Now())
	if got := share(sp, 10000, time.Now(), noKey); math.Abs(got-0.10) > 0.01 {
		t.Fatalf("v2 got %.3f of 10,000 requests, want 0.10 ± 0.01", got)
	}
}

// With split_key, a client stays on its side; the keys spread as the
// weights say.
func TestSplitKeyIsSticky(t *testing.T) {
	routes, ups := splitRoutes(t, "  - split: [{upstream: v1, weight: 90}, {upstream: v2, weight: 10}]\n    split_key: \"header:X-User\"\n")
	sp := newSplit(&routes[0], 0, ups, nil, nil, time.Now())
	now := time.Now()
	v2 := 0
	for c := range 5000 {
		key := fmt.Sprint("user-", c)
		first := sp.choose(key, true, now)
		for range 5 {
			if sp.choose(key, true, now) != first {
				t.Fatalf("client %s moved sides", key)
			}
		}
		if first.name == "v2" {
			v2++
		}
	}
	if got := float64(v2) / 5000; math.Abs(got-0.10) > 0.02 {
		t.Fatalf("%.3f of the clients on v2, want about 0.10", got)
	}
}

// A ramp: 10s side's share follows the linear warm-up within 2 % at each
// second, and a keyed client that reached the new side stays there.
func TestSplitRamp(t *testing.T) {
	routes, ups := splitRoutes(t, "  - split: [{upstream: v1, weight: 90}, {upstream: v2, weight: 10, ramp: 10s}]\n    split_key: client_ip\n")
	t0 := time.Now()
	sp := newSplit(&routes[0], 0, ups, nil, nil, t0)
	on := map[int]bool{}
	for s := 0; s <= 11; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		w2 := 10 * math.Min(float64(s)/10, 1)
		want := w2 / (90 + w2)
		if got := share(sp, 20000, now, noKey); math.Abs(got-want) > 0.02 {
			t.Fatalf("at %ds v2 got %.3f, want %.3f ± 0.02", s, got, want)
		}
		for c := range 2000 {
			v2 := sp.choose(fmt.Sprint("10.0.0.", c), true, now).name == "v2"
			if on[c] && !v2 {
				t.Fatalf("at %ds client %d went back from the ramping side", s, c)
			}
			on[c] = v2
		}
	}
}

// A reload that keeps a split keeps its ramp's clock; a new side starts
// its own.
func TestSplitReloadKeepsRampClock(t *testing.T) {
	routes, ups := splitRoutes(t, "  - split: [{upstream: v1, weight: 90}, {upstream: v2, weight: 10, ramp: 10m}]\n")
	old, _, err := newRouter(routes, ups, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	since := old.all[0].split.sides[1].since
	routes2, ups2 := splitRoutes(t, "  - split: [{upstream: v1, weight: 80}, {upstream: v2, weight: 20, ramp: 10m}]\n")
	rt, _, err := newRouter(routes2, ups2, old, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.all[0].split.sides[1].since; !got.Equal(since) {
		t.Fatalf("the ramp's clock moved on reload: %v, was %v", got, since)
	}
}

func TestSplitConfigErrors(t *testing.T) {
	for _, tc := range []struct{ route, want string }{
		{"{upstream: v1, split: [{upstream: v2, weight: 1}]}", "routes[0].split"},
		{"{split: [{upstream: nope, weight: 1}]}", "routes[0].split[0].upstream"},
		{"{split: [{upstream: v1, weight: 0}]}", "routes[0].split"},
		{"{split: [{upstream: v1, weight: -1}, {upstream: v2, weight: 1}]}", "routes[0].split[0].weight"},
		{"{split: [{upstream: v1, weight: 1}, {upstream: v1, weight: 1}]}", "routes[0].split[1].upstream"},
		{"{split: [{upstream: v1, weight: 1}], split_key: path}", "routes[0].split_key"},
		{"{upstream: v1, split_key: client_ip}", "routes[0].split_key"},
	} {
		_, err := config.Parse([]byte("upstreams:\n  v1: {targets: [{url: \"http://127.0.0.1:1\"}]}\n  v2: {targets: [{url: \"http://127.0.0.1:2\"}]}\nroutes:\n  - " + tc.route + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.route, err, tc.want)
		}
	}
}
