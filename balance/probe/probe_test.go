package probe_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/balance/probe"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want balance.LoadReport
	}{
		{"inflight=3;latency_ms=12", balance.LoadReport{InFlight: 3, Latency: 12 * time.Millisecond}},
		{" inflight = 0 ; latency_ms = 0.5 ", balance.LoadReport{Latency: 500 * time.Microsecond}},
		{"inflight=7", balance.LoadReport{InFlight: 7}},
		{"queue=2;inflight=1;latency_ms=3;", balance.LoadReport{InFlight: 1, Latency: 3 * time.Millisecond}}, // unknown keys skipped
	} {
		got, err := probe.Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, names string }{
		{"inflight=-1", "inflight"},
		{"inflight=x", "inflight"},
		{"inflight=2;latency_ms=-3", "latency_ms"},
		{"inflight=2;latency_ms=NaN", "latency_ms"},
		{"inflight=2;latency_ms=1e300", "latency_ms"},
		{"latency_ms=3", "inflight missing"},
		{"inflight", "key=value"},
		{"", "inflight missing"},
	} {
		_, err := probe.Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.names) || !strings.Contains(err.Error(), probe.Header) {
			t.Errorf("Parse(%q) error %v; want one naming %q", c.in, err, c.names)
		}
	}
	l := balance.LoadReport{InFlight: 42, Latency: 1500 * time.Microsecond}
	if got, err := probe.Parse(probe.Format(l)); err != nil || got != l {
		t.Errorf("Parse(Format(%+v)) = %+v, %v", l, got, err)
	}
	h := http.Header{}
	if _, ok := probe.FromHeader(h); ok {
		t.Error("FromHeader found a report in an empty header")
	}
	h.Set(probe.Header, "inflight=oops")
	if _, ok := probe.FromHeader(h); ok {
		t.Error("FromHeader took a malformed report")
	}
}

// A Go target wrapped in Handler reports, on a real socket, the requests
// it serves besides the answered one and its recent latency.
func TestHandlerReportsLoad(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	srv := httptest.NewServer(probe.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/block":
			entered <- struct{}{}
			<-release
			io.WriteString(w, "done")
		case "/silent": // writes nothing: net/http's implicit 200 must carry the report too
		case "/flush":
			http.NewResponseController(w).Flush()
		case "/copy": // io.Copy reaches the wrapper's ReadFrom
			io.Copy(w, strings.NewReader("copied"))
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	})))
	defer srv.Close()
	get := func(path string) balance.LoadReport {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l, ok := probe.FromHeader(resp.Header)
		if !ok {
			t.Fatalf("%s: no valid %s header: %q", path, probe.Header, resp.Header.Get(probe.Header))
		}
		return l
	}
	if l := get("/"); l.InFlight != 0 || l.Latency != 0 {
		t.Errorf("first request on an idle target reported %+v; want nothing in flight and no latency yet", l)
	}
	if l := get("/silent"); l.Latency <= 0 {
		t.Errorf("second request reported %+v; want the first one's latency", l)
	}
	get("/flush")
	get("/copy")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { get("/block") })
	}
	for range 3 {
		<-entered
	}
	if l := get("/"); l.InFlight != 3 {
		t.Errorf("with 3 requests held, a fourth reported %d in flight; want 3", l.InFlight)
	}
	close(release)
	wg.Wait()
	if l := get("/"); l.InFlight != 0 {
		t.Errorf("after they ended, %d in flight reported; want 0", l.InFlight)
	}
}

func TestRegisteredAndSettingsChecked(t *testing.T) {
	if !balance.Known(probe.Name) {
		t.Fatalf("importing balance/probe did not register %q", probe.Name)
	}
	for _, c := range []struct {
		s   probe.Settings
		key string
	}{
		{probe.Settings{MaxAge: 0, HotQuantile: 0.8}, "max_age"},
		{probe.Settings{MaxAge: time.Second, HotQuantile: 0}, "hot_quantile"},
		{probe.Settings{MaxAge: time.Second, HotQuantile: 1.5}, "hot_quantile"},
	} {
		err := balance.Check(probe.Name, balance.SettingsFrom(c.s))
		var fe *balance.FieldError
		if !errors.As(err, &fe) || fe.Field != c.key {
			t.Errorf("settings %+v: error %v; want a FieldError for %q", c.s, err, c.key)
		}
	}
}

// testClock is a settable clock.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// report makes a pick on addr (the others excluded) that reports l and
// succeeds in lat.
func report(t *testing.T, b *balance.Balancer, addr string, l balance.LoadReport) {
	t.Helper()
	var ex []*balance.Endpoint
	for {
		p, err := b.PickWith(balance.PickInfo{Exclude: ex})
		if err != nil {
			t.Fatalf("no pick reaches %s: %v", addr, err)
		}
		if p.Addr() == addr {
			p.ReportLoad(l)
			p.Report(l.Latency, nil)
			return
		}
		ex = append(ex, p.Endpoint())
		p.Cancel()
	}
}

// The hot-cold rule: among the targets whose requests in flight are not
// above the quantile, the lowest latency; a report past max_age no
// longer counts.
func TestProbePicksByHotCold(t *testing.T) {
	clk := &testClock{}
	clk.ns.Store(1)
	newBal := func(q float64) *balance.Balancer {
		b, err := balance.New(probe.Name, balance.Options{Clock: clk.Now,
			Settings: balance.SettingsFrom(probe.Settings{MaxAge: time.Second, HotQuantile: q})})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Update([]balance.Target{{Addr: "a", Weight: 1}, {Addr: "b", Weight: 1}, {Addr: "c", Weight: 1}}); err != nil {
			t.Fatal(err)
		}
		// a is the fastest but the busiest (another gateway's load: none
		// of it is this one's), b the idlest and slowest.
		report(t, b, "a", balance.LoadReport{InFlight: 10, Latency: 5 * time.Millisecond})
		report(t, b, "b", balance.LoadReport{InFlight: 2, Latency: 20 * time.Millisecond})
		report(t, b, "c", balance.LoadReport{InFlight: 3, Latency: 10 * time.Millisecond})
		return b
	}
	picks := func(b *balance.Balancer) map[string]int {
		got := map[string]int{}
		for range 50 {
			p, err := b.Pick("")
			if err != nil {
				t.Fatal(err)
			}
			got[p.Addr()]++
			p.Cancel()
		}
		return got
	}
	// Quantile 1: nothing is hot by its load, the fastest wins.
	if got := picks(newBal(1)); got["a"] != 50 {
		t.Errorf("hot_quantile 1: picks %v; want every one on a, the lowest latency", got)
	}
	// Quantile 0.5 of (2, 3, 10) is 3: a is hot, c the fastest cold one.
	b := newBal(0.5)
	if got := picks(b); got["c"] != 50 {
		t.Errorf("hot_quantile 0.5: picks %v; want every one on c (a is hot)", got)
	}
	// c's requests in flight count this gateway's picks since its report:
	// while it has fewer than a's 10, a stays hot and c takes every
	// pick; with seven held there it has 10, the quantile 0.5 of (2, 10,
	// 10) is 10, and a is cold again: the fastest cold one.
	var held []balance.Pick
	for range 7 {
		p, _ := b.Pick("")
		if p.Addr() != "c" {
			t.Fatalf("pick went to %s while c was the fastest cold target", p.Addr())
		}
		held = append(held, p)
	}
	if got := picks(b); got["a"] != 50 {
		t.Errorf("with seven picks held on c: picks %v; want every one on a", got)
	}
	for _, p := range held {
		p.Cancel()
	}
	// Reports age out: past max_age every target is ranked by what this
	// gateway saw (latencies 5, 20 and 10 ms as reported, nothing in
	// flight), so a is fastest and no longer hot.
	clk.ns.Add(int64(2 * time.Second))
	if got := picks(b); got["a"] != 50 {
		t.Errorf("reports aged out: picks %v; want every one on a", got)
	}
}

// Two real targets wrapped in Handler, one 1 ms and one 15 ms a request,
// behind one balancer fed by the header: the fast one draws more.
func TestProbeOverRealSockets(t *testing.T) {
	mk := func(d time.Duration) *httptest.Server {
		return httptest.NewServer(probe.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(d) // the target's service time
		})))
	}
	fast, slow := mk(time.Millisecond), mk(15*time.Millisecond)
	defer fast.Close()
	defer slow.Close()
	b, err := balance.New(probe.Name, balance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update([]balance.Target{{Addr: fast.URL, Weight: 1}, {Addr: slow.URL, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				p, err := b.Pick("")
				if err != nil {
					t.Error(err)
					return
				}
				t0 := time.Now()
				resp, err := http.Get(p.Addr())
				if err != nil {
					p.Report(time.Since(t0), err)
					t.Error(err)
					return
				}
				if l, ok := probe.FromHeader(resp.Header); ok {
					p.ReportLoad(l)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				p.Report(time.Since(t0), nil)
				mu.Lock()
				got[p.Addr()]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got[fast.URL] <= got[slow.URL] {
		t.Errorf("fast target drew %d requests, slow %d; want the fast one more", got[fast.URL], got[slow.URL])
	}
}

// A pick, its report and its outcome allocate nothing, at 3 targets and
// at 1,000 (where the pick samples).
func TestProbeDoesNotAllocate(t *testing.T) {
	for _, n := range []int{3, 1000} {
		ts := make([]balance.Target, n)
		for i := range ts {
			ts[i] = balance.Target{Addr: "t" + strconv.Itoa(i), Weight: 1}
		}
		b, err := balance.New(probe.Name, balance.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Update(ts); err != nil {
			t.Fatal(err)
		}
		l := balance.LoadReport{InFlight: 3, Latency: time.Millisecond}
		allocs := testing.AllocsPerRun(1000, func() {
			p, err := b.Pick("")
			if err != nil {
				t.Fatal(err)
			}
			p.ReportLoad(l)
			p.Report(time.Millisecond, nil)
		})
		if allocs != 0 {
			t.Errorf("n=%d: %.1f allocs per pick", n, allocs)
		}
	}
}
