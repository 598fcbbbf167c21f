package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery/discoverytest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// steadyLoad sends GETs from a few workers until stopped and counts what
// failed. Each request carries a number in seqHeader, taken before it is
// sent, so a backend can tell requests sent after a moment from older ones.
type steadyLoad struct {
	done   atomic.Int64
	seq    atomic.Int64 // the last number handed to a request
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed []string
}

func startLoad(t *testing.T, url string, workers int) *steadyLoad {
	l := &steadyLoad{stop: make(chan struct{})}
	c := client()
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				req, err := http.NewRequest("GET", url, nil)
				if err != nil {
					panic(err)
				}
				req.Header.Set(seqHeader, strconv.FormatInt(l.seq.Add(1), 10))
				if msg := failure(c, req); msg != "" {
					l.mu.Lock()
					l.failed = append(l.failed, msg)
					l.mu.Unlock()
				}
				l.done.Add(1)
			}
		}()
	}
	t.Cleanup(l.finish)
	return l
}

// await lets n more requests complete.
func (l *steadyLoad) await(t *testing.T, n int64) {
	t.Helper()
	target := l.done.Load() + n
	testenv.Eventually(t, fmt.Sprintf("%d more requests", n), func() bool { return l.done.Load() >= target })
}

func (l *steadyLoad) finish() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// check stops the load and fails the test if any request failed.
func (l *steadyLoad) check(t *testing.T) {
	t.Helper()
	l.finish()
	if len(l.failed) > 0 {
		t.Fatalf("%d of %d requests failed, first: %s", len(l.failed), l.done.Load(), l.failed[0])
	}
	t.Logf("%d requests, 0 failed", l.done.Load())
}

// awaitTargets waits until the upstream's targets are exactly want (URL
// to weight), all from source.
func awaitTargets(t *testing.T, g *gateway.Gateway, up, source string, want map[string]int) {
	t.Helper()
	var last map[string]gateway.TargetView
	defer func() {
		if t.Failed() {
			t.Logf("last view: %+v", last)
		}
	}()
	testenv.Eventually(t, fmt.Sprintf("targets %v from %s", want, source), func() bool {
		last = view(t, g, up)
		if len(last) != len(want) {
			return false
		}
		for u, w := range want {
			v, ok := last[u]
			if !ok || v.Weight != w || v.Source != source {
				return false
			}
		}
		return true
	})
}

// hitsGrow waits until b serves more requests than it had.
func hitsGrow(t *testing.T, b *loadBackend) {
	t.Helper()
	n := b.hits.Load()
	testenv.Eventually(t, b.name+" to get requests", func() bool { return b.hits.Load() > n })
}

// drained checks that b gets no new picks once it left the set: the
// change was applied when this is called (awaitTargets saw it), so no
// request sent from now on may reach b, while the load sends many more.
// Requests sent before may still reach b: picks made before the change
// finish where they were made.
func drained(t *testing.T, l *steadyLoad, b *loadBackend) {
	t.Helper()
	applied := l.seq.Load()
	l.await(t, 200)
	if got := b.newest.Load(); got > applied {
		t.Fatalf("%s got request %d, sent after it left the set (the change was applied before request %d)", b.name, got, applied+1)
	}
}

// seqHeader carries a load request's number to the backends.
const seqHeader = "X-Load-Seq"

// loadBackend is a test backend that also records the highest load
// request number it was sent.
type loadBackend struct {
	*backend
	newest atomic.Int64
}

func (b *loadBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n, err := strconv.ParseInt(r.Header.Get(seqHeader), 10, 64); err == nil {
		for {
			cur := b.newest.Load()
			if n <= cur || b.newest.CompareAndSwap(cur, n) {
				break
			}
		}
	}
	b.backend.ServeHTTP(w, r)
}

// serveLoad runs a loadBackend on ln.
func serveLoad(t *testing.T, name string, ln net.Listener) *loadBackend {
	b := &loadBackend{backend: &backend{name: name, addr: ln.Addr().String()}}
	b.srv = &http.Server{Handler: b}
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(b.kill)
	return b
}

// loadBackends starts n loadBackends on ephemeral ports.
func loadBackends(t *testing.T, n int) []*loadBackend {
	bs := make([]*loadBackend, n)
	for i := range bs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = serveLoad(t, fmt.Sprintf("b%d", i+1), ln)
	}
	return bs
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sameIPsBackends starts n backends on 127.0.0.1..n on one port, as A
// records with a configured port need. The listeners that found the port
// free are the ones served, so no other socket can take it in between.
func sameIPsBackends(t *testing.T, n int) (bs []*loadBackend, port int) {
	for range 20 {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for i := 2; i <= n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, port))
			if err != nil {
				break
			}
			lns = append(lns, l)
		}
		if len(lns) == n {
			for i, l := range lns {
				bs = append(bs, serveLoad(t, fmt.Sprintf("b%d", i+1), l))
			}
			return bs, port
		}
		for _, l := range lns {
			l.Close()
		}
	}
	t.Fatal("no port free on 127.0.0.1..n")
	return nil, 0
}

func TestDNSDiscoveryUnderLoad(t *testing.T) {
	bs, port := sameIPsBackends(t, 3)
	dns := discoverytest.StartDNS(t)
	dns.Set(t, "api.test. 1 IN A 127.0.0.1", "api.test. 1 IN A 127.0.0.2")
	g := start(t, base+fmt.Sprintf(`upstreams:
  api:
    retry: {attempts: 1}
    discovery:
      dns: {name: api.test, port: %d, server: %q, refresh: 100ms}
`, port, dns.Addr))
	// New waited for the first answer: the targets are there at once.
	if v := view(t, g, "api"); len(v) != 2 || v[bs[0].url()].Source != "dns" {
		t.Fatalf("after New: %+v, want the two A records from dns", v)
	}
	l := startLoad(t, "http://"+g.Addr()+"/", 4)
	l.await(t, 100)

	dns.Set(t, "api.test. 1 IN A 127.0.0.1", "api.test. 1 IN A 127.0.0.2", "api.test. 1 IN A 127.0.0.3")
	awaitTargets(t, g, "api", "dns", map[string]int{bs[0].url(): 1, bs[1].url(): 1, bs[2].url(): 1})
	hitsGrow(t, bs[2])
	before := view(t, g, "api")[bs[1].url()].Requests

	dns.Set(t, "api.test. 1 IN A 127.0.0.2", "api.test. 1 IN A 127.0.0.3")
	awaitTargets(t, g, "api", "dns", map[string]int{bs[1].url(): 1, bs[2].url(): 1})
	drained(t, l, bs[0])
	// A target that stays keeps its state through the change.
	if after := view(t, g, "api")[bs[1].url()].Requests; after < before {
		t.Fatalf("b2's request count went from %d to %d: its state was not kept", before, after)
	}

	// The server fails: the last good list stays and serves.
	dns.Fail(2) // SERVFAIL
	q := dns.Queries()
	testenv.Eventually(t, "more lookups", func() bool { return dns.Queries() >= q+3 })
	l.await(t, 100)
	awaitTargets(t, g, "api", "dns", map[string]int{bs[1].url(): 1, bs[2].url(): 1})
	l.check(t)
}

func TestDNSSRVDiscoveryWeights(t *testing.T) {
	bs := backends(t, 2)
	dns := discoverytest.StartDNS(t)
	srv := func(w1, w2 int) []string {
		return []string{
			fmt.Sprintf("_http._tcp.api.test. 1 IN SRV 10 %d %s a.test.", w1, bs[0].addr[strings.LastIndex(bs[0].addr, ":")+1:]),
			fmt.Sprintf("_http._tcp.api.test. 1 IN SRV 10 %d %s a.test.", w2, bs[1].addr[strings.LastIndex(bs[1].addr, ":")+1:]),
			"a.test. 1 IN A 127.0.0.1",
		}
	}
	dns.Set(t, srv(1, 3)...)
	g := start(t, base+fmt.Sprintf(`upstreams:
  api:
    retry: {attempts: 1}
    discovery:
      dns: {name: _http._tcp.api.test, type: SRV, server: %q, refresh: 100ms}
`, dns.Addr))
	awaitTargets(t, g, "api", "dns", map[string]int{bs[0].url(): 1, bs[1].url(): 3})
	l := startLoad(t, "http://"+g.Addr()+"/", 4)
	dns.Set(t, srv(5, 2)...)
	awaitTargets(t, g, "api", "dns", map[string]int{bs[0].url(): 5, bs[1].url(): 2})
	l.await(t, 100)
	l.check(t)
}

func TestFileDiscoveryUnderLoad(t *testing.T) {
	bs := loadBackends(t, 3)
	dir := t.TempDir()
	list := filepath.Join(dir, "targets.yaml")
	write := func(text string) { t.Helper(); replaceFile(t, list, text) }
	write(fmt.Sprintf("- {url: %q}\n- {url: %q}\n", bs[0].url(), bs[1].url()))
	logs := &syncBuf{}
	cfg, err := config.Parse([]byte(base + fmt.Sprintf("upstreams:\n  api:\n    retry: {attempts: 1}\n    discovery:\n      file: {path: %q}\n", list)))
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	awaitTargets(t, g, "api", "file", map[string]int{bs[0].url(): 1, bs[1].url(): 1})
	l := startLoad(t, "http://"+g.Addr()+"/", 4)
	l.await(t, 100)

	write(fmt.Sprintf(`{"targets": [{"url": %q}, {"url": %q, "weight": 3}, {"url": %q, "weight": 2}]}`, bs[0].url(), bs[1].url(), bs[2].url()))
	awaitTargets(t, g, "api", "file", map[string]int{bs[0].url(): 1, bs[1].url(): 3, bs[2].url(): 2})
	hitsGrow(t, bs[2])

	// Invalid: refused whole, logged with the line, the old list serves on.
	write(fmt.Sprintf("- {url: %q}\n- {url: %q, weight: -2}\n", bs[2].url(), bs[1].url()))
	testenv.Eventually(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "line 2: targets[1].weight") })
	awaitTargets(t, g, "api", "file", map[string]int{bs[0].url(): 1, bs[1].url(): 3, bs[2].url(): 2})

	write(fmt.Sprintf("- {url: %q}\n- {url: %q}\n", bs[1].url(), bs[2].url()))
	awaitTargets(t, g, "api", "file", map[string]int{bs[1].url(): 1, bs[2].url(): 1})
	drained(t, l, bs[0])
	l.check(t)
}

func TestEtcdDiscoveryUnderLoad(t *testing.T) {
	bs := loadBackends(t, 3)
	endpoint := discoverytest.Etcd(t)
	prefix := discoverytest.Prefix(t)
	blk := config.EtcdDiscovery{Endpoints: []string{endpoint}, DialTimeout: config.Duration(5 * time.Second)}
	cli, err := discovery.NewEtcdClient(blk)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The registrations that must stay have leases of a minute, so a
	// loaded machine's pause cannot make one lapse under the load (Close
	// revokes at once); the one whose lapse is tested has the shortest.
	register := func(cli *clientv3.Client, b *loadBackend, weight int, started time.Time, ttl time.Duration) *discovery.Registration {
		t.Helper()
		r, err := discovery.Register(t.Context(), cli, prefix, discovery.Target{URL: b.url(), Weight: weight, StartedAt: started}, ttl, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Started two hours ago with a one-hour warm-up: warm on arrival.
	// Registered just now: warming.
	long := time.Now().Add(-2 * time.Hour)
	r1 := register(cli, bs[0], 1, long, time.Minute)
	r2 := register(cli, bs[1], 1, long, time.Minute)
	g := start(t, base+fmt.Sprintf(`upstreams:
  api:
    retry: {attempts: 1}
    discovery:
      warmup: 1h
      etcd: {endpoints: [%q], prefix: %q}
`, endpoint, prefix))
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[0].url(): 1, bs[1].url(): 1})
	if v := view(t, g, "api")[bs[0].url()]; v.Warming || v.StartedAt == nil || !v.StartedAt.Equal(long.Truncate(time.Nanosecond)) {
		t.Fatalf("b1 registered as started 2h ago, 1h warm-up: %+v, want warm with started_at", v)
	}
	l := startLoad(t, "http://"+g.Addr()+"/", 4)
	l.await(t, 100)

	// b3's registrar has a client of its own, to die with.
	dying, err := discovery.NewEtcdClient(blk)
	if err != nil {
		t.Fatal(err)
	}
	defer dying.Close()
	register(dying, bs[2], 4, time.Time{}, 2*time.Second)
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[0].url(): 1, bs[1].url(): 1, bs[2].url(): 4})
	if v := view(t, g, "api")[bs[2].url()]; !v.Warming {
		t.Fatalf("b3 registered just now with a 1h warm-up: %+v, want warming", v)
	}
	hitsGrow(t, bs[2])

	// A new weight: registered again.
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	r2 = register(cli, bs[1], 2, long, time.Minute)
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[0].url(): 1, bs[1].url(): 2, bs[2].url(): 4})

	// b3's registrar dies without deregistering: its lease lapses and it
	// drains. b1 deregisters cleanly.
	dying.Close()
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[0].url(): 1, bs[1].url(): 2})
	drained(t, l, bs[2])
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[1].url(): 2})
	drained(t, l, bs[0])
	l.check(t)
	_ = r2.Close()
}

// Targets set with the admin API survive a reload that leaves the
// upstream's targets in the file alone, and give way when the file changes
// them.
func TestAdminTargetsSurviveReload(t *testing.T) {
	bs := backends(t, 3)
	dir := t.TempDir()
	text := base + "upstreams:\n  api:\n    targets:\n" + targets(bs[:1]) + "  other:\n    targets:\n" + targets(bs[2:]) +
		"routes:\n  - {match: {path_prefix: /}, upstream: api}\n"
	path := writeFile(t, dir, "gw.yaml", text)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{ConfigPath: path, Logger: quietLog()})
	awaitTargets(t, g, "api", "config", map[string]int{bs[0].url(): 1})
	c := client()
	body := fmt.Sprintf(`[{"url": %q}, {"url": %q, "weight": 2}]`, bs[0].url(), bs[1].url())
	if r := do(t, c, "PUT", "http://"+g.AdminAddr()+"/upstreams/api/targets", strings.NewReader(body)); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	awaitTargets(t, g, "api", "admin", map[string]int{bs[0].url(): 1, bs[1].url(): 2})

	// Another upstream changes: api keeps the admin's targets.
	writeFile(t, dir, "gw.yaml", strings.Replace(text, bs[2].url(), bs[1].url(), 1))
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	awaitTargets(t, g, "api", "admin", map[string]int{bs[0].url(): 1, bs[1].url(): 2})
	awaitTargets(t, g, "other", "config", map[string]int{bs[1].url(): 1})

	// The file changes api's targets: the file wins.
	writeFile(t, dir, "gw.yaml", strings.Replace(text, "targets:\n"+targets(bs[:1]), "targets:\n"+targets(bs[2:]), 1))
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	awaitTargets(t, g, "api", "config", map[string]int{bs[2].url(): 1})
}

// chanProvider is a discovery source of a test's own: it sends what the
// test puts on its channel.
type chanProvider struct{ lists chan []discovery.Target }

func (p *chanProvider) Source() string { return "test-registry" }

func (p *chanProvider) Lookup(context.Context) ([]discovery.Target, error) {
	return nil, fmt.Errorf("not used")
}

func (p *chanProvider) Watch(ctx context.Context, update func([]discovery.Target)) {
	for {
		select {
		case <-ctx.Done():
			return
		case ts := <-p.lists:
			update(ts)
		}
	}
}

// A source written in Go is given to the gateway by name and named in the
// config.
func TestProviderFromOptions(t *testing.T) {
	bs := loadBackends(t, 2)
	p := &chanProvider{lists: make(chan []discovery.Target)}
	text := base + "upstreams:\n  api:\n    discovery: {provider: registry, warmup: 1h}\n"
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(cfg, gateway.Options{Logger: quietLog()}); err == nil || !strings.Contains(err.Error(), `upstreams.api.discovery.provider: no provider "registry"`) {
		t.Fatalf("New without the provider: %v", err)
	}
	// The first list, which New waits for.
	go func() {
		p.lists <- []discovery.Target{{URL: bs[0].url(), Weight: 2}, {URL: bs[1].url(), Weight: 1, StartedAt: time.Now().Add(-2 * time.Hour)}}
	}()
	g := startCfg(t, cfg, gateway.Options{Logger: quietLog(), Providers: map[string]discovery.Provider{"registry": p}})
	awaitTargets(t, g, "api", "test-registry", map[string]int{bs[0].url(): 2, bs[1].url(): 1})
	l := startLoad(t, "http://"+g.Addr()+"/", 2)
	if v := view(t, g, "api"); !v[bs[0].url()].Warming || v[bs[1].url()].Warming {
		t.Fatalf("warm-up: %+v, want b1 warming (no start time, 1h window) and b2 warm (started 2h ago)", v)
	}
	// A list the gateway cannot use is refused whole.
	p.lists <- []discovery.Target{{URL: bs[0].url()}, {URL: "ftp://x"}}
	p.lists <- []discovery.Target{{URL: bs[1].url(), Weight: 3}}
	awaitTargets(t, g, "api", "test-registry", map[string]int{bs[1].url(): 3})
	// The counter goes up just after the list is applied: await it.
	c := client()
	for _, want := range []string{
		`fulcrum_gateway_discovery_updates_total{result="applied",source="test-registry",upstream="api"} 2`,
		`fulcrum_gateway_discovery_updates_total{result="refused",source="test-registry",upstream="api"} 1`,
	} {
		testenv.Eventually(t, "metrics with "+want, func() bool {
			return strings.Contains(get(t, c, "http://"+g.AdminAddr()+"/metrics").body, want)
		})
	}
	drained(t, l, bs[0])
	l.check(t)
}

// A discovery change keeps the state of the targets that stay: an ejected
// target stays ejected (until its time), counters carry over.
func TestDiscoveryChangeKeepsEjection(t *testing.T) {
	bs := backends(t, 3)
	list := filepath.Join(t.TempDir(), "targets.yaml")
	write := func(text string) { t.Helper(); replaceFile(t, list, text) }
	write(fmt.Sprintf("- {url: %q}\n- {url: %q}\n", bs[0].url(), bs[1].url()))
	g := start(t, base+fmt.Sprintf(`upstreams:
  api:
    retry: {attempts: 2, on: [connect_error, 503]}
    health: {passive: {max_failures: 2, eject_for: 1h, max_ejected_percent: 50}}
    discovery:
      file: {path: %q}
`, list))
	c := client()
	bs[1].status.Store(503)
	testenv.Eventually(t, "b2 ejected", func() bool {
		get(t, c, "http://"+g.Addr()+"/")
		return view(t, g, "api")[bs[1].url()].Ejected
	})
	before := view(t, g, "api")
	write(fmt.Sprintf("- {url: %q, weight: 2}\n- {url: %q}\n- {url: %q}\n", bs[0].url(), bs[1].url(), bs[2].url()))
	awaitTargets(t, g, "api", "file", map[string]int{bs[0].url(): 2, bs[1].url(): 1, bs[2].url(): 1})
	after := view(t, g, "api")
	if b := after[bs[1].url()]; !b.Ejected || !b.EjectedUntil.Equal(*before[bs[1].url()].EjectedUntil) || b.Failures < before[bs[1].url()].Failures {
		t.Fatalf("b2 after the change: %+v; before: %+v", b, before[bs[1].url()])
	}
	if a := after[bs[0].url()]; a.Requests < before[bs[0].url()].Requests {
		t.Fatalf("b1's counters went back: %d -> %d", before[bs[0].url()].Requests, a.Requests)
	}
}

// fakeClock is a settable clock for the balancers' warm-up.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// Warm-up counts from the start time a provider registered in etcd, not
// from when the gateway saw it; a later start time (the provider
// restarted) starts it over; a registration without one counts from first
// sight. Under a fake clock, so the effective weights are exact.
func TestEtcdWarmupFromRegisteredStart(t *testing.T) {
	bs := backends(t, 2)
	endpoint := discoverytest.Etcd(t)
	prefix := discoverytest.Prefix(t)
	cli, err := discovery.NewEtcdClient(config.EtcdDiscovery{Endpoints: []string{endpoint}, DialTimeout: config.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	clk := &fakeClock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	put := func(b *backend, started time.Time) {
		t.Helper()
		v := fmt.Sprintf(`{"url": %q, "weight": 10}`, b.url())
		if !started.IsZero() {
			v = fmt.Sprintf(`{"url": %q, "weight": 10, "started_at": %q}`, b.url(), started.Format(time.RFC3339Nano))
		}
		if _, err := cli.Put(t.Context(), prefix+b.addr, v); err != nil {
			t.Fatal(err)
		}
	}
	put(bs[0], clk.Now().Add(-30*time.Second))
	cfg, err := config.Parse([]byte(base + fmt.Sprintf("upstreams:\n  api:\n    discovery:\n      warmup: 60s\n      etcd: {endpoints: [%q], prefix: %q}\n", endpoint, prefix)))
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{Logger: quietLog(), Clock: clk.Now})
	weights := func() (a, b int) {
		v := view(t, g, "api")
		return v[bs[0].url()].EffectiveWeight, v[bs[1].url()].EffectiveWeight
	}
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[0].url(): 10})
	if a, _ := weights(); a != 5 {
		t.Fatalf("started 30s before a 60s window: effective weight %d, want 5", a)
	}

	put(bs[1], time.Time{}) // no start time: from first sight
	awaitTargets(t, g, "api", "etcd", map[string]int{bs[0].url(): 10, bs[1].url(): 10})
	clk.Advance(18 * time.Second)
	if a, b := weights(); a != 8 || b != 3 {
		t.Fatalf("18s on: effective weights %d and %d, want 8 (48s into 60s) and 3 (18s in)", a, b)
	}

	// b1 restarted 6s ago: its registration says so, and it warms again.
	put(bs[0], clk.Now().Add(-6*time.Second))
	testenv.Eventually(t, "b1's warm-up to start over", func() bool { a, _ := weights(); return a == 1 })
	clk.Advance(time.Minute)
	if a, b := weights(); a != 10 || b != 10 {
		t.Fatalf("a minute on: effective weights %d and %d, want 10 and 10", a, b)
	}
}

// A reload that adds a tls block to a DNS upstream restarts its source,
// and the old http targets do not carry over: until the source answers
// (here it fails at first), the upstream has none; then https ones.
func TestDNSDiscoveryReloadToTLS(t *testing.T) {
	dns := discoverytest.StartDNS(t)
	dns.Set(t, "api.test. 1 IN A 127.0.0.1")
	dir := t.TempDir()
	text := base + fmt.Sprintf("upstreams:\n  api:\n    discovery:\n      dns: {name: api.test, port: 8443, server: %q, refresh: 100ms}\n", dns.Addr)
	path := writeFile(t, dir, "gw.yaml", text)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := startCfg(t, cfg, gateway.Options{ConfigPath: path, Logger: quietLog()})
	awaitTargets(t, g, "api", "dns", map[string]int{"http://127.0.0.1:8443": 1})
	dns.Fail(2) // SERVFAIL
	writeFile(t, dir, "gw.yaml", strings.Replace(text, "    discovery:", "    tls: {}\n    discovery:", 1))
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if v := view(t, g, "api"); len(v) != 0 {
		t.Fatalf("right after the reload: %+v, want no targets (the http ones do not fit)", v)
	}
	dns.Fail(0)
	awaitTargets(t, g, "api", "dns", map[string]int{"https://127.0.0.1:8443": 1})
}

// replaceFile writes text to path by rename, as docs/gateway.md tells users
// to, so a watcher never sees a half-written list.
func replaceFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
