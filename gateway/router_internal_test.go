package gateway

import (
	"bufio"

	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// naiveFind is the specification: the first route in file order whose
// every condition holds.
func naiveFind(routes []config.Route, host, path string, q reqView) int {
	host = strings.ToLower(host)
	for i, r := range routes {
		m := r.Match
		h := strings.ToLower(m.Host)
		switch {
		case h == "":
		case strings.HasPrefix(h, "*."):
			if len(host) <= len(h)-1 || !strings.HasSuffix(host, h[1:]) {
				continue
			}
		case h != host:
			continue
		}
		if m.Path != "" && path != m.Path || m.Path == "" && !strings.HasPrefix(path, m.PathPrefix) {
			continue
		}
		ro := &route{methods: m.Methods}
		for k, v := range m.Headers {
			ro.headers = append(ro.headers, kv{strings.ToLower(k), v})
		}
		for k, v := range m.Query {
			ro.query = append(ro.query, kv{k, v})
		}
		if ro.extra(q) {
			return i
		}
	}
	return -1
}

func parseReq(t testing.TB, raw string) *h1.Request {
	t.Helper()
	var r h1.Request
	br := bufioReader(raw)
	if err := h1.ReadRequest(br, 64<<10, &r); err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return &r
}

// The compiled router picks what the linear scan picks, on random route
// tables and requests that share their hosts, paths and conditions.
func TestRouterMatchesTheLinearScan(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rnd.IntN(len(xs))] }
	hosts := []string{"", "a.example.com", "A.Example.com", "*.example.com", "*.com", "b.example.com", "example.com"}
	paths := []string{"/", "/api", "/api/", "/api/v1", "/apix", "/static/img", "/a"}
	for round := range 200 {
		var routes []config.Route
		ups := map[string]*upstream{}
		for i := range 1 + rnd.IntN(30) {
			name := fmt.Sprint("u", i)
			ups[name] = &upstream{name: name}
			m := config.Match{Host: pick(hosts...)}
			if rnd.IntN(3) == 0 {
				m.Path = pick(paths...)
			} else {
				m.PathPrefix = pick(paths...)
			}
			if rnd.IntN(3) == 0 {
				m.Methods = []string{pick("GET", "POST", "PUT")}
			}
			if rnd.IntN(3) == 0 {
				m.Headers = map[string]string{pick("x-env", "X-Tester"): pick("canary", "*", "1")}
			}
			if rnd.IntN(4) == 0 {
				m.Query = map[string]string{pick("v", "beta"): pick("2", "*", "")}
			}
			routes = append(routes, config.Route{Match: m, Upstream: name})
		}
		rt := mustRouter(t, routes, ups)
		for range 50 {
			host := strings.TrimPrefix(pick(hosts...), "*.")
			if host == "" {
				host = "other.org"
			}
			path := pick(paths...) + pick("", "x", "/y")
			query := pick("", "?v=2", "?beta", "?v=3&beta=1", "?beta=&v=2")
			hdr := pick("", "X-Env: canary\r\n", "x-tester: 1\r\n", "X-Env: prod\r\nX-Tester: 0\r\n")
			meth := pick("GET", "POST", "PUT", "DELETE")
			r := parseReq(t, meth+" "+path+query+" HTTP/1.1\r\nHost: "+host+"\r\n"+hdr+"Content-Length: 0\r\n\r\n")
			want := naiveFind(routes, host, path, (*h1View)(r))
			got := rt.find([]byte(host), []byte(path), (*h1View)(r)).upstream((*h1View)(r), func() string { return "" })
			wantUp := (*upstream)(nil)
			if want >= 0 {
				wantUp = ups[routes[want].Upstream]
			}
			if got != wantUp {
				t.Fatalf("round %d: %s %s%s host %s %q: router chose %v, the scan route %d (%v)\nroutes: %+v",
					round, meth, path, query, host, hdr, got, want, wantUp, routes)
			}
		}
	}
}

// routeTable is n routes: n/100 hosts with 100 paths each, some with
// methods, headers or a wildcard, and one catch-all.
func routeTable(n int) ([]config.Route, map[string]*upstream) {
	ups := map[string]*upstream{"api": {name: "api"}, "other": {name: "other"}}
	var routes []config.Route
	for i := 0; len(routes) < n-1; i++ {
		host := fmt.Sprintf("h%d.example.com", i/100)
		m := config.Match{Host: host, PathPrefix: fmt.Sprintf("/svc%d/", i%100)}
		switch i % 4 {
		case 1:
			m.Methods = []string{"POST"}
		case 2:
			m.Headers = map[string]string{"x-env": "canary"}
		case 3:
			m.Host = fmt.Sprintf("*.w%d.example.com", i/100)
		}
		routes = append(routes, config.Route{Match: m, Upstream: "api"})
	}
	return append(routes, config.Route{Match: config.Match{PathPrefix: "/"}, Upstream: "other"}), ups
}

func BenchmarkRouter(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprint("routes=", n), func(b *testing.B) {
			routes, ups := routeTable(n)
			rt := mustRouter(b, routes, ups)
			host := fmt.Sprintf("h%d.example.com", (n/100)/2)
			r := parseReq(b, "GET /svc40/items?id=7 HTTP/1.1\r\nHost: "+host+"\r\nX-Env: prod\r\nContent-Length: 0\r\n\r\n")
			path := []byte("/svc40/items")
			if rt.find([]byte(host), path, (*h1View)(r)) == nil {
				b.Fatal("no route")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				rt.find([]byte(host), path, (*h1View)(r))
			}
		})
	}
}

// Finding a route allocates nothing, at 10,000 routes too.
func TestRouterAllocatesNothing(t *testing.T) {
	routes, ups := routeTable(10000)
	rt := mustRouter(t, routes, ups)
	r := parseReq(t, "GET /svc40/items?id=7 HTTP/1.1\r\nHost: H50.w50.Example.com\r\nX-Env: canary\r\nContent-Length: 0\r\n\r\n")
	host, path := []byte("H50.w50.Example.com"), []byte("/svc40/items")
	if a := testing.AllocsPerRun(1000, func() { rt.find(host, path, (*h1View)(r)) }); a != 0 {
		t.Fatalf("%v allocations per lookup", a)
	}
}

func TestRouteMatchConfigErrors(t *testing.T) {
	for _, tc := range []struct{ match, want string }{
		{"{path: /a, path_prefix: /b}", "routes[0].match.path"},
		{"{path: a}", "routes[0].match.path"},
		{"{methods: [\"GE T\"]}", "routes[0].match.methods[0]"},
		{"{headers: {\"x y\": a}}", "routes[0].match.headers.x y"},
		{"{query: {\"a=b\": c}}", "routes[0].match.query.a=b"},
	} {
		_, err := config.Parse([]byte("upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\nroutes:\n  - {match: " + tc.match + ", upstream: api}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.match, err, tc.want)
		}
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReaderSize(strings.NewReader(s), 64<<10) }

func mustRouter(t testing.TB, routes []config.Route, ups map[string]*upstream) *router {
	t.Helper()
	rt, _, err := newRouter(routes, ups, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}
