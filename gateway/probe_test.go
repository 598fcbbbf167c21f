package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
)

// The probe strategy reads each response's Fulcrum-Load header through
// the gateway: of two equally fast targets, the one that reports itself
// loaded (many requests in flight, a long latency) gets a small share,
// the one that reports itself idle the rest. Without the header read, the
// two would split the traffic about evenly.
func TestProbeReadsTargetsLoadReports(t *testing.T) {
	var hits [2]atomic.Int64
	reports := []string{"inflight=40;latency_ms=400", "inflight=0;latency_ms=1"}
	var hs []http.HandlerFunc
	for i, rep := range reports {
		hs = append(hs, func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			w.Header().Set("Fulcrum-Load", rep)
			io.WriteString(w, "ok")
		})
	}
	urls := handlerTargets(t, hs...)
	g := start(t, base+"upstreams:\n  api:\n    strategy: probe\n    targets:\n"+
		fmt.Sprintf("      - {url: %q}\n      - {url: %q}\n", urls[0], urls[1]))
	const workers, each = 4, 100
	getLoad(t, g, workers, each)
	loaded, idle := hits[0].Load(), hits[1].Load()
	t.Logf("loaded target %d, idle target %d", loaded, idle)
	if loaded+idle != workers*each || loaded*4 > idle {
		t.Fatalf("the target reporting load got %d of %d requests, want at most a fifth of the idle one's %d", loaded, loaded+idle, idle)
	}
}

// The fast-failure trap through the gateway: a target that answers fast
// 500s (not in retry.on, so relayed as they are) must not draw more
// traffic than a slower healthy one under any latency-aware strategy.
// The gateway tells the balancer a relayed 5xx is a failure.
func TestFastFailuresDoNotDrawTraffic(t *testing.T) {
	for _, strategy := range []string{"p2c", "shortest_response", "capacity", "probe"} {
		t.Run(strategy, func(t *testing.T) {
			var hits [2]atomic.Int64
			urls := handlerTargets(t, func(w http.ResponseWriter, r *http.Request) {
				hits[0].Add(1)
				w.WriteHeader(500) // fast, and failing
			}, func(w http.ResponseWriter, r *http.Request) {
				hits[1].Add(1)
				time.Sleep(5 * time.Millisecond)
				io.WriteString(w, "ok")
			})
			g := start(t, base+"upstreams:\n  api:\n    strategy: "+strategy+"\n    targets:\n"+
				fmt.Sprintf("      - {url: %q}\n      - {url: %q}\n", urls[0], urls[1]))
			getLoad(t, g, 4, 60)
			failing, healthy := hits[0].Load(), hits[1].Load()
			t.Logf("failing target %d, healthy target %d", failing, healthy)
			if failing > healthy {
				t.Fatalf("the target answering fast 500s drew %d requests, the healthy one %d", failing, healthy)
			}
		})
	}
}

// handlerTargets serves each handler on a real socket and returns the
// targets' URLs.
func handlerTargets(t *testing.T, hs ...http.HandlerFunc) []string {
	var urls []string
	for _, h := range hs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls
}

// getLoad sends workers × each GETs through g, workers at a time.
func getLoad(t *testing.T, g *gateway.Gateway, workers, each int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client()
			for range each {
				res, err := c.Get("http://" + g.Addr() + "/")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
}
