package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// hammer sends n requests from workers clients spread over the
// gateways' addresses, each with the header hdr: key, and returns the
// successes, the refusals and the seconds from the first request sent to
// the last answer read.
func hammerLimited(t *testing.T, addrs []string, path string, workers, n int, chunked bool, hdr ...string) (ok, limited int64, secs float64) {
	t.Helper()
	c := client()
	var wg sync.WaitGroup
	var bad atomic.Value
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				var body io.Reader
				if chunked {
					body = io.MultiReader(strings.NewReader("x")) // net/http's path
				}
				req, _ := http.NewRequest("POST", "http://"+addrs[(w+i)%len(addrs)]+path, body)
				for j := 0; j+1 < len(hdr); j += 2 {
					req.Header.Set(hdr[j], hdr[j+1])
				}
				res, err := c.Do(req)
				if err != nil {
					bad.Store(err.Error())
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case 200:
					atomic.AddInt64(&ok, 1)
				case 429:
					ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
					if err != nil || ra < 1 {
						bad.Store("429 with Retry-After " + strconv.Quote(res.Header.Get("Retry-After")))
					}
					atomic.AddInt64(&limited, 1)
				default:
					bad.Store(res.Status)
				}
			}
		}()
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	return ok, limited, time.Since(start).Seconds()
}

// A route's local rate limit lets at most burst + per_second × t
// requests per key through over t seconds under 50 concurrent clients,
// on the fast path and on net/http's; other keys have their own bucket.
func TestRateLimitLocal(t *testing.T) {
	b := newBackend(t, "b1")
	var logs syncBuf
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\n" + `upstreams:
  api: {targets: [{url: "` + b.url() + `"}]}
access_log: {enabled: true, format: json}
routes:
  - match: {path_prefix: /login}
    upstream: api
    rate_limit: {key: "header:X-Client", per_second: 20, burst: 10}
  - {match: {path_prefix: /}, upstream: api}
`))
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{AccessLog: &logs})
	for _, chunked := range []bool{false, true} {
		key := fmt.Sprint("client-", chunked)
		ok, limited, secs := hammerLimited(t, []string{g.Addr()}, "/login", 50, 10, chunked, "X-Client", key)
		if most := 10 + 20*secs; float64(ok) > most+1 || limited == 0 {
			t.Fatalf("chunked %v: %d passed, %d limited in %.2fs; at most %.0f may pass", chunked, ok, limited, secs, most)
		}
	}
	// Another key, another bucket; another route, no limit.
	if r := do(t, client(), "POST", "http://"+g.Addr()+"/login", nil, "X-Client", "other"); r.code != 200 {
		t.Fatalf("a fresh key: %d", r.code)
	}
	if ok, limited, _ := hammerLimited(t, []string{g.Addr()}, "/", 10, 20, false); limited != 0 || ok != 200 {
		t.Fatalf("the unlimited route: %d passed, %d limited", ok, limited)
	}
	testenv.Eventually(t, "a rate_limited access line", func() bool { return strings.Contains(logs.String(), `"reason":"rate_limited"`) })
	m := get(t, client(), "http://"+g.AdminAddr()+"/metrics").body
	if !strings.Contains(m, `fulcrum_gateway_rate_limited_total{route="0",upstream="api"}`) {
		t.Errorf("metrics lack the rate-limited count")
	}
}

// The buckets kept are bounded: past max_keys the least recently seen
// key's goes, counted.
func TestRateLimitMaxKeys(t *testing.T) {
	b := newBackend(t, "b1")
	g := start(t, base+`upstreams:
  api: {targets: [{url: "`+b.url()+`"}]}
routes:
  - match: {path_prefix: /}
    upstream: api
    rate_limit: {key: "header:X-Client", per_second: 1, burst: 1, max_keys: 16}
`)
	c := client()
	for i := range 100 {
		if r := do(t, c, "GET", "http://"+g.Addr()+"/", nil, "X-Client", strconv.Itoa(i)); r.code != 200 {
			t.Fatalf("key %d's first request: %d", i, r.code)
		}
	}
	m := get(t, c, "http://"+g.AdminAddr()+"/metrics").body
	if !strings.Contains(m, `fulcrum_gateway_rate_limit_keys_dropped_total{route="0"}`) {
		t.Fatalf("no dropped keys counted after 100 keys over max_keys 16")
	}
}

// A shared limit holds across three gateways through Redis; with Redis
// unreachable each gateway falls back to its share and says so once.
func TestRateLimitShared(t *testing.T) {
	redisAddr := testenv.Redis(t)
	b := newBackend(t, "b1")
	conf := func(shared string) string {
		return base + `upstreams:
  api: {targets: [{url: "` + b.url() + `"}]}
routes:
  - match: {path_prefix: /}
    upstream: api
    rate_limit: {key: "header:X-Client", per_second: 30, burst: 15, shared: "` + shared + `", gateways: 3}
`
	}
	var addrs []string
	for range 3 {
		addrs = append(addrs, start(t, conf("redis://"+redisAddr+"/0")).Addr())
	}
	key := fmt.Sprint("shared-", rand.Uint64()) // a key no other run has used
	ok, limited, secs := hammerLimited(t, addrs, "/", 51, 10, false, "X-Client", key)
	if most := 15 + 30*secs; float64(ok) > most+1 || limited == 0 {
		t.Fatalf("%d passed, %d limited in %.2fs across 3 gateways; at most %.0f may pass", ok, limited, secs, most)
	}

	var logs syncBuf
	cfg, err := config.Parse([]byte(conf("redis://127.0.0.1:1/0")))
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ok, limited, secs = hammerLimited(t, []string{g.Addr()}, "/", 20, 10, false, "X-Client", key)
	// Its share: 30/3 per second, a burst of 15/3.
	if most := 5 + 10*secs; float64(ok) > most+1 || limited == 0 {
		t.Fatalf("Redis down: %d passed, %d limited in %.2fs; at most %.0f (the gateway's share) may pass", ok, limited, secs, most)
	}
	if n := strings.Count(logs.String(), "Redis unreachable"); n != 1 {
		t.Fatalf("the outage logged %d times, want once:\n%s", n, logs.String())
	}
}

// --check builds every route without a running gateway: rate limits and
// splits included, nothing dialled.
func TestCheckRoutesWithLimitsAndSplits(t *testing.T) {
	cfg, err := config.Parse([]byte(base + `upstreams:
  v1: {targets: [{url: "http://127.0.0.1:1"}]}
  v2: {targets: [{url: "http://127.0.0.1:2"}]}
routes:
  - {match: {path: /login}, upstream: v1, rate_limit: {per_second: 1, shared: "redis://127.0.0.1:1/0"}}
  - {match: {path_prefix: /}, split: [{upstream: v1, weight: 9}, {upstream: v2, weight: 1, ramp: 1m}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Check(cfg, gateway.Options{}); err != nil {
		t.Fatal(err)
	}
}
