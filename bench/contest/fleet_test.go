package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	if q := sc.ForcedWait(); q.MeanWait != 0 {
		t.Errorf("open loop forces no bounded wait, got %v", q.MeanWait.D())
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
