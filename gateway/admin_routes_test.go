package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// GET /routes gives each split side its upstream's answers and 5xx
// answers beside the requests the split sent it, so a failing canary
// reads against the healthy side: here every answer of v2 is a 500 and
// none of v1's is.
func TestAdminRoutesSplitSideErrors(t *testing.T) {
	bs := backends(t, 2)
	bs[1].status.Store(500)
	g := start(t, base+`upstreams:
  v1: {targets: [{url: "`+bs[0].url()+`"}]}
  v2: {targets: [{url: "`+bs[1].url()+`"}]}
routes:
  - match: {path_prefix: /}
    split: [{upstream: v1, weight: 50}, {upstream: v2, weight: 50}]
`)
	c := client()
	const n = 40
	for range n {
		get(t, c, "http://"+g.Addr()+"/x")
	}
	var v struct{ Routes []gateway.RouteView }
	// A response is counted when its relay ends, just after the client
	// has it: await the last one's count.
	testenv.Eventually(t, "GET /routes counting every answer", func() bool {
		if err := json.Unmarshal([]byte(get(t, c, "http://"+g.AdminAddr()+"/routes").body), &v); err != nil {
			t.Fatal(err)
		}
		if len(v.Routes) != 1 || len(v.Routes[0].Split) != 2 {
			t.Fatalf("routes: %+v", v.Routes)
		}
		return v.Routes[0].Split[0].UpstreamResponses+v.Routes[0].Split[1].UpstreamResponses == n
	})
	v1, v2 := v.Routes[0].Split[0], v.Routes[0].Split[1]
	if v1.Requests+v2.Requests != n || v1.Requests == 0 || v2.Requests == 0 {
		t.Fatalf("sides got %d and %d requests, want %d between them, some each", v1.Requests, v2.Requests, n)
	}
	if v1.Upstream != "v1" || v1.UpstreamResponses != v1.Requests || v1.UpstreamErrors != 0 {
		t.Errorf("healthy side: %+v (its backend answered %d)", v1, bs[0].hits.Load())
	}
	if v2.Upstream != "v2" || v2.UpstreamResponses != v2.Requests || v2.UpstreamErrors != v2.Requests {
		t.Errorf("failing side: %+v (its backend answered %d, all 500)", v2, bs[1].hits.Load())
	}
}

// GET /routes names a shared rate limit's Redis without its password.
func TestAdminRoutesHidesRedisPassword(t *testing.T) {
	bs := backends(t, 1)
	g := start(t, base+`upstreams:
  v1: {targets: [{url: "`+bs[0].url()+`"}]}
routes:
  - {match: {path: /login}, upstream: v1, rate_limit: {per_second: 1, shared: "redis://app:s3cret@127.0.0.1:1/0"}}
`)
	body := get(t, client(), "http://"+g.AdminAddr()+"/routes").body
	if strings.Contains(body, "s3cret") || !strings.Contains(body, "redis://app:xxxxx@127.0.0.1:1/0") {
		t.Errorf("GET /routes shows the shared limit as:\n%s", body)
	}
}
