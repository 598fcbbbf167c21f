package gateway_test

import (
	"bytes"
	"net"
	"runtime"
	"syscall"
	"testing"
)

// What routes cost a request (issue 39's goal: a request that uses none
// of the route features costs what it cost before them, and allocates
// nothing). Everything in the process but the gateway is allocation-free
// and as cheap as it gets (raw keep-alive clients, an upstream answering
// from fixed buffers), so the process's CPU time and allocations per
// request are the gateway's plus a constant, which "direct" measures.
//
//	go test -run XXX -bench RouteFeatures -count 5 ./gateway/
//
// Sub-benchmarks: "direct" (no gateway: the clients straight to the
// upstream, the constant in the others' figures), "none" (one upstream,
// no routes: what every gateway before issue 39 ran), "unused" (routes.yaml's kind of table: a
// rate-limited login, a stripped /api/ prefix with header changes, a
// rewrite, a redirect, a tester header, a keyed split; the request falls
// through all of them to a plain prefix route), and "used" (the request
// takes the /api/ route: strip_prefix and three header changes).

// routeFeatures are routes of every kind before a plain catch-all.
const routeFeatures = `routes:
  - match: {path: /login, methods: [POST]}
    upstream: api
    rate_limit: {key: client_ip, per_second: 1, burst: 5}
  - match: {path_prefix: /api/}
    upstream: api
    strip_prefix: true
    request_headers: {set: {X-Forwarded-Prefix: /api}, remove: [X-Debug]}
    response_headers: {set: {Cache-Control: no-store}}
  - match: {path_prefix: /v2/, methods: [GET, HEAD]}
    upstream: other
    rewrite_prefix: /
  - match: {path: /old}
    redirect: {status: 301, location: "https://example.org/new"}
  - match: {path_prefix: /, headers: {X-Tester: "*"}}
    upstream: other
  - match: {path_prefix: /, query: {canary: "1"}}
    split: [{upstream: api, weight: 90}, {upstream: other, weight: 10, ramp: 10m}]
    split_key: header:X-User
  - match: {path_prefix: /}
    upstream: api
`

// routeCostConfig is a gateway config in front of the raw upstream addr.
func routeCostConfig(addr, routes string) string {
	ups := "upstreams:\n  api:\n    targets:\n      - {url: \"http://" + addr + "\"}\n"
	if routes != "" {
		ups += "  other:\n    targets:\n      - {url: \"http://" + addr + "\"}\n"
	}
	return base + ups + routes
}

// exchange writes req on c and reads until the response's "ok" body.
func exchange(c net.Conn, req, buf []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	_, err := readOK(c, buf)
	return err
}

// readOK reads one response into buf, up to its "ok" body.
func readOK(c net.Conn, buf []byte) (int, error) {
	n := 0
	for !bytes.HasSuffix(buf[:n], []byte("\r\n\r\nok")) {
		k, err := c.Read(buf[n:])
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

func cpuNow() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func BenchmarkRouteFeatures(b *testing.B) {
	plain := []byte("GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: fixed\r\n\r\n")
	api := []byte("GET /api/x HTTP/1.1\r\nHost: a\r\nX-Request-Id: fixed\r\n\r\n")
	for _, bc := range []struct {
		name, routes string
		req          []byte
	}{
		{"direct", "", plain},
		{"none", "", plain},
		{"unused", routeFeatures, plain},
		{"used", routeFeatures, api},
	} {
		b.Run(bc.name, func(b *testing.B) {
			addr := rawUpstream(b)
			if bc.name != "direct" { // direct: the clients and the upstream alone, the constant to subtract
				addr = start(b, routeCostConfig(addr, bc.routes)).Addr()
			}
			b.SetParallelism(4) // 4 x GOMAXPROCS keep-alive connections
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuNow()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				buf := make([]byte, 4<<10)
				for pb.Next() {
					if err := exchange(c, bc.req, buf); err != nil {
						b.Error(err)
						return
					}
				}
			})
			// CPU time of the whole process (gateway, clients, upstream)
			// per request: unlike ns/op it does not fall when neighbours
			// take the machine's cores.
			b.ReportMetric(float64(cpuNow()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// A request that uses none of the route features allocates nothing, in
// front of a table that has every feature, as before there were routes;
// one that takes a strip_prefix route with header changes allocates
// nothing either.
func TestRouteFeaturesAllocateNothingPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's bookkeeping allocates")
	}
	g := start(t, routeCostConfig(rawUpstream(t), routeFeatures))
	for _, path := range []string{"/x", "/api/x"} {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if path == "/api/x" { // the route's response header says it was taken
			buf := make([]byte, 4<<10)
			_, err := c.Write([]byte("GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n"))
			n := 0
			if err == nil {
				n, err = readOK(c, buf)
			}
			if err != nil || !bytes.Contains(bytes.ToLower(buf[:n]), []byte("cache-control: no-store")) {
				t.Fatalf("GET /api/x did not take the /api/ route (err %v):\n%s", err, buf[:n])
			}
		}
		per := allocsPerRequestTo(t, c, path)
		c.Close()
		t.Logf("%s: %.3f allocations per request", path, per)
		if per > 0.05 {
			t.Errorf("GET %s: %.2f allocations per request, want none", path, per)
		}
	}
}

// allocsPerRequestTo sends GET path on c (answered "ok") and returns the
// process's allocations per request in steady state.
func allocsPerRequestTo(t *testing.T, c net.Conn, path string) float64 {
	t.Helper()
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: a\r\nX-Request-Id: fixed\r\n\r\n")
	buf := make([]byte, 4<<10)
	one := func() {
		if err := exchange(c, req, buf); err != nil {
			t.Fatal(err)
		}
	}
	for range 500 { // warm: pools, buffers, metric children
		one()
	}
	const n = 4000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		one()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / n
}
