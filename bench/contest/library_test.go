package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/balance/probe"
)

// TestProvidersReportLoad: every provider response carries a Fulcrum-Load
// report the probe rows can read (served, refused or faulty alike), its
// latency known once the provider has answered once.
func TestProvidersReportLoad(t *testing.T) {
	sc := mustScenario(t, `
load: {connections: 1, duration: 1s}
providers:
  - {name: ok, stages: [{at: 0s, permits: 4, avg_rtt: 1ms}]}
  - {name: none, stages: [{at: 0s, permits: 0, avg_rtt: 1ms}]}
  - {name: e500, stages: [{at: 0s, fault: "500"}]}
`)
	ps, err := startProviders(sc)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	ps.Reset(time.Now())
	for i, want := range []int{http.StatusOK, http.StatusServiceUnavailable, http.StatusInternalServerError} {
		for n := range 2 {
			resp, err := http.Get(ps.URLs()[i] + "/")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			l, ok := probe.FromHeader(resp.Header)
			switch {
			case resp.StatusCode != want:
				t.Errorf("%s answered %d, want %d", sc.Providers[i].Name, resp.StatusCode, want)
			case !ok:
				t.Errorf("%s: no valid %s report: %q", sc.Providers[i].Name, probe.Header, resp.Header.Get(probe.Header))
			case l.InFlight != 0:
				t.Errorf("%s: %d other requests in flight reported, with none sent", sc.Providers[i].Name, l.InFlight)
			case n == 1 && l.Latency <= 0:
				t.Errorf("%s: second answer reports no latency: %+v", sc.Providers[i].Name, l)
			}
		}
	}
}

// TestForwarderFeedsProbe: the library forwarder hands each response's
// report to the pick, so probe avoids a target that reports itself busy
// although this forwarder sends it nothing else. Without the reports the
// two targets look alike and share the requests.
func TestForwarderFeedsProbe(t *testing.T) {
	var hits [2]atomic.Int64
	reports := []string{"inflight=100;latency_ms=1", "inflight=0;latency_ms=50"}
	var urls []string
	for i, rep := range reports {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			w.Header().Set(probe.Header, rep)
			_, _ = w.Write([]byte("ok"))
		}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	b, err := balance.New(probe.Name, balance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update([]balance.Target{{Addr: urls[0], Weight: 1}, {Addr: urls[1], Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	tr := newTransport()
	url, stop, err := serveForwarder(&forwarder{p: balancePicker{b: b, maxWait: time.Second}, client: &http.Client{Transport: tr}, attempts: 2}, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const n = 20
	for range n {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("forwarder answered %d", resp.StatusCode)
		}
	}
	// A target never measured is tried once; after its report says 100
	// requests in flight it is hot, and the idle one takes the rest.
	if busy := hits[0].Load(); busy > 1 {
		t.Errorf("the target reporting 100 requests in flight got %d of %d requests, the idle one %d", busy, n, hits[1].Load())
	}
}
