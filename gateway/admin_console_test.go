package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/demo"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// consoleGateway runs a gateway with an admin token in front of n demo
// upstreams.
func consoleGateway(t *testing.T, n int, extra string) (*gateway.Gateway, []*demo.Upstream) {
	t.Helper()
	var addrs []string
	for range n {
		addrs = append(addrs, "127.0.0.1:0")
	}
	ups, err := demo.StartAll(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { demo.CloseAll(ups) })
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token: tok}\naccess_log: {enabled: false}\nupstreams:\n  api:\n    targets:\n")
	for _, u := range ups {
		fmt.Fprintf(&b, "      - {url: \"http://%s\"%s}\n", u.Addr, extra)
	}
	return start(t, b.String()), ups
}

func adminCall(t *testing.T, g *gateway.Gateway, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+g.AdminAddr()+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func consoleTargets(t *testing.T, g *gateway.Gateway) map[string]gateway.ConsoleTargetView {
	t.Helper()
	code, body := adminCall(t, g, "GET", "/console/upstreams", "tok", "")
	if code != 200 {
		t.Fatalf("GET /console/upstreams: %d %s", code, body)
	}
	var out struct{ Upstreams []gateway.ConsoleUpstreamView }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	m := map[string]gateway.ConsoleTargetView{}
	for _, tv := range out.Upstreams[0].Targets {
		m[tv.Addr] = tv
	}
	return m
}

// The console's pages need no token; its API does, like the rest of the
// admin API.
func TestConsoleRoutesAndToken(t *testing.T) {
	g, ups := consoleGateway(t, 1, ", max_concurrency: 7")
	if code, body := adminCall(t, g, "GET", "/ui/", "", ""); code != 200 || !strings.Contains(body, `data-component="gateway"`) {
		t.Errorf("GET /ui/ without a token: %d %.200s", code, body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/console/upstreams", ""},
		{"POST", "/upstreams/api/targets/" + ups[0].Addr, `{"disabled": true}`},
		{"GET", "/upstreams", ""}, // the admin API's own check, still in force
	} {
		if code, body := adminCall(t, g, c.method, c.path, "wrong", c.body); code != 401 {
			t.Errorf("%s %s with a wrong token: %d %s, want 401", c.method, c.path, code, body)
		}
	}
	tv := consoleTargets(t, g)[ups[0].Addr]
	if tv.Permits != 7 || tv.PermitsSource != "configured" || !tv.Healthy || tv.WarmupProgress != 1 {
		t.Errorf("target view %+v, want 7 configured permits, healthy, warmed up", tv)
	}
}

// Disable, enable, a new weight and a drain change only the target named,
// and a target that stays keeps its counters (the same update path as PUT
// /upstreams/{name}/targets).
func TestConsoleTargetActionsKeepState(t *testing.T) {
	g, ups := consoleGateway(t, 3, "")
	for range 30 {
		resp, err := http.Get("http://" + g.Addr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	before := consoleTargets(t, g)
	a, b, c := ups[0].Addr, ups[1].Addr, ups[2].Addr
	post := func(addr, body string) (int, string) {
		return adminCall(t, g, "POST", "/upstreams/api/targets/"+addr, "tok", body)
	}
	if code, body := post(a, `{"disabled": true}`); code != 200 {
		t.Fatalf("disable: %d %s", code, body)
	}
	if code, body := post(b, `{"weight": 5}`); code != 200 {
		t.Fatalf("weight: %d %s", code, body)
	}
	after := consoleTargets(t, g)
	if !after[a].Disabled || after[a].EffectiveWeight != 0 || after[b].Weight != 5 || after[b].Disabled || after[c].Weight != 1 {
		t.Errorf("after disable a and weight 5 on b: %+v", after)
	}
	for _, addr := range []string{a, b, c} {
		if after[addr].Requests != before[addr].Requests || before[addr].Requests == 0 {
			t.Errorf("%s: requests %d before, %d after; want kept and non-zero", addr, before[addr].Requests, after[addr].Requests)
		}
	}
	if code, body := post(a, `{"disabled": false}`); code != 200 || consoleTargets(t, g)[a].Disabled {
		t.Errorf("enable: %d %s", code, body)
	}
	if code, body := post(c, `{"drain": true}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	if m := consoleTargets(t, g); len(m) != 2 || m[c].Addr != "" || m[a].Requests != before[a].Requests {
		t.Errorf("after draining c: %+v", m)
	}

	bad := []struct {
		addr, body string
		code       int
		want       string
	}{
		{a, `{"weight": -1}`, 400, "weight: -1 is negative"},
		{a, `{"wieght": 2}`, 400, "unknown field"},
		{a, `{}`, 400, "nothing to change"},
		{a, `{"drain": true, "weight": 2}`, 400, "drain alone"},
		{a, `{"disabled": "yes"}`, 400, "body:"},
		{"127.0.0.1:1", `{"disabled": true}`, 404, "no such target"},
	}
	for _, tc := range bad {
		if code, body := post(tc.addr, tc.body); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s %s: %d %s, want %d naming %q", tc.addr, tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, body := adminCall(t, g, "POST", "/upstreams/nope/targets/"+a, "tok", `{"disabled": true}`); code != 404 {
		t.Errorf("unknown upstream: %d %s", code, body)
	}
	if code, body := post(b, `{"drain": true}`); code != 200 {
		t.Fatalf("drain b: %d %s", code, body)
	}
	if code, body := post(a, `{"drain": true}`); code != 400 || !strings.Contains(body, "last target") {
		t.Errorf("draining the last target: %d %s, want 400", code, body)
	}
	if m := consoleTargets(t, g); len(m) != 1 {
		t.Errorf("refused changes changed the set: %+v", m)
	}
}

// An ejected target shows the time its ejection has left, and a strategy
// that learns permits (capacity) shows them as learned. Both targets
// answer 502, so the first request ejects one whichever capacity picks
// (with a healthy target beside it, capacity could keep picking that one
// and eject the failing one only when it probed it, 30 s later or more
// on a loaded machine).
func TestConsoleEjectionAndLearnedPermits(t *testing.T) {
	var addrs []string
	for range 2 {
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }))
		defer bad.Close()
		addrs = append(addrs, strings.TrimPrefix(bad.URL, "http://"))
	}
	cfgText := fmt.Sprintf(`listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
access_log: {enabled: false}
upstreams:
  api:
    strategy: capacity
    health: {passive: {max_failures: 1, eject_for: 1m}}
    targets:
      - {url: "http://%s"}
      - {url: "http://%s"}
`, addrs[0], addrs[1])
	g := start(t, cfgText)
	var tv gateway.ConsoleTargetView
	testenv.Eventually(t, "a failing target ejected", func() bool {
		resp, err := http.Get("http://" + g.Addr() + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		for _, u := range g.ConsoleUpstreams() {
			for _, v := range u.Targets {
				if v.Ejected {
					tv = v
				}
			}
		}
		return tv.Ejected
	})
	if tv.EjectedForMS <= 0 || tv.EjectedForMS > time.Minute.Milliseconds() || tv.EffectiveWeight != 0 {
		t.Errorf("ejected target %+v, want up to a minute left and no weight", tv)
	}
	for _, u := range g.ConsoleUpstreams() {
		for _, v := range u.Targets {
			if v.Permits <= 0 || v.PermitsSource != "learned" {
				t.Errorf("capacity target %s: %d permits from %q, want learned", v.Addr, v.Permits, v.PermitsSource)
			}
		}
	}
}
