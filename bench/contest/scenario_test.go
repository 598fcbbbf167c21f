package main

import (
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShippedScenariosAreValid(t *testing.T) {
	files, err := filepath.Glob("scenarios/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("want the shipped scenarios (contest, steady, degrade): %v %v", files, err)
	}
	for _, f := range files {
		sc, err := LoadScenario(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if sc.TheoreticalMax() <= 0 {
			t.Errorf("%s: theoretical max %v", f, sc.TheoreticalMax())
		}
	}
}

// TestContestShape holds the contest scenario to what issue 6 asks of it.
func TestContestShape(t *testing.T) {
	sc, err := LoadScenario("scenarios/contest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Providers) != 3 {
		t.Fatalf("%d providers, want 3", len(sc.Providers))
	}
	first := []int{sc.Providers[0].Stages[0].Permits, sc.Providers[1].Stages[0].Permits, sc.Providers[2].Stages[0].Permits}
	if first[0]*45 != first[1]*20 || first[0]*65 != first[2]*20 {
		t.Errorf("first-stage permits %v are not in 200:450:650 proportion", first)
	}
	var below, near, above bool
	for _, at := range sc.changePoints() {
		total := 0
		for i := range sc.Providers {
			s := sc.Providers[i].stageAt(at)
			total += s.Permits
			if s.Permits >= sc.Load.Connections {
				t.Errorf("at %v provider %s alone can carry the load", at, sc.Providers[i].Name)
			}
			if at == 0 && s.AvgRTT.D() != 50*time.Millisecond {
				t.Errorf("provider %s starts at %v, want 50ms", sc.Providers[i].Name, s.AvgRTT.D())
			}
		}
		r := float64(total) / float64(sc.Load.Connections)
		below = below || r < 0.9
		near = near || (r >= 0.9 && r <= 1.1)
		above = above || r > 1.1
	}
	if !below || !near || !above {
		t.Errorf("capacity should swing below, near and above the load: below=%v near=%v above=%v", below, near, above)
	}
}

func TestTheoreticalMax(t *testing.T) {
	mk := func(conns int, warm, dur time.Duration, ps ...Provider) *Scenario {
		return &Scenario{Load: Load{Connections: conns, Warmup: Duration(warm), Duration: Duration(dur)}, Providers: ps}
	}
	p := func(stages ...Stage) Provider { return Provider{Name: "p", Stages: stages} }
	st := func(at time.Duration, permits int, rtt time.Duration) Stage {
		return Stage{At: Duration(at), Permits: permits, AvgRTT: Duration(rtt)}
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		sc   *Scenario
		want float64
	}{
		{"permits bind", mk(50, 0, 2*time.Second, p(st(0, 10, 100*ms))), 200},
		{"connections bind", mk(5, 0, 2*time.Second, p(st(0, 10, 100*ms))), 100},
		{"warm-up not counted, stage change inside", mk(100, time.Second, 2*time.Second,
			p(st(0, 10, 100*ms), st(2*time.Second, 20, 100*ms))), 100 + 200},
		{"connections fill the fastest first", mk(15, 0, time.Second,
			Provider{Name: "slow", Stages: []Stage{st(0, 10, 100*ms)}},
			Provider{Name: "fast", Stages: []Stage{st(0, 10, 50*ms)}}), 200 + 50},
	} {
		if got := tc.sc.TheoreticalMax(); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestForcedWait checks Little's law's wait and the p99s it gives against
// figures worked by hand: exponential service with mean m exceeds
// m*ln(100) one time in a hundred.
func TestForcedWait(t *testing.T) {
	ms := time.Millisecond
	st := func(at time.Duration, permits int, rtt time.Duration) Stage {
		return Stage{At: Duration(at), Permits: permits, AvgRTT: Duration(rtt)}
	}
	one := func(conns int, stages ...Stage) *Scenario {
		return &Scenario{Load: Load{Connections: conns, Duration: Duration(2 * time.Second)},
			Providers: []Provider{{Name: "p", Stages: stages}}}
	}
	near := func(what string, got Duration, want float64) {
		t.Helper()
		if g := float64(got.D()) / float64(ms); math.Abs(g-want) > 0.01 {
			t.Errorf("%s: %.3f ms, want %.3f", what, g, want)
		}
	}
	p99 := 50 * math.Log(100) // 230.26 ms

	// 150 connections on 100 permits of 50 ms: 2,000 successes a second,
	// 50 connections waiting, 25 ms each.
	q := one(150, st(0, 100, 50*ms)).ForcedWait()
	near("overloaded: mean wait", q.MeanWait, 25)
	near("overloaded: p99 with no wait", q.P99, p99)
	near("overloaded: p99 with the wait", q.P99Spread, p99+25)

	// Fewer connections than permits: nothing waits.
	q = one(80, st(0, 100, 50*ms)).ForcedWait()
	near("underloaded: mean wait", q.MeanWait, 0)
	near("underloaded: p99", q.P99Spread, p99)

	// Overloaded for the first of two seconds (the same rate in both):
	// half the successes wait 25 ms, and the p99 is where the two halves'
	// tails together hold 1 %.
	q = one(150, st(0, 100, 50*ms), st(time.Second, 150, 75*ms)).ForcedWait()
	near("half overloaded: mean wait", q.MeanWait, 12.5)
	x := float64(q.P99Spread.D()) / float64(ms)
	if tail := (math.Exp(-(x-25)/50) + math.Exp(-x/75)) / 2; math.Abs(tail-0.01) > 1e-6 {
		t.Errorf("half overloaded: %.6f of the successes above the p99 %.2f ms, want 0.01", tail, x)
	}

	// The shipped contest: the queue's share of the p99 gap to a sprayer
	// (docs/benchmarks.md, adaptive balancing).
	sc, err := LoadScenario("scenarios/contest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if q := sc.ForcedWait(); q.MeanWait.D() < 5*ms || q.P99Spread.D()-q.P99.D() < 5*ms {
		t.Errorf("contest: mean wait %v, p99 %v against %v with no wait: want over 5 ms each", q.MeanWait.D(), q.P99Spread.D(), q.P99.D())
	}
}

// TestForcedWaitOpenLoop checks the simulated open-loop queue against
// bounds worked by hand: a spike past the permits' rate builds a queue
// that drains after it, arrivals well below that rate wait for nothing,
// and a waiter past the timeout fails rather than succeeding late.
func TestForcedWaitOpenLoop(t *testing.T) {
	ms := time.Millisecond
	open := func(timeout time.Duration, rates ...RateStage) *Scenario {
		return &Scenario{
			Load:      Load{Rate: rates, Timeout: Duration(timeout), Duration: Duration(4 * time.Second)},
			Providers: []Provider{{Name: "p", Stages: []Stage{{Permits: 100, AvgRTT: Duration(100 * ms)}}}},
		}
	}
	rs := func(at time.Duration, rps float64) RateStage { return RateStage{At: Duration(at), RPS: rps} }
	// 100 permits of 100 ms complete 1,000 a second.

	// 500 a second: at half the rate, 100 permits next to never fill.
	if q := open(time.Second, rs(0, 500)).ForcedWait(); q.MeanWait.D() > ms || q.P99Spread.D()-q.P99.D() > 5*ms {
		t.Errorf("under the rate: %+v, want no wait", q)
	}

	// 2,000 a second for 1 s, then none: the queue grows by about 1,000
	// a second, so the arrival at time s waits about s (a fluid queue's
	// mean is 500 ms; the first arrivals find permits free), and the
	// last ones wait about a second.
	q := open(10*time.Second, rs(0, 2000), rs(time.Second, 0)).ForcedWait()
	if g := q.MeanWait.D(); g < 400*ms || g > 520*ms {
		t.Errorf("spike: mean wait %v, want 400-520ms", g)
	}
	if q.P99Spread.D() < 900*ms {
		t.Errorf("spike: p99 %v, want past 900ms", q.P99Spread.D())
	}

	// The same with a 250 ms timeout: waiters leave at it, and no
	// success ends past it.
	q = open(250*ms, rs(0, 2000), rs(time.Second, 0)).ForcedWait()
	if q.P99Spread.D() > 250*ms || q.MeanWait.D() < 50*ms {
		t.Errorf("spike under a timeout: %+v, want waits, and every success within 250ms", q)
	}

	// The shipped spike: a queue, with an allowance of a few hundred ms.
	sc, err := LoadScenario("scenarios/spike.yaml")
	if err != nil {
		t.Fatal(err)
	}
	q = sc.ForcedWait()
	t.Logf("spike.yaml: mean wait %v, p99 %v against %v with no wait", q.MeanWait.D(), q.P99Spread.D(), q.P99.D())
	if q.MeanWait.D() <= 0 || q.P99Spread.D()-q.P99.D() < 100*ms {
		t.Errorf("spike.yaml: %+v, want a queue", q)
	}
}

func TestScenarioErrorsNameTheField(t *testing.T) {
	base := `load: {connections: 10, warmup: 1s, duration: 5s}
providers:
  - name: a
    stages: [{at: 0s, permits: 5, avg_rtt: 50ms}]
`
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"valid", base, ""},
		{"empty", ``, "empty scenario"},
		{"unknown field", strings.Replace(base, "warmup", "warmpu", 1), "did you mean warmup"},
		{"bad duration", strings.Replace(base, "avg_rtt: 50ms", "avg_rtt: fast", 1), `"fast" is not a duration`},
		{"no connections", strings.Replace(base, "connections: 10", "connections: 0", 1), "load.connections"},
		{"negative warmup", strings.Replace(base, "warmup: 1s", "warmup: -1s", 1), "load.warmup"},
		{"zero duration", strings.Replace(base, "duration: 5s", "duration: 0s", 1), "load.duration"},
		{"no providers", "load: {connections: 10, duration: 5s}\n", "providers: at least one"},
		{"no name", strings.Replace(base, "name: a", "name: ''", 1), "line 3: providers[0].name"},
		{"comments only", "# nothing\n", "empty scenario"},
		{"duplicate name", base + "  - name: a\n    stages: [{at: 0s, permits: 5, avg_rtt: 50ms}]\n", `providers[1].name: "a" appears twice`},
		{"no stages", strings.Replace(base, "stages: [{at: 0s, permits: 5, avg_rtt: 50ms}]", "stages: []", 1), "providers[0].stages: at least one"},
		{"first stage late", strings.Replace(base, "at: 0s", "at: 1s", 1), "providers[0].stages[0].at"},
		{"stages out of order", strings.Replace(base, "}]", "}, {at: 0s, permits: 5, avg_rtt: 50ms}]", 1), "providers[0].stages[1].at"},
		{"negative permits", strings.Replace(base, "permits: 5", "permits: -1", 1), "providers[0].stages[0].permits"},
		{"zero rtt", strings.Replace(base, "avg_rtt: 50ms", "avg_rtt: 0s", 1), "providers[0].stages[0].avg_rtt"},
		{"wrong type", strings.Replace(base, "connections: 10", "connections: many", 1), "many"},
		{"open loop", strings.Replace(base, "connections: 10", "rate: [{at: 0s, rps: 100}, {at: 2s, rps: 300}], timeout: 1s", 1), ""},
		{"rate and connections", strings.Replace(base, "connections: 10", "connections: 10, rate: [{at: 0s, rps: 100}]", 1), "load.rate: give either"},
		{"rate starts late", strings.Replace(base, "connections: 10", "rate: [{at: 1s, rps: 100}]", 1), "load.rate[0].at"},
		{"rates out of order", strings.Replace(base, "connections: 10", "rate: [{at: 0s, rps: 1}, {at: 0s, rps: 2}]", 1), "load.rate[1].at"},
		{"negative rate", strings.Replace(base, "connections: 10", "rate: [{at: 0s, rps: -5}]", 1), "load.rate[0].rps"},
		{"negative timeout", strings.Replace(base, "connections: 10", "connections: 10, timeout: -1s", 1), "load.timeout"},
		{"fleet", "gateways: 3\n" + base, ""},
		{"fleet too big", "gateways: 99\n" + base, "line 1: gateways: 99"},
		{"fault", base + "  - name: b\n    stages: [{at: 0s, permits: 5, avg_rtt: 50ms}, {at: 1s, fault: blackhole}]\n", ""},
		{"unknown fault", strings.Replace(base, "avg_rtt: 50ms}", "avg_rtt: 50ms, fault: 502}", 1), `providers[0].stages[0].fault: "502" is not one of 500, 503, blackhole`},
	} {
		sc, err := ParseScenario([]byte(tc.yaml))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && sc == nil:
			t.Errorf("%s: nil scenario", tc.name)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParseScenario: any input is either refused with an error or is a
// scenario that validates and whose maximum is finite (it can run).
func FuzzParseScenario(f *testing.F) {
	for _, p := range []string{"scenarios/contest.yaml", "scenarios/steady.yaml", "scenarios/degrade.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("load: {connections: 1, duration: 1ms}\nproviders: [{name: x, stages: [{at: 0s, permits: 0, avg_rtt: 1ns}]}]\n"))
	f.Add([]byte("{{{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data)
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed but invalid: %v", err)
		}
		m := sc.TheoreticalMax()
		if math.IsNaN(m) || math.IsInf(m, 0) || m < 0 {
			t.Fatalf("theoretical max %v", m)
		}
		_ = sc.Scaled(0.5).Validate()
	})
}

// TestPermitAccounting: the idle-permit and busy-connection shares count
// only the measured phase, and each only in its kind of stage.
func TestPermitAccounting(t *testing.T) {
	sc := mustScenario(t, `
name: acct
load: {connections: 20, warmup: 1s, duration: 4s}
providers:
  - name: p
    stages:
      - {at: 0s, permits: 10, avg_rtt: 50ms}
      - {at: 3s, permits: 40, avg_rtt: 50ms}
`)
	if !sc.OverloadedAt(2*time.Second) || sc.OverloadedAt(3*time.Second) {
		t.Fatal("20 connections: overloaded against 10 permits, not against 40")
	}
	p := &provider{spec: sc.Providers[0], overloaded: sc.OverloadedAt, warmup: time.Second, end: 5 * time.Second}
	ps := &providers{list: []*provider{p}}
	start := time.Unix(100, 0)
	ps.Reset(start)
	at := func(d time.Duration) int64 { return start.Add(d).UnixNano() }
	// A change is accounted by when the period before it began.
	p.account(at(500*time.Millisecond), 4) // warm-up: not counted
	p.account(at(time.Second), 0)          // warm-up: not counted
	p.account(at(2*time.Second), 4)        // 1 s with 4 of 10 held: 6 idle
	p.account(at(3*time.Second), 0)        // 1 s with 8 of 10 held: 2 idle
	p.account(at(4*time.Second), -8)       // 1 s with 8 of 20 connections busy
	p.account(at(5*time.Second), 0)        // 1 s with none busy
	// The second from 5 s is past the measured phase.
	idle, busy := ps.Shares(start.Add(6*time.Second), 20)
	if got, want := idle, 8.0/20; math.Abs(got-want) > 1e-9 {
		t.Errorf("idle permits %.3f, want %.3f", got, want)
	}
	if got, want := busy, 8.0/(2*20); math.Abs(got-want) > 1e-9 {
		t.Errorf("busy connections %.3f, want %.3f", got, want)
	}
}

// TestDrawsRestartEachSegment: the k-th request a provider admits in a
// segment of the scenario draws the same service time whatever the
// contender did before, so where every permit is busy a segment's
// successes do not depend on how many draws an earlier placement used,
// even at a provider whose own stage did not change.
func TestDrawsRestartEachSegment(t *testing.T) {
	// p has one stage; q's change at 1s starts a segment for both.
	sc := mustScenario(t, `
name: draws
seed: 3
load: {connections: 20, warmup: 1s, duration: 4s}
providers:
  - name: p
    stages:
      - {at: 0s, permits: 10, avg_rtt: 1ms}
  - name: q
    stages:
      - {at: 0s, permits: 10, avg_rtt: 1ms}
      - {at: 1s, permits: 0, avg_rtt: 1ms}
`)
	al, err := newAlarm()
	if err != nil {
		t.Fatal(err)
	}
	defer al.close()
	p := &provider{spec: sc.Providers[0], alarm: al, seed: [2]uint64{3, 1}, segs: sc.segments(), overloaded: sc.OverloadedAt, warmup: time.Second, end: 5 * time.Second}
	ps := &providers{list: []*provider{p}, alarm: al}
	serve := func(n int) {
		for range n {
			p.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}
	}
	run := func(before int) float64 {
		ps.Reset(time.Now()) // segment 0, the warm-up
		serve(before)
		p.start.Store(time.Now().Add(-2 * time.Second).UnixNano()) // segment 1, measured
		serve(6)
		return ps.DrawMean()
	}
	a, b := run(3), run(11)
	if a == 0 || a != b {
		t.Errorf("segment 1's draws at p: mean %v after 3 in segment 0, %v after 11; want the same", a, b)
	}
}

// mustScenario parses a test's scenario, failing the test on an error.
func mustScenario(t *testing.T, yaml string) *Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}
