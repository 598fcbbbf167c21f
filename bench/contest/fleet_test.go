package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoopCountsTimeoutsAndSpreads: open loop, requests arrive
// whatever the answers; one unanswered within the timeout is an error,
// and the arrivals alternate between the fleet's URLs.
func TestOpenLoopCountsTimeoutsAndSpreads(t *testing.T) {
	var fastN, holeN atomic.Int64
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fastN.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	defer fast.Close()
	hole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		holeN.Add(1)
		<-r.Context().Done() // never answers
	}))
	defer hole.Close()
	load := Load{Rate: []RateStage{{RPS: 200}}, Timeout: Duration(100 * time.Millisecond), Duration: Duration(time.Second)}
	res := runLoad(context.Background(), []string{fast.URL, hole.URL}, load, 1, time.Now())
	if res.Successes == 0 || res.Errors == 0 {
		t.Fatalf("%d successes, %d errors: want the fast half answered and the black hole's half timed out", res.Successes, res.Errors)
	}
	// Every request to the black hole that could time out within the run
	// did, and counts as an error; none of the fast server's failed.
	if res.Errors > holeN.Load() || res.Successes > fastN.Load() {
		t.Errorf("%d errors from %d black-hole requests, %d successes from %d fast ones", res.Errors, holeN.Load(), res.Successes, fastN.Load())
	}
	// The arrivals alternate: the two counts differ only by the requests
	// the end of the run caught before they arrived.
	if d, slack := fastN.Load()-holeN.Load(), 5+(fastN.Load()+holeN.Load())/10; d < -slack || d > slack {
		t.Errorf("fast got %d requests, black hole %d: not spread evenly", fastN.Load(), holeN.Load())
	}
}

func TestOpenLoopTheoreticalMax(t *testing.T) {
	sc := mustScenario(t, `
load: {rate: [{at: 0s, rps: 100}, {at: 2s, rps: 1000}], duration: 4s}
providers:
  - name: a
    stages: [{at: 0s, permits: 10, avg_rtt: 50ms}, {at: 3s, fault: "503"}]
  - name: b
    stages: [{at: 0s, permits: 5, avg_rtt: 50ms}]
`)
	// 0-2 s: the arrivals bind (100/s); 2-3 s: the permits (300/s);
	// 3-4 s: b alone (100/s).
	if got, want := sc.TheoreticalMax(), 2*100.0+300+100; got < want-1e-6 || got > want+1e-6 {
		t.Errorf("theoretical max %v, want %v", got, want)
	}
	if !sc.OverloadedAt(2500*time.Millisecond) || sc.OverloadedAt(time.Second) {
		t.Error("overloaded: want only while the arrivals exceed the permits' rate")
	}
	// 2-4 s the arrivals outrun the permits by 700-900 a second: a queue
	// that refuses nothing grows for the rest of the run (the default
	// 30 s timeout never empties it), seconds of wait a success.
	if q := sc.ForcedWait(); q.MeanWait.D() < time.Second {
		t.Errorf("open loop past the permits: mean forced wait %v, want seconds", q.MeanWait.D())
	}
}

// TestFleetSmoke is the CI smoke test of the learning peers, fleet mode
// and open loop: a tiny open-loop scenario whose large provider fails
// fast for a while, two instances of each contender. It checks that the
// harness runs them (each row has successes, the fleet's learned rows
// say how they split the targets, each peer's configuration is in the
// JSON), nothing about speed.
func TestFleetSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for about 20 s")
	}
	dir := t.TempDir()
	scen := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(scen, []byte(`name: tiny
seed: 5
gateways: 2
load:
  rate: [{at: 0s, rps: 150}, {at: 800ms, rps: 300}]
  timeout: 1s
  warmup: 300ms
  duration: 1200ms
providers:
  - name: small
    stages: [{at: 0s, permits: 6, avg_rtt: 20ms}]
  - name: large
    stages: [{at: 0s, permits: 12, avg_rtt: 20ms}, {at: 800ms, fault: "503"}, {at: 1200ms, permits: 12, avg_rtt: 20ms}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := run(ctx, options{
		scenario: scen,
		out:      out,
		only:     `^(fulcrum capacity \(learned\)|library capacity \(learned\)|oracle|failsafe-go|kratos|caddy least_conn)`,
		fulcrum:  testFulcrum(t),
	}, &log)
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Gateways != 2 {
		t.Errorf("report says %d gateways, want 2", rep.Gateways)
	}
	ran := map[string]Record{}
	for _, r := range rep.Records {
		if r.Skipped != "" {
			if r.Contender != "caddy least_conn" || !strings.Contains(r.Skipped, "not installed") {
				t.Errorf("%s skipped: %s", r.Contender, r.Skipped)
			}
			continue
		}
		ran[r.Contender] = r
		if r.Successes <= 0 {
			t.Errorf("%s: %d successes", r.Contender, r.Successes)
		}
		want := 2
		if r.Kind == "oracle" {
			want = 0 // one global oracle
		}
		if r.Gateways != want {
			t.Errorf("%s ran %d instances, want %d", r.Contender, r.Gateways, want)
		}
		if r.Kind == "peer" && r.Config == "" {
			t.Errorf("%s: no configuration in the record", r.Contender)
		}
	}
	for _, name := range []string{"library capacity (learned)", "failsafe-go adaptivelimiter", "failsafe-go adaptivelimiter (queueing)"} {
		r, ok := ran[name]
		if !ok {
			t.Errorf("%s did not run", name)
			continue
		}
		if f := r.FleetSplit; f == nil || len(f.Share) != 2 || len(f.Share[0]) != 2 || len(r.FleetTimelines) != 2 {
			t.Errorf("%s: no split of 2 targets between 2 gateways: %+v", name, r.FleetSplit)
		}
	}
	for _, name := range []string{"kratos p2c", "oracle: library capacity (stage permits)", "fulcrum capacity (learned)"} {
		if _, ok := ran[name]; !ok {
			t.Errorf("%s did not run", name)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, r := range back.Records {
		if r.Contender == "failsafe-go adaptivelimiter (queueing)" && !strings.Contains(r.Config, "WithQueueing(2, 3)") {
			t.Errorf("tiny.json: %s's configuration is %q", r.Contender, r.Config)
		}
	}
}

var (
	fulcrumOnce sync.Once
	fulcrumDir  string
	fulcrumBin  string
	fulcrumErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fulcrumDir != "" {
		os.RemoveAll(fulcrumDir)
	}
	os.Exit(code)
}

// testFulcrum builds the fulcrum binary once for the tests that run the
// gateway.
func testFulcrum(t *testing.T) string {
	fulcrumOnce.Do(func() {
		if fulcrumDir, fulcrumErr = os.MkdirTemp("", "contest-test-"); fulcrumErr == nil {
			fulcrumBin, fulcrumErr = buildFulcrum(fulcrumDir)
		}
	})
	if fulcrumErr != nil {
		t.Fatal(fulcrumErr)
	}
	return fulcrumBin
}

// TestProviderFaults: a faulty stage answers 500 or 503 at once, or
// never (only the client's timeout ends the request).
func TestProviderFaults(t *testing.T) {
	sc := mustScenario(t, `
load: {connections: 1, duration: 1s}
providers:
  - {name: e500, stages: [{at: 0s, fault: "500"}]}
  - {name: e503, stages: [{at: 0s, fault: "503"}]}
  - {name: hole, stages: [{at: 0s, fault: blackhole}]}
`)
	ps, err := startProviders(sc)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	ps.Reset(time.Now())
	client := &http.Client{Timeout: 200 * time.Millisecond}
	for i, want := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
		resp, err := client.Get(ps.URLs()[i] + "/")
		if err != nil {
			t.Fatalf("%s: %v", sc.Providers[i].Name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s answered %d, want %d", sc.Providers[i].Name, resp.StatusCode, want)
		}
	}
	_, err = client.Get(ps.URLs()[2] + "/")
	var ne interface{ Timeout() bool }
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("black hole: %v, want the client's timeout", err)
	}
	if got := sc.TheoreticalMax(); got != 0 {
		t.Errorf("faulty providers serve nothing, theoretical max %v", got)
	}
}

// TestFleetSplitMeasures: the split says how far apart the gateways'
// limits on a target are, and when their sum settled near the permits.
func TestFleetSplitMeasures(t *testing.T) {
	sc := mustScenario(t, `
load: {connections: 10, warmup: 1s, duration: 2s}
providers:
  - {name: a, stages: [{at: 0s, permits: 30, avg_rtt: 10ms}, {at: 2s, permits: 60, avg_rtt: 10ms}]}
`)
	// Two gateways, sampled every 100 ms from 0 to 3 s: 10 and 20 until
	// the change at 2 s, then both climb by 5 a sample to 30 (sum 60).
	var a, b Timeline
	for i := range 30 {
		at := float64(i) / 10
		la, lb := int64(10), int64(20)
		if at >= 2 {
			k := int64(i-20) + 1
			la, lb = min(10+5*k, 30), min(20+5*k, 30)
		}
		for _, x := range []struct {
			tl *Timeline
			v  int64
		}{{&a, la}, {&b, lb}} {
			x.tl.Targets = []string{"a"}
			x.tl.T = append(x.tl.T, at)
			x.tl.Limit = append(x.tl.Limit, []int64{x.v})
		}
	}
	fs := fleetSplit(sc, []*Timeline{&a, &b})
	if fs == nil || len(fs.Share) != 1 || len(fs.Share[0]) != 2 {
		t.Fatalf("split %+v", fs)
	}
	if fs.Share[0][0] >= fs.Share[0][1] || fs.MaxOverMin <= 1 {
		t.Errorf("gateway b held more of the target than a: share %v, max/min %v", fs.Share[0], fs.MaxOverMin)
	}
	// The sum is 15+25 = 40 at 2.0 s, under 45 (60 less 25 %), and
	// 20+30 = 50 at 2.1 s: settled 0.1 s after the change, and stays.
	if fs.Settled != 1 || fs.Unsettled != 0 || fs.SettleMedianS < 0.05 || fs.SettleMedianS > 0.15 {
		t.Errorf("settled %d, unsettled %d, in %v s; want once, in 0.1 s", fs.Settled, fs.Unsettled, fs.SettleMedianS)
	}
}
