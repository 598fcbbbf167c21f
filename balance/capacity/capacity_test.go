package capacity

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// newCapacityBalancer builds a capacity balancer on clock whose random draws
// come from a fixed seed: with the simulated clock, a run repeats exactly,
// so a failure can be replayed.
func newCapacityBalancer(t testing.TB, params map[string]float64, clock func() time.Time, targets ...balance.Target) *balance.Balancer {
	t.Helper()
	return newSeededCapacityBalancer(t, params, clock, 1, targets...)
}

func newSeededCapacityBalancer(t testing.TB, params map[string]float64, clock func() time.Time, seed uint64, targets ...balance.Target) *balance.Balancer {
	t.Helper()
	b, err := newRecorded(settingsOf(params), clock, rand.NewPCG(seed, 11))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(targets); err != nil {
		t.Fatal(err)
	}
	return b
}

func limitOf(b *balance.Balancer, addr string) int64 {
	for _, s := range b.Endpoints() {
		if s.Target.Addr == addr {
			return s.Limit
		}
	}
	return -1
}

// simTarget is a provider as in the Tianchi contest: permits, an
// exponential service time with mean rtt, and an immediate rejection when
// no permit is free. With knee > 0 it is instead a queueing server that
// never rejects: its latency grows with its load past knee.
type simTarget struct {
	permits int
	rtt     time.Duration
	knee    int
	busy    int
	// refuseIn is how long a refusal takes to come back (default
	// 100µs); the gateway's retries and a busy machine make it
	// milliseconds.
	refuseIn time.Duration
}

type simEvent struct {
	at, start int64
	p         balance.Pick
	t         *simTarget
	held      bool // held a provider permit
	rejected  bool
}

type simHeap []simEvent

func (h simHeap) Len() int           { return len(h) }
func (h simHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h simHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)        { *h = append(*h, x.(simEvent)) }
func (h *simHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// simulation drives a balancer with a closed loop of conns clients against
// simulated targets, in simulated time: a client whose pick finds every
// permit taken waits for the next completion, as Wait would.
type simulation struct {
	b       *balance.Balancer
	clk     *capClock
	targets map[string]*simTarget
	conns   int
	rng     *rand.Rand
	events  simHeap
	idle    int
}

func newSimulation(b *balance.Balancer, clk *capClock, targets map[string]*simTarget, conns int, seed uint64) *simulation {
	return &simulation{b: b, clk: clk, targets: targets, conns: conns, idle: conns, rng: rand.New(rand.NewPCG(seed, 7))}
}

// run processes n outcomes and returns how many were rejections.
func (s *simulation) run(t testing.TB, n int) (rejected int) {
	t.Helper()
	for done := 0; done < n; done++ {
		for s.idle > 0 {
			p, err := s.b.Pick("")
			if errors.Is(err, balance.ErrAtCapacity) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			now := s.clk.ns.Load()
			tg := s.targets[p.Addr()]
			ev := simEvent{start: now, p: p, t: tg}
			switch {
			case tg.knee > 0:
				tg.busy++
				d := s.rng.ExpFloat64() * float64(tg.rtt) * max(1, float64(tg.busy)/float64(tg.knee))
				ev.at, ev.held = now+int64(d)+1, true
			case tg.busy < tg.permits:
				tg.busy++
				ev.at, ev.held = now+int64(s.rng.ExpFloat64()*float64(tg.rtt))+1, true
			default:
				d := tg.refuseIn
				if d == 0 {
					d = 100 * time.Microsecond
				}
				ev.at, ev.rejected = now+int64(d), true
			}
			heap.Push(&s.events, ev)
			s.idle--
		}
		if s.events.Len() == 0 {
			t.Fatal("simulation stalled: no pick in flight and none possible")
		}
		ev := heap.Pop(&s.events).(simEvent)
		s.clk.ns.Store(ev.at)
		if ev.held {
			ev.t.busy--
		}
		var err error
		if ev.rejected {
			err = fmt.Errorf("upstream said 503: %w", balance.ErrRejected)
			rejected++
		}
		ev.p.Report(time.Duration(ev.at-ev.start), err)
		s.idle++
	}
	return rejected
}

func TestCapacityLearnsPermits(t *testing.T) {
	type stage struct {
		permits     []int
		rtt         []time.Duration
		outcomes    int
		lo, hi      []float64 // bounds of limit/permits at the end of the stage
		maxRejected float64   // share of rejections over the second half (a probe that fails costs one)
	}
	ms := time.Millisecond
	cases := []struct {
		name   string
		conns  int
		stages []stage
	}{
		{"one target, permits drop then rise", 100, []stage{
			{[]int{40}, []time.Duration{50 * ms}, 20000, []float64{0.9}, []float64{1.1}, 0.03},
			{[]int{15}, []time.Duration{50 * ms}, 10000, []float64{0.9}, []float64{1.1}, 0.03},
			{[]int{70}, []time.Duration{50 * ms}, 20000, []float64{0.9}, []float64{1.1}, 0.03},
		}},
		{"contest shape 20:45:65, load above capacity", 160, []stage{
			{[]int{20, 45, 65}, []time.Duration{50 * ms, 50 * ms, 50 * ms}, 40000, []float64{0.9, 0.9, 0.9}, []float64{1.1, 1.1, 1.1}, 0.03},
			{[]int{45, 20, 30}, []time.Duration{40 * ms, 60 * ms, 50 * ms}, 40000, []float64{0.9, 0.9, 0.9}, []float64{1.1, 1.1, 1.1}, 0.03},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &capClock{}
			clk.ns.Store(1)
			var targets []balance.Target
			sims := map[string]*simTarget{}
			for i := range tc.stages[0].permits {
				addr := fmt.Sprintf("p%d", i)
				targets = append(targets, balance.Target{Addr: addr, Weight: 1})
				sims[addr] = &simTarget{}
			}
			b := newCapacityBalancer(t, nil, clk.Now, targets...)
			sim := newSimulation(b, clk, sims, tc.conns, 42)
			for si, st := range tc.stages {
				for i, tg := range targets {
					sims[tg.Addr].permits, sims[tg.Addr].rtt = st.permits[i], st.rtt[i]
				}
				sim.run(t, st.outcomes/2)
				rej := sim.run(t, st.outcomes/2)
				for i, tg := range targets {
					got := float64(limitOf(b, tg.Addr)) / float64(st.permits[i])
					if got < st.lo[i] || got > st.hi[i] {
						t.Errorf("stage %d: %s learned %d for %d permits (ratio %.2f, want %.2f..%.2f)",
							si, tg.Addr, limitOf(b, tg.Addr), st.permits[i], got, st.lo[i], st.hi[i])
					}
				}
				if share := float64(rej) / float64(st.outcomes/2); share > st.maxRejected {
					t.Errorf("stage %d: %.1f%% of outcomes rejected once learned, want at most %.1f%%", si, 100*share, 100*st.maxRejected)
				}
			}
		})
	}
}

func TestCapacityLatencyGradientBoundsQueueingTarget(t *testing.T) {
	// A target that never rejects but queues past 30 in flight: only the
	// latency says it is full. The limit must stay near the knee instead of
	// growing to max_limit.
	clk := &capClock{}
	clk.ns.Store(1)
	for seed := range uint64(5) {
		b := newSeededCapacityBalancer(t, nil, clk.Now, seed, balance.Target{Addr: "q", Weight: 1})
		sims := map[string]*simTarget{"q": {rtt: 20 * time.Millisecond, knee: 30}}
		sim := newSimulation(b, clk, sims, 400, seed)
		sim.run(t, 20000)
		// The limit saws around the level where latency reaches the
		// tolerance (2x, so about 60); judge its mean, not one instant.
		var sum, peak float64
		const samples = 100
		for range samples {
			sim.run(t, 200)
			l := float64(limitOf(b, "q"))
			sum += l
			peak = max(peak, l)
		}
		// Without the gradient it would sit at the 400 clients.
		if mean := sum / samples; mean < 20 || mean > 150 {
			t.Errorf("seed %d: mean limit %.0f (peak %.0f) for a target that queues past 30, want 20..150", seed, mean, peak)
		}
	}
}

// TestCapacityParksADeadTarget: a target that loses every permit must not
// draw a pick per rejection round trip (thousands a second) while it is
// down, and its limit must come back when it recovers.
func TestCapacityParksADeadTarget(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	ms := time.Millisecond
	sims := map[string]*simTarget{"a": {permits: 30, rtt: 50 * ms}, "b": {permits: 60, rtt: 50 * ms}}
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "b", Weight: 1})
	sim := newSimulation(b, clk, sims, 120, 3)
	sim.run(t, 6000)
	sims["b"].permits = 0
	sim.run(t, 1000) // the old load drains: one rejection per pick sent meanwhile
	// Down: only the parked target's probes (four per latency) and a's
	// are refused. A rejection answers in 100us here, so an unparked
	// target at one permit would be refused about as often as a's 600
	// successes a second, about 3000 in this stretch.
	if rej := sim.run(t, 3000); rej > 360 {
		t.Errorf("%d of 3000 outcomes rejected while b is down, want at most 360", rej)
	}
	sims["b"].permits = 60
	sim.run(t, 3000)
	if l := limitOf(b, "b"); l < 54 || l > 66 {
		t.Errorf("b learned %d after recovering to 60 permits, want 54..66", l)
	}
}

// TestCapacityRetryProbes: a retry that finds every other target at its
// learned limit probes one of them a permit over it (a caller that does
// not wait would otherwise answer with the refusal); the probe's
// rejection takes the permit back off. Configured limits are not probed.
func TestCapacityRetryProbes(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 2}, clk.Now,
		balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "b", Weight: 1}, balance.Target{Addr: "c", Weight: 1, MaxConcurrency: 1})
	var held []balance.Pick
	for range 5 {
		held = append(held, mustPickCapacity(t, b))
	}
	if _, err := b.Pick(""); !errors.Is(err, balance.ErrAtCapacity) {
		t.Fatalf("a first pick with every permit taken: %v, want ErrAtCapacity (only retries probe)", err)
	}
	var a *balance.Endpoint
	for _, p := range held {
		if p.Addr() == "a" {
			a = p.Endpoint()
		}
	}
	p, err := b.PickWith(balance.PickInfo{Exclude: []*balance.Endpoint{a}})
	if err != nil {
		t.Fatalf("retry excluding a: %v, want a probe of b", err)
	}
	if p.Addr() != "b" || limitOf(b, "b") != 3 {
		t.Fatalf("retry went to %s, b's limit %d; want b probed at 3", p.Addr(), limitOf(b, "b"))
	}
	// A second retry before the probe's answer does not probe b again: a
	// burst of retries would raise the limit once per retry.
	if q, err := b.PickWith(balance.PickInfo{Exclude: []*balance.Endpoint{a}}); !errors.Is(err, balance.ErrAtCapacity) {
		t.Fatalf("second retry while b's probe is out: %v to %s, want ErrAtCapacity", err, q.Addr())
	}
	if l := limitOf(b, "b"); l != 3 {
		t.Fatalf("b's limit %d after a second retry, want 3 (one probe at a time)", l)
	}
	p.Report(time.Millisecond, balance.ErrRejected)
	if l := limitOf(b, "b"); l != 2 {
		t.Fatalf("b's limit %d after the probe was refused, want 2", l)
	}
	if l := limitOf(b, "c"); l != 1 {
		t.Fatalf("configured c's limit became %d", l)
	}
	for _, p := range held {
		p.Done(nil)
	}
}

// TestCapacityRemeasuresAnIdleTarget: with the load far below capacity
// every pick goes to the fastest target and the others idle; when an idle
// one becomes the fast one, the picker must find out (its latency sample
// is stale) and move the load there. The underload scenario's shape.
func TestCapacityRemeasuresAnIdleTarget(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	ms := time.Millisecond
	sims := map[string]*simTarget{"a": {permits: 60, rtt: 10 * ms}, "b": {permits: 80, rtt: 30 * ms}, "c": {permits: 100, rtt: 80 * ms}}
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "b", Weight: 1}, balance.Target{Addr: "c", Weight: 1})
	sim := newSimulation(b, clk, sims, 40, 5)
	sim.run(t, 40000)
	sims["a"].rtt, sims["c"].rtt = 80*ms, 10*ms
	sim.run(t, 40000)
	t0 := clk.ns.Load()
	const n = 40000
	sim.run(t, n)
	// All 40 clients on c would complete 4,000 a second; left on a, 500
	// (without remeasuring, 541).
	if rate := n / (float64(clk.ns.Load()-t0) / 1e9); rate < 3000 {
		t.Errorf("%.0f completions a second after the targets swapped speeds, want at least 1200 (the load moved off the now slow target)", rate)
	}
}

func TestCapacityDoesNotGrowWithoutDemand(t *testing.T) {
	// 10 clients never saturate the initial limit: nothing to learn, so the
	// limit must not run away (the target has 500 permits; we do not know).
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1})
	sim := newSimulation(b, clk, map[string]*simTarget{"a": {permits: 500, rtt: 10 * time.Millisecond}}, 10, 3)
	sim.run(t, 5000)
	if l := limitOf(b, "a"); l != 20 {
		t.Fatalf("limit %d after an unsaturated run, want the initial 20", l)
	}
}

func TestCapacityConfiguredLimitIsNotLearned(t *testing.T) {
	b := newCapacityBalancer(t, nil, nil, balance.Target{Addr: "a", Weight: 1, MaxConcurrency: 7})
	for range 50 {
		p, err := b.Pick("")
		if err != nil {
			t.Fatal(err)
		}
		p.Report(time.Millisecond, balance.ErrRejected)
	}
	if l := limitOf(b, "a"); l != 7 {
		t.Fatalf("configured limit became %d after rejections", l)
	}
	// Removing the configuration starts learning from the initial limit.
	if err := b.Update([]balance.Target{{Addr: "a", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	if l := limitOf(b, "a"); l != 20 {
		t.Fatalf("limit %d after max_concurrency was removed, want the initial 20", l)
	}
}

// taughtPair is a capacity balancer over two targets with configured
// limits, each taught a latency by 40 outcomes.
func taughtPair(t *testing.T, a string, aMax int, aLat time.Duration, b string, bMax int, bLat time.Duration) *balance.Balancer {
	t.Helper()
	clk := &capClock{}
	clk.ns.Store(1)
	return taughtPairAt(t, clk, a, aMax, aLat, b, bMax, bLat)
}

func taughtPairAt(t *testing.T, clk *capClock, a string, aMax int, aLat time.Duration, b string, bMax int, bLat time.Duration) *balance.Balancer {
	t.Helper()
	bal := newCapacityBalancer(t, nil, clk.Now,
		balance.Target{Addr: a, Weight: 1, MaxConcurrency: aMax},
		balance.Target{Addr: b, Weight: 1, MaxConcurrency: bMax})
	teachLatency(t, bal, a, aLat, 40)
	teachLatency(t, bal, b, bLat, 40)
	return bal
}

// teachLatency reports n successes of lat on addr alone.
func teachLatency(t *testing.T, b *balance.Balancer, addr string, lat time.Duration, n int) {
	t.Helper()
	for range n {
		p, err := b.PickWith(balance.PickInfo{Exclude: excludeAllBut(b, addr)})
		if err != nil {
			t.Fatal(err)
		}
		p.Report(lat, nil)
	}
}

// failEach makes n picks with info, a millisecond apart, each failing
// after a second with err.
func failEach(t *testing.T, b *balance.Balancer, clk *capClock, info balance.PickInfo, n int, err error) {
	t.Helper()
	for range n {
		p, perr := b.PickWith(info)
		if perr != nil {
			t.Fatal(perr)
		}
		clk.ns.Add(int64(time.Millisecond))
		p.Report(time.Second, err)
	}
}

// pickN picks n times, holding every pick, and returns where they went.
func pickN(t *testing.T, b *balance.Balancer, n int) (got []string, held []balance.Pick) {
	t.Helper()
	for range n {
		p, err := b.Pick("")
		if err != nil {
			t.Fatal(err)
		}
		got, held = append(got, p.Addr()), append(held, p)
	}
	return got, held
}

func TestCapacityPrefersTheFasterTarget(t *testing.T) {
	b := taughtPair(t, "fast", 10, 10*time.Millisecond, "slow", 30, 40*time.Millisecond)
	// Latency first: every permit of the fast target is taken before the
	// slow one gets a pick, however many more permits the slow one has
	// free (in a closed loop the fast one serves four requests for each
	// one the slow one serves).
	got, held := pickN(t, b, 11)
	for i, a := range got {
		want := "fast"
		if i == 10 {
			want = "slow"
		}
		if a != want {
			t.Fatalf("pick %d went to %s, want %s (all: %v)", i, a, want, got)
		}
	}
	for _, p := range held {
		p.Done(nil)
	}
}

func TestCapacityTiesGoToFreePermits(t *testing.T) {
	// Within a sixteenth of each other the latencies tie, and the tie
	// goes to the target with more free permits: the large one takes
	// picks until it has no more free than the small one.
	b := taughtPair(t, "small", 10, 50*time.Millisecond, "large", 30, 52*time.Millisecond)
	got, held := pickN(t, b, 20)
	for i, a := range got {
		if a != "large" {
			t.Fatalf("pick %d went to %s, want large (all: %v)", i, a, got)
		}
	}
	for _, p := range held {
		p.Done(nil)
	}
}

func excludeAllBut(b *balance.Balancer, addr string) []*balance.Endpoint {
	var ex []*balance.Endpoint
	for _, e := range snapOf(b).eps {
		if e.Addr() != addr {
			ex = append(ex, e)
		}
	}
	return ex
}

func TestCapacityRejections(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1})
	var held []balance.Pick
	for range 20 {
		held = append(held, mustPickCapacity(t, b))
	}
	// One rejection with 20 in flight: the target has at most 19 permits.
	held[19].Report(time.Millisecond, fmt.Errorf("upstream: %w", balance.ErrRejected))
	if l := limitOf(b, "a"); l != 19 {
		t.Fatalf("limit %d after one rejection at 20 in flight, want 19", l)
	}
	held[0].Report(50*time.Millisecond, nil)
	// The target's capacity drops: rejections in a row cut the limit to
	// under what it held.
	held = append(held[1:19], mustPickCapacity(t, b))
	for i := range 10 {
		clk.ns.Add(int64(time.Millisecond))
		p := held[len(held)-1]
		held = held[:len(held)-1]
		p.Report(time.Millisecond, balance.ErrRejected)
		if i < 9 {
			// Re-take the permit, as a client would retry.
			if p, err := b.Pick(""); err == nil {
				held = append(held, p)
			}
		}
	}
	held[0].Report(50*time.Millisecond, nil)
	if l := limitOf(b, "a"); l > 18 || l < 1 {
		t.Fatalf("limit %d after a run of rejections from 20 in flight, want at most 18", l)
	}
	for _, p := range held[1:] {
		p.Done(nil)
	}
}

func mustPickCapacity(t *testing.T, b *balance.Balancer) balance.Pick {
	t.Helper()
	p, err := b.Pick("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIsRejection(t *testing.T) {
	type rej struct{ error }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{balance.ErrRejected, true},
		{fmt.Errorf("attempt 2: %w", balance.ErrRejected), true},
		// A refusal is a type: no error text makes one.
		{errors.New("HTTP 503 Service Unavailable"), false},
		{errors.New("status 429"), false},
		{errors.New("pool: no permit"), false},
		{errors.New("dial tcp 127.0.0.1:5030: connection refused"), false},
		{context.DeadlineExceeded, false},
		{rejectedErr(true), true},
		{rejectedErr(false), false},
		{rej{errors.New("x")}, false},
	} {
		if got := balance.IsRejection(tc.err); got != tc.want {
			t.Errorf("IsRejection(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type rejectedErr bool

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want balance.Class
	}{
		{nil, balance.Succeeded},
		{balance.ErrRejected, balance.Refused},
		{fmt.Errorf("try 2: %w", balance.ErrRejected), balance.Refused},
		{rejectedErr(true), balance.Refused},
		{rejectedErr(false), balance.Failed},
		{errors.New("status 503"), balance.Failed},
		{balance.ErrClientGone, balance.ClientGone},
		{fmt.Errorf("relay: %w", balance.ErrClientGone), balance.ClientGone},
		{context.DeadlineExceeded, balance.Failed},
	} {
		if got := balance.ClassOf(tc.err); got != tc.want {
			t.Errorf("ClassOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A client that left says nothing of the target: its pick's permit goes
// back, and no request, failure or latency is counted.
func TestClientGoneCountsNothing(t *testing.T) {
	b, err := balance.New("round_robin", balance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update([]balance.Target{{Addr: "a", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	p, err := b.Pick("")
	if err != nil {
		t.Fatal(err)
	}
	p.Report(time.Second, balance.ErrClientGone)
	e := b.Endpoints()[0]
	if e.InFlight != 0 || e.Requests != 0 || e.Failures != 0 || e.AvgLatency != 0 {
		t.Fatalf("after a client left: %+v", e)
	}
}

func (r rejectedErr) Error() string  { return "custom" }
func (r rejectedErr) Rejected() bool { return bool(r) }

func TestCapacityParams(t *testing.T) {
	for _, tc := range []struct {
		params map[string]float64
		want   string // substring of the error; "" = valid
	}{
		{nil, ""},
		{map[string]float64{"initial_limit": 50, "max_limit": 100}, ""},
		{map[string]float64{"initial": 50}, "initial_limit"},
		{map[string]float64{"min_limit": 0}, "min_limit"},
		{map[string]float64{"max_limit": 10}, "initial_limit"},
		{map[string]float64{"tolerance": 1}, "tolerance"},
		{map[string]float64{"probe_interval": 0}, "probe_interval"},
		{map[string]float64{"probe_interval": math.NaN()}, "probe_interval"},
		{map[string]float64{"probe_interval": 0.5}, ""},
	} {
		_, err := balance.New("capacity", balance.Options{Settings: settingsOf(tc.params)})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.params, err)
		case tc.want != "" && (err == nil || !contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one naming %s", tc.params, err, tc.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestCapacityNeverExceedsPermits: goroutines hammer Wait/Done on targets
// with drawn permits; a counter per target records the real concurrency,
// which must never exceed the permits, and every waiter must get through.
func TestCapacityNeverExceedsPermits(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(rt, "targets")
		var targets []balance.Target
		permits := map[string]int64{}
		for i := range n {
			addr := fmt.Sprintf("t%d", i)
			p := rapid.IntRange(1, 6).Draw(rt, "permits")
			targets = append(targets, balance.Target{Addr: addr, Weight: rapid.IntRange(1, 3).Draw(rt, "weight"), MaxConcurrency: p})
			permits[addr] = int64(p)
		}
		workers := rapid.IntRange(2, 24).Draw(rt, "workers")
		b := newCapacityBalancer(t, nil, nil, targets...)
		var mu sync.Mutex
		cur := map[string]*atomic.Int64{}
		peak := map[string]int64{}
		for a := range permits {
			cur[a] = &atomic.Int64{}
		}
		var done atomic.Int64
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 60 {
					p, err := b.Wait(ctx, balance.PickInfo{})
					if err != nil {
						errs <- err
						return
					}
					c := cur[p.Addr()].Add(1)
					mu.Lock()
					peak[p.Addr()] = max(peak[p.Addr()], c)
					mu.Unlock()
					if (w+i)%3 == 0 {
						time.Sleep(time.Duration(i%4) * 10 * time.Microsecond)
					}
					cur[p.Addr()].Add(-1)
					var rerr error
					if (w+i)%17 == 0 {
						rerr = balance.ErrRejected // rejections must not disturb configured permits
					}
					p.Report(time.Duration(1+i%5)*time.Millisecond, rerr)
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			rt.Fatalf("wait failed: %v", err)
		}
		for a, p := range peak {
			if p > permits[a] {
				rt.Fatalf("%s reached %d concurrent picks with %d permits", a, p, permits[a])
			}
		}
		if got := done.Load(); got != int64(workers*60) {
			rt.Fatalf("%d picks completed, want %d", got, workers*60)
		}
	})
}

// TestCapacityLearnedStressCompletes runs the learner under real
// concurrency with a provider that rejects past its permits: the limit
// moves under the goroutines' feet, and still no waiter may be lost.
func TestCapacityLearnedStressCompletes(t *testing.T) {
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 4}, nil,
		balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "b", Weight: 1})
	provider := map[string]*atomic.Int64{"a": {}, "b": {}}
	permits := map[string]int64{"a": 3, "b": 8}
	var wg sync.WaitGroup
	var done, rejected atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers, iters = 32, 150
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				p, err := b.Wait(ctx, balance.PickInfo{})
				if err != nil {
					t.Errorf("wait: %v", err)
					return
				}
				c := provider[p.Addr()].Add(1)
				var rerr error
				if c > permits[p.Addr()] {
					rerr = balance.ErrRejected
					rejected.Add(1)
				} else if (w+i)%2 == 0 {
					time.Sleep(50 * time.Microsecond)
				}
				provider[p.Addr()].Add(-1)
				p.Done(rerr)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := done.Load(); got != workers*iters {
		t.Fatalf("%d picks completed, want %d", got, workers*iters)
	}
	t.Logf("rejected %d of %d; limits a=%d b=%d", rejected.Load(), done.Load(), limitOf(b, "a"), limitOf(b, "b"))
}

func TestCapacityWaitBlocksAndWakes(t *testing.T) {
	b := newCapacityBalancer(t, nil, nil, balance.Target{Addr: "a", Weight: 1, MaxConcurrency: 1})
	held, err := b.Pick("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pick(""); !errors.Is(err, balance.ErrAtCapacity) {
		t.Fatalf("second pick: %v, want ErrAtCapacity", err)
	}
	got := make(chan error, 1)
	go func() {
		p, err := b.Wait(context.Background(), balance.PickInfo{})
		if err == nil {
			p.Done(nil)
		}
		got <- err
	}()
	testenv.Eventually(t, "a caller queued in Wait", func() bool { return queued(b) == 1 })
	select {
	case err := <-got:
		t.Fatalf("Wait returned %v while the only permit was held", err)
	default:
	}
	held.Done(nil)
	if err := <-got; err != nil {
		t.Fatalf("Wait after the permit returned: %v", err)
	}

	// A cancelled wait gives up with both errors.
	held = mustPickCapacity(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := b.Wait(ctx, balance.PickInfo{})
		got <- err
	}()
	testenv.Eventually(t, "a caller queued in Wait", func() bool { return queued(b) == 1 })
	cancel()
	err = <-got
	if !errors.Is(err, balance.ErrAtCapacity) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v, want ErrAtCapacity and context.Canceled", err)
	}
	held.Done(nil)
}

// TestCapacityGrowthWakesWaiters: when the learner raises a limit, the new
// permits go to waiters at once, not only the one permit that came back.
func TestCapacityGrowthWakesWaiters(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 2}, clk.Now, balance.Target{Addr: "a", Weight: 1})
	ms := int64(time.Millisecond)
	x, y := mustPickCapacity(t, b), mustPickCapacity(t, b)
	clk.ns.Add(100 * ms)
	x.Report(10*time.Millisecond, nil) // opens the learner's window
	x = mustPickCapacity(t, b)         // both permits taken again
	got := make(chan balance.Pick, 2)
	for range 2 {
		go func() {
			p, err := b.Wait(context.Background(), balance.PickInfo{})
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
	}
	testenv.Eventually(t, "two callers queued in Wait", func() bool { return queued(b) == 2 })
	clk.ns.Add(100 * ms)
	y.Report(10*time.Millisecond, nil) // closes a saturated window: slow start doubles
	if l := limitOf(b, "a"); l != 4 {
		t.Fatalf("limit %d after a saturated window, want 4", l)
	}
	for i := range 2 {
		select {
		case p := <-got:
			defer p.Done(nil)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d not woken by the raised limit", i+1)
		}
	}
	x.Done(nil)
}

// TestCapacityRevivalWakesWaiters: a parked target that comes back during
// a pick (its park time over, then no refusal of the probe) gets its
// permits back at once; the waiters queued meanwhile are woken for them,
// not left asleep until releases elsewhere wake them one at a time.
func TestCapacityRevivalWakesWaiters(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 8, "min_limit": 1}, clk.Now, balance.Target{Addr: "a", Weight: 1})
	// Eight refusals walk the limit 8 -> 1 and park the target.
	var picks []balance.Pick
	for range 8 {
		p, err := b.PickWith(balance.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		picks = append(picks, p)
	}
	for _, p := range picks {
		p.Report(100*time.Microsecond, balance.ErrRejected)
	}
	if _, err := b.PickWith(balance.PickInfo{}); !errors.Is(err, balance.ErrAtCapacity) {
		t.Fatalf("pick on a target that refused everything = %v, want it parked (ErrAtCapacity)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 3
	got := queueWaiters(t, ctx, b, waiters, balance.PickInfo{})
	// The park time passes: the next pick is the probe. Then no refusal
	// comes back for it: the pick after that revives the target.
	var held []balance.Pick
	for range 2 {
		clk.ns.Add(int64(5 * time.Millisecond))
		if p, err := b.PickWith(balance.PickInfo{}); err == nil {
			held = append(held, p)
		}
	}
	if l := limitOf(b, "a"); l < 4 {
		t.Fatalf("limit after revival = %d, want the level before the outage (8)", l)
	}
	for _, p := range append(held, awaitWaiters(t, got, waiters, "")...) {
		p.Done(nil)
	}
}

// queueWaiters starts n callers of b.Wait with info and returns once all
// are queued; their picks come on the channel.
func queueWaiters(t *testing.T, ctx context.Context, b *balance.Balancer, n int, info balance.PickInfo) <-chan balance.Pick {
	t.Helper()
	got := make(chan balance.Pick, n)
	for i := range n {
		go func() {
			if p, err := b.Wait(ctx, info); err == nil {
				got <- p
			}
		}()
		testenv.Eventually(t, "the waiter to queue", func() bool { return queued(b) == i+1 })
	}
	return got
}

// awaitWaiters collects n waiters' picks, each on target want unless
// want is empty, and fails if they do not all come.
func awaitWaiters(t *testing.T, got <-chan balance.Pick, n int, want string) []balance.Pick {
	t.Helper()
	var picks []balance.Pick
	for range n {
		select {
		case p := <-got:
			if want != "" && p.Addr() != want {
				t.Errorf("a waiter got %s, want %s", p.Addr(), want)
			}
			picks = append(picks, p)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d waiters slept through the permits that came back", n-len(picks), n)
		}
	}
	return picks
}

// TestCapacityRevivalReopensForRefusedRetries: requests that a down
// target refused wait in the queue with it excluded. When it comes back,
// they take its permits (Endpoint.Reopen), instead of waiting for the
// other targets while it refills one new request at a time (on flap, 50
// waiters took 50 ms to reach a provider back with 60 permits). And a
// retry never takes a parked target's probe: refused there, it has no
// attempt left.
func TestCapacityRevivalReopensForRefusedRetries(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 8, "min_limit": 1}, clk.Now,
		balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "s", Weight: 1, MaxConcurrency: 1})
	var refused, held []balance.Pick
	var aEp, sEp *balance.Endpoint
	for range 9 { // a's 8 learned permits and s's one
		p, err := b.PickWith(balance.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Addr() == "a" {
			aEp = p.Endpoint()
			refused = append(refused, p)
		} else {
			sEp = p.Endpoint()
			held = append(held, p)
		}
	}
	if aEp == nil || sEp == nil {
		t.Fatal("nine picks did not take both targets' permits")
	}
	for _, p := range refused {
		p.Report(100*time.Microsecond, balance.ErrRejected)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiters = 3
	got := queueWaiters(t, ctx, b, waiters, balance.PickInfo{Exclude: []*balance.Endpoint{aEp}})
	clk.ns.Add(int64(5 * time.Millisecond)) // past the park
	if p, err := b.PickWith(balance.PickInfo{Exclude: []*balance.Endpoint{sEp}}); err == nil {
		t.Fatalf("a retry took %s's permit after the park; want the probe left to a first attempt", p.Addr())
	}
	probe, err := b.PickWith(balance.PickInfo{})
	if err != nil || probe.Addr() != "a" {
		t.Fatalf("first attempt after the park: %v on %q, want the probe of a", err, probe.Addr())
	}
	held = append(held, probe)
	clk.ns.Add(int64(5 * time.Millisecond)) // no refusal of the probe: a is back
	if p, err := b.PickWith(balance.PickInfo{}); err == nil {
		held = append(held, p)
	}
	for _, p := range append(held, awaitWaiters(t, got, waiters, "a")...) {
		p.Done(nil)
	}
}

// TestCapacityParkIsShortWhileCallersWait: a target parked while
// callers wait in the queue is probed again after a sixteenth of its
// latency (each waiter waits out the park with it); with nobody waiting,
// after a quarter.
func TestCapacityParkIsShortWhileCallersWait(t *testing.T) {
	for _, tc := range []struct {
		waiting bool
		probeAt time.Duration // the first clock step at which a probe is allowed
	}{{false, 13 * time.Millisecond}, {true, 4 * time.Millisecond}} {
		clk := &capClock{}
		clk.ns.Store(1)
		b := newCapacityBalancer(t, map[string]float64{"initial_limit": 1, "min_limit": 1}, clk.Now, balance.Target{Addr: "a", Weight: 1})
		p := mustPickCapacity(t, b)
		p.Report(50*time.Millisecond, nil) // a's latency: 50 ms
		p = mustPickCapacity(t, b)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		if tc.waiting {
			go func() {
				defer close(done)
				if q, err := b.Wait(ctx, balance.PickInfo{}); err == nil {
					q.Done(nil)
				}
			}()
			testenv.Eventually(t, "the caller to queue", func() bool { return queued(b) == 1 })
		} else {
			close(done)
		}
		p.Report(100*time.Microsecond, balance.ErrRejected) // refused at min_limit: parked
		clk.ns.Add(int64(tc.probeAt - time.Millisecond))
		if q, err := b.PickWith(balance.PickInfo{}); err == nil {
			t.Errorf("waiting=%v: a probe %v after parking, want none before %v", tc.waiting, tc.probeAt-time.Millisecond, tc.probeAt)
			q.Done(nil)
		}
		clk.ns.Add(int64(time.Millisecond))
		q, err := b.PickWith(balance.PickInfo{})
		if err != nil {
			t.Errorf("waiting=%v: no probe %v after parking: %v", tc.waiting, tc.probeAt, err)
		} else {
			q.Done(nil)
		}
		cancel()
		<-done
	}
}

// TestCapacityRefusalThatParksWakesNobody: a refusal whose permit the
// learner keeps (the target is parked) frees nothing, so it wakes no
// waiter: a woken retry that finds no permit it may use passes the
// wake-up on and queues again at the end, and each refused probe of a
// down target sent the oldest waiter to the back.
func TestCapacityRefusalThatParksWakesNobody(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	// max_limit 1: the queued retry does not probe a over its limit.
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 1, "min_limit": 1, "max_limit": 1}, clk.Now,
		balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "s", Weight: 1, MaxConcurrency: 1})
	var aPick, sPick balance.Pick
	for range 2 {
		p, err := b.PickWith(balance.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Addr() == "a" {
			aPick = p
		} else {
			sPick = p
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, info := range []balance.PickInfo{{Exclude: []*balance.Endpoint{sPick.Endpoint()}}, {}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p, err := b.Wait(ctx, info); err == nil {
				p.Done(nil)
			}
		}()
		testenv.Eventually(t, "the waiter to queue", func() bool { return queued(b) == i+1 })
	}
	_, first := b.Queued()
	aPick.Report(100*time.Microsecond, balance.ErrRejected) // at min_limit: parked
	n, head := b.Queued()
	if n != 2 || head != first {
		t.Errorf("after a refusal that parked a: %d waiting, oldest seq %d; want both, the oldest (%d) still first", n, head, first)
	}
	cancel()
	wg.Wait()
	sPick.Done(nil)
}

// TestCapacityNoRetryProbeAfterADownTargetsRefusal: a retry of a request
// that a parked (down) target refused waits for a permit rather than
// probing another target over its learned limit: the refusal said
// nothing of the others' permits, and with a down target probed many
// times a second those probes were most of the client errors.
func TestCapacityNoRetryProbeAfterADownTargetsRefusal(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 1, "min_limit": 1}, clk.Now,
		balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "b", Weight: 1})
	var aPick, bPick balance.Pick
	for range 2 {
		p := mustPickCapacity(t, b)
		if p.Addr() == "a" {
			aPick = p
		} else {
			bPick = p
		}
	}
	aEp := aPick.Endpoint()
	aPick.Report(100*time.Microsecond, balance.ErrRejected) // at min_limit: parked
	if p, err := b.PickWith(balance.PickInfo{Exclude: []*balance.Endpoint{aEp}}); err == nil {
		t.Errorf("the retry of a's refusal went to %s (b's limit now %d); want it to wait", p.Addr(), limitOf(b, "b"))
		p.Done(nil)
	}
	bPick.Done(nil)
}

// TestCapacityPartialDropIsNotOverCorrectedForLong: a target whose permits
// fall from 100 to 60 under load refuses every pick while the old load
// drains, which halves the limit below the new permits. The undershoot is
// probed back at the quick pace: within three mean latencies of the drop
// the limit is back near 60 (one, in this run). Refusals take 2 ms to
// come back here, so some picks are still in transit when the limit
// halves; each of their refusals used to reset the slow pace, which
// held the limit at 45 for over four latencies.
func TestCapacityPartialDropIsNotOverCorrectedForLong(t *testing.T) {
	const rtt = 50 * time.Millisecond
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1})
	tg := &simTarget{permits: 100, rtt: rtt, refuseIn: 2 * time.Millisecond}
	sim := newSimulation(b, clk, map[string]*simTarget{"a": tg}, 130, 7)
	sim.run(t, 40000)
	if l := limitOf(b, "a"); l < 90 || l > 110 {
		t.Fatalf("learned %d for 100 permits before the drop", l)
	}
	tg.permits = 60
	drop := clk.ns.Load()
	lowest, backAt := int64(1<<62), int64(0)
	for clk.ns.Load()-drop < int64(20*rtt) {
		sim.run(t, 1)
		l := limitOf(b, "a")
		lowest = min(lowest, l)
		switch {
		case l < 54:
			backAt = 0
		case backAt == 0:
			backAt = clk.ns.Load()
		}
	}
	if l := limitOf(b, "a"); l < 54 || l > 66 {
		t.Fatalf("learned %d for 60 permits 20 latencies after the drop", l)
	}
	if backAt == 0 || backAt-drop > int64(3*rtt) {
		t.Fatalf("limit back at 54 or more (and staying) %v after the drop (lowest %d), want within %v",
			time.Duration(backAt-drop), lowest, 3*rtt)
	}
}

// TestCapacityProbesSoonerWhileCallersWait: a full target that refuses
// past its limit is probed one permit up after probe_interval latencies
// when nobody waits, and after queued_probe_interval latencies while
// callers queue (a permit found then serves one at once).
func TestCapacityProbesSoonerWhileCallersWait(t *testing.T) {
	const lat = 50 * time.Millisecond
	for _, tc := range []struct {
		waiting int
		after   time.Duration // first success at the limit after which the probe comes
	}{
		{0, 4 * lat},
		{3, lat},
	} {
		b, clk, e, obs := refusedAt20(t)
		if l := limitOf(b, "a"); l != 19 {
			t.Fatalf("limit %d after a refusal at 20 in flight, want 19", l)
		}
		success := func() {
			obs.Observe(e, balance.Outcome{Latency: lat, InFlight: 19, Now: b.Now(), Waiting: tc.waiting})
		}
		success() // full at the limit: the probe clock starts
		clk.ns.Add(int64(tc.after - 5*time.Millisecond))
		success()
		if l := limitOf(b, "a"); l != 19 {
			t.Fatalf("%d waiting: limit %d %v after the first full success, want 19 until %v", tc.waiting, l, tc.after-5*time.Millisecond, tc.after)
		}
		clk.ns.Add(int64(10 * time.Millisecond))
		success()
		if l := limitOf(b, "a"); l != 20 {
			t.Fatalf("%d waiting: limit %d %v after the first full success, want the probe (20)", tc.waiting, l, tc.after+5*time.Millisecond)
		}
	}
}

// TestCapacityRevivalIsTimedByRefusals: a parked target's probe that goes
// unrefused for four refusal round trips (measured: 1 ms here) means the
// target is back, well before the eighth of an 80 ms latency that bounds
// it.
func TestCapacityRevivalIsTimedByRefusals(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(int64(time.Second))
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 4, "min_limit": 1}, clk.Now, balance.Target{Addr: "a", Weight: 1})
	s := snapOf(b)
	e, obs := s.eps[0], s.observer
	for range 4 {
		obs.Observe(e, balance.Outcome{Latency: 80 * time.Millisecond, InFlight: 1, Now: b.Now()})
	}
	for range 4 { // 4 -> 3 -> 2 -> 1, then parked
		obs.Observe(e, balance.Outcome{Class: balance.Refused, Err: balance.ErrRejected, Latency: time.Millisecond, InFlight: 4, Now: b.Now()})
	}
	if _, err := b.PickWith(balance.PickInfo{}); !errors.Is(err, balance.ErrAtCapacity) {
		t.Fatalf("pick on a parked target = %v, want ErrAtCapacity", err)
	}
	clk.ns.Add(int64(21 * time.Millisecond)) // past the park (a quarter latency)
	probe, err := b.PickWith(balance.PickInfo{})
	if err != nil {
		t.Fatalf("no probe after the park: %v", err)
	}
	defer probe.Cancel()
	clk.ns.Add(int64(3 * time.Millisecond))
	if _, err := b.PickWith(balance.PickInfo{}); !errors.Is(err, balance.ErrAtCapacity) {
		t.Fatalf("pick 3 ms into the probe = %v, want ErrAtCapacity (not back yet)", err)
	}
	clk.ns.Add(int64(2 * time.Millisecond))
	p, err := b.PickWith(balance.PickInfo{})
	if err != nil {
		t.Fatalf("pick 5 ms into an unrefused probe: %v, want the target back", err)
	}
	p.Cancel()
	if l := limitOf(b, "a"); l < 4 {
		t.Fatalf("limit %d after the revival, want the level before the outage (4)", l)
	}
}

// TestCapacityBurstOvershootIsNotHalved: a burst of picks past the
// permits, all sent before the first refusal came back (retries from
// other targets landing on an idle one), draws one refusal per pick over
// and lands on the permits; only refusals of picks sent after the first
// one came back make the run that halves a limit.
func TestCapacityBurstOvershootIsNotHalved(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(int64(time.Second))
	b := newCapacityBalancer(t, map[string]float64{"initial_limit": 30}, clk.Now, balance.Target{Addr: "a", Weight: 1})
	var held []balance.Pick
	for range 30 {
		held = append(held, mustPickCapacity(t, b))
	}
	// The target has 25 permits: the last 5 of the burst are refused,
	// each answer back within a few milliseconds, long before a success.
	for i, p := range held[25:] {
		clk.ns.Add(int64(time.Millisecond))
		p.Report(time.Duration(i+1)*time.Millisecond, balance.ErrRejected)
	}
	if l := limitOf(b, "a"); l != 25 {
		t.Fatalf("limit %d after 5 refusals of a burst of 30 at 25 permits, want 25", l)
	}
	// The permits fall to 10 while the 25 drain: every pick sent now is
	// refused, and the run of those cuts the limit by half, not by one
	// per refusal.
	for i := range 8 {
		clk.ns.Add(int64(time.Millisecond))
		held[i].Report(50*time.Millisecond, nil) // sent at the burst: no later pick got a permit
		p, err := b.Pick("")
		if err != nil {
			continue // the limit is below what still drains
		}
		clk.ns.Add(int64(time.Millisecond))
		p.Report(time.Millisecond, balance.ErrRejected)
	}
	if l := limitOf(b, "a"); l > 16 {
		t.Fatalf("limit %d after refusals of picks sent during a drain from 25, want it halved (16 or less)", l)
	}
	for _, p := range held[8:25] {
		p.Done(nil)
	}
}

// TestCapacityProbeStepsFollowUnrefused: once a probe found a permit, the
// next, doubled step comes as soon as that one went unrefused for four
// refusal round trips (1 ms each here), not a quarter latency later, so
// a provider whose permits rose is found in a few round trips.
func TestCapacityProbeStepsFollowUnrefused(t *testing.T) {
	const lat = 80 * time.Millisecond
	b, clk, e, obs := refusedAt20(t)
	full := func() {
		l := limitOf(b, "a")
		obs.Observe(e, balance.Outcome{Latency: lat, InFlight: l, Now: b.Now(), Waiting: 5})
	}
	full()
	clk.ns.Add(int64(lat + time.Millisecond))
	full() // the first probe: 19 -> 20
	if l := limitOf(b, "a"); l != 20 {
		t.Fatalf("limit %d after the first probe, want 20", l)
	}
	clk.ns.Add(int64(5 * time.Millisecond)) // four refusal round trips, well under lat/4
	// The answer to a pick sent since the raise: the probe found a permit.
	obs.Observe(e, balance.Outcome{Latency: 4 * time.Millisecond, InFlight: limitOf(b, "a"), Now: b.Now(), Waiting: 5})
	if l := limitOf(b, "a"); l != 22 {
		t.Fatalf("limit %d 5 ms after an unrefused, answered probe, want the next step (22)", l)
	}
}

// A target that goes silent (a black hole: it takes requests and neither
// answers nor refuses them) must not be probed deeper on the answers to
// picks sent before it did: not being refused is no sign of a permit.
// Only one step is taken until a pick sent after it has been answered.
func TestCapacityProbeStepsWaitForAnAnswer(t *testing.T) {
	const lat = 80 * time.Millisecond
	b, clk, e, obs := refusedAt20(t)
	full := func() {
		l := limitOf(b, "a")
		obs.Observe(e, balance.Outcome{Latency: lat, InFlight: l, Now: b.Now(), Waiting: 5})
	}
	full()
	clk.ns.Add(int64(lat + time.Millisecond))
	full() // the first probe: 19 -> 20, then the target goes silent
	if l := limitOf(b, "a"); l != 20 {
		t.Fatalf("limit %d after the first probe, want 20", l)
	}
	// The answers to picks sent before the raise keep coming for a
	// latency; none of them is refused, none was sent since the raise.
	for range 39 {
		clk.ns.Add(int64(2 * time.Millisecond))
		full()
	}
	if l := limitOf(b, "a"); l != 20 {
		t.Fatalf("limit %d after 78 ms of answers to picks older than the raise, want 20 (no further step)", l)
	}
	// One answer to a pick sent after the raise: the permit was real.
	clk.ns.Add(int64(2 * time.Millisecond))
	obs.Observe(e, balance.Outcome{Latency: time.Millisecond, InFlight: limitOf(b, "a"), Now: b.Now(), Waiting: 5})
	if l := limitOf(b, "a"); l != 22 {
		t.Fatalf("limit %d after an answered probe, want the next step (22)", l)
	}
}

// refusedAt20 is a learned target "a" on a settable clock that has just
// refused a pick with 20 in flight (its limit is 19), with the endpoint
// and the learner to feed outcomes to directly.
func refusedAt20(t *testing.T) (*balance.Balancer, *capClock, *balance.Endpoint, balance.Observer) {
	t.Helper()
	clk := &capClock{}
	clk.ns.Store(int64(time.Second))
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1})
	s := snapOf(b)
	e, obs := s.eps[0], s.observer
	obs.Observe(e, balance.Outcome{Class: balance.Refused, Err: balance.ErrRejected, Latency: time.Millisecond, InFlight: 20, Now: b.Now()})
	return b, clk, e, obs
}

// When two targets swap roles (a fast small one and a slow large one), the
// success-latency mean of the one that turned slow keeps saying fast for
// hundreds of milliseconds (its first outcomes are the requests that drew
// short times) and that of the one that turned fast says slow (it drains
// the long requests it had started). Little's law sees both within a
// window of outcomes, so the permits of the one that turned fast are
// filled soon after it has drained, as bench/contest's swap scenario
// needs.
func TestCapacitySwappedRolesAreRankedSoon(t *testing.T) {
	ms := time.Millisecond
	b, clk, sims, sim := swapShape(t, "a", "b", 42)
	until := func(d time.Duration) {
		for end := clk.ns.Load() + int64(d); clk.ns.Load() < end; {
			sim.run(t, 1)
		}
	}
	inFlight := func(addr string) int64 {
		for _, s := range b.Endpoints() {
			if s.Target.Addr == addr {
				return s.InFlight
			}
		}
		return -1
	}
	// Pick's random start makes each swap's course differ: the mean over
	// many swaps is what a scenario scores.
	const swaps = 60
	var sum int64
	for round := range swaps {
		until(2 * time.Second)
		fast, slow := "a", "b"
		if round%2 == 0 {
			fast, slow = "b", "a"
		}
		sims[fast].permits, sims[fast].rtt = 30, 20*ms
		sims[slow].permits, sims[slow].rtt = 90, 100*ms
		if err := b.Update([]balance.Target{{Addr: fast, Weight: 1, MaxConcurrency: 30}, {Addr: slow, Weight: 1, MaxConcurrency: 90}}); err != nil {
			t.Fatal(err)
		}
		until(100 * ms)
		for range 4 { // 150, 200, 250 and 300 ms after the swap
			until(50 * ms)
			sum += inFlight(fast)
		}
	}
	// It drains its 70 long requests to below 30 in about 150 ms. Ranked
	// by the mean alone it held 14 on average over these samples (most
	// often the 10 picks the slow one had no room for, until 300-350 ms
	// after the swap); with Little's law, 20-23; with a measuring pick
	// once it has room, 29.
	mean := float64(sum) / (4 * swaps)
	t.Logf("the target that turned fast held %.1f of its 30 permits on average 150-300 ms after a swap", mean)
	if mean < 27 {
		t.Errorf("the target that turned fast held %.1f of its 30 permits on average 150-300 ms after a swap; want 27 or more", mean)
	}
}

// TestCapacityMeasuresABusyTargetPassedOver: a target that still drains
// picks sent before, has room, and has been passed over for a quarter of
// its mean gets one pick ranked first. A short answer ranks it by that
// answer, and the old picks that come back after it (the long ones) no
// longer pull its mean back.
func TestCapacityMeasuresABusyTargetPassedOver(t *testing.T) {
	ms := time.Millisecond
	clk := &capClock{}
	clk.ns.Store(1)
	b := taughtPairAt(t, clk, "drained", 100, 100*ms, "other", 100, 40*ms)
	teachLatency(t, b, "drained", 100*ms, measureFrom) // a mean past its first, short samples
	latOf := func(addr string) time.Duration { return time.Duration(stateOf(t, b, addr).lat.Load()) }
	var old []balance.Pick
	for range 20 {
		p, err := b.PickWith(balance.PickInfo{Exclude: excludeAllBut(b, "drained")})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, p)
	}
	clk.ns.Add(int64(10 * ms))
	old[0].Report(100*ms, nil) // a permit back: from now on, a pick elsewhere passes it over
	old = old[1:]
	clk.ns.Add(int64(10 * ms))
	if got, held := pickN(t, b, 1); got[0] != "other" {
		t.Fatalf("10 ms after drained had a permit back, a pick went to %s; want other (40 ms against 100 ms)", got[0])
	} else {
		held[0].Report(0, nil)
	}
	clk.ns.Add(int64(20 * ms)) // passed over for 30 ms: past a quarter of 100 ms
	got, held := pickN(t, b, 2)
	if got[0] != "drained" || got[1] != "other" {
		t.Fatalf("picks after drained was passed over for 30 ms went to %v; want [drained other]: one measuring pick", got)
	}
	held[1].Report(0, nil)
	clk.ns.Add(int64(5 * ms))
	held[0].Report(5*ms, nil)
	if got := latOf("drained"); got != 25*ms {
		t.Fatalf("after a 5 ms measurement, drained's mean is %v; want 25ms (a quarter of 100 ms)", got)
	}
	for _, p := range old {
		p.Report(200*ms, nil) // sent before the measurement
	}
	if got := latOf("drained"); got != 25*ms {
		t.Errorf("after the picks sent before the measurement came back at 200 ms, drained's mean is %v; want 25ms still", got)
	}
	got, held = pickN(t, b, measureTrial+1)
	for i, a := range got {
		want := "drained"
		if i == measureTrial {
			want = "other" // past its trial picks, its old mean ranks it
		}
		if a != want {
			t.Errorf("pick %d after the measurement went to %s, want %s (all: %v)", i, a, want, got)
			break
		}
	}
	for _, p := range held {
		p.Done(nil)
	}
}

// Refusals and other fast failures are not service: a target that answers
// them at once must not rank as fast, whether by its mean or by Little's
// law over its outcomes.
func TestCapacityFastFailuresDoNotRankATargetFast(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := taughtPairAt(t, clk, "failing", 40, 50*time.Millisecond, "fast", 40, 40*time.Millisecond)
	// Keep the failing target busy while it answers 200 picks with fast
	// errors, half of them refusals.
	var held []balance.Pick
	only := balance.PickInfo{Exclude: excludeAllBut(b, "failing")}
	for range 8 {
		p, err := b.PickWith(only)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	for i := range 200 {
		p, err := b.PickWith(only)
		if err != nil {
			t.Fatal(err)
		}
		clk.ns.Add(int64(100 * time.Microsecond))
		err = errors.New("status 500")
		if i%2 == 0 {
			err = balance.ErrRejected
		}
		p.Report(100*time.Microsecond, err)
	}
	p := mustPickCapacity(t, b)
	if p.Addr() != "fast" {
		t.Errorf("a pick went to %s after it answered 200 picks with fast errors; want fast (40 ms against its 50 ms)", p.Addr())
	}
	p.Done(nil)
	for _, p := range held {
		p.Done(nil)
	}
}

// In a steady state the mean and Little's law agree: the windows must
// leave the ranking to the mean nearly all the time, or their noise
// would reorder targets that the mean tells apart. Measured: a verdict
// in force in 3.5-5 % of the samples; with a margin of 1.1 instead of
// 1.5, in 65 %.
func TestCapacityLittleLeavesASteadyStateToTheMean(t *testing.T) {
	b, clk, _, sim := swapShape(t, "fast", "slow", 7)
	sim.run(t, 20000)
	samples, ranked := 0, 0
	for range 40000 {
		sim.run(t, 1)
		for _, e := range snapOf(b).eps {
			c := capacityOf(e)
			samples++
			if c.littleLat.Load() > 0 && clk.ns.Load() < c.littleTil.Load() {
				ranked++
			}
		}
	}
	t.Logf("Little's law ranked a target in %d of %d samples", ranked, samples)
	if share := float64(ranked) / float64(samples); share > 0.10 {
		t.Errorf("Little's law ranked a steady target in %.1f %% of the samples; want at most 10 %%", 100*share)
	}
}

// A seeded simulation repeats exactly: the balancer draws from the seed it
// was given (Options.Rand), the clients from theirs, time is simulated. So
// a run that fails can be replayed. Two equal targets, so that the
// strategy's random tie-breaks steer the run; limits and rejections are
// compared chunk by chunk over two runs.
func TestCapacitySeededSimulationRepeats(t *testing.T) {
	trace := func() []int64 {
		clk := &capClock{}
		clk.ns.Store(1)
		b := newSeededCapacityBalancer(t, nil, clk.Now, 9, balance.Target{Addr: "a", Weight: 1}, balance.Target{Addr: "b", Weight: 1})
		sims := map[string]*simTarget{"a": {permits: 40, rtt: 20 * time.Millisecond}, "b": {permits: 40, rtt: 20 * time.Millisecond}}
		sim := newSimulation(b, clk, sims, 100, 9)
		var out []int64
		for range 40 {
			out = append(out, int64(sim.run(t, 250)), limitOf(b, "a"), limitOf(b, "b"))
		}
		return out
	}
	first, second := trace(), trace()
	if !slices.Equal(first, second) {
		t.Fatalf("two runs of one seed differ:\n%v\n%v", first, second)
	}
}

// swapShape is bench/contest's swap scenario in the simulation, before a
// swap: fast has 30 permits at 20 ms, slow 90 at 100 ms, both configured
// as the oracle has them, and 100 clients.
func swapShape(t *testing.T, fast, slow string, seed uint64) (*balance.Balancer, *capClock, map[string]*simTarget, *simulation) {
	t.Helper()
	clk := &capClock{}
	clk.ns.Store(1)
	b := newSeededCapacityBalancer(t, nil, clk.Now, seed,
		balance.Target{Addr: fast, Weight: 1, MaxConcurrency: 30},
		balance.Target{Addr: slow, Weight: 1, MaxConcurrency: 90})
	sims := map[string]*simTarget{fast: {permits: 30, rtt: 20 * time.Millisecond}, slow: {permits: 90, rtt: 100 * time.Millisecond}}
	return b, clk, sims, newSimulation(b, clk, sims, 100, seed)
}

// The sample that ends a stale stretch is one exponential draw: it moves
// an idle target's mean, but only within a quarter and twice the old
// one. Taken whole, a short draw from a slow target ranked it first (the
// load herded there until its windows said otherwise), and a long one
// put off the next re-measurement of a target that had turned fast.
func TestCapacityRemeasuredSampleMovesTheMeanWithinBounds(t *testing.T) {
	ms := time.Millisecond
	clk := &capClock{}
	clk.ns.Store(1)
	b := taughtPairAt(t, clk, "slow", 100, 80*ms, "quick", 100, 15*ms)
	latOf := func(addr string) time.Duration { return time.Duration(stateOf(t, b, addr).lat.Load()) }
	remeasure(t, clk, b, "quick", 15*ms, "slow", 5*ms)
	if got := latOf("slow"); got != 20*ms {
		t.Errorf("after a 5 ms draw ends its stale stretch, a target measured at 80 ms has a mean of %v; want 20ms (a quarter)", got)
	}
	p := mustPickCapacity(t, b)
	if p.Addr() != "quick" {
		t.Errorf("a pick went to %s after one short draw from it; want quick (15 ms)", p.Addr())
	}
	p.Done(nil)
	remeasure(t, clk, b, "quick", 15*ms, "slow", 400*ms)
	if got := latOf("slow"); got != 40*ms {
		t.Errorf("after a 400 ms draw ends its stale stretch, a target with a mean of 20 ms has %v; want 40ms (twice)", got)
	}
}

// TestCapacityRampDoesNotSetALowBaseline: the latency gradient judges a
// target that never refuses against a baseline taken while the load
// ramps up. The latencies that come back first are the short ones, and a
// baseline of their mean was as low as half the target's latency: every
// later window of a target that never queued then read as near the
// tolerance (2x) and about one in four cut the limit below the callers'
// demand (bench/contest's swap, before the first swap: 55 ms for a
// 100 ms provider, its limit cut from 96 to 63-78 for 70 callers).
// Simulated here: the swap shape's slow provider, 64 ramps.
func TestCapacityRampDoesNotSetALowBaseline(t *testing.T) {
	var got []float64
	for seed := range uint64(64) {
		clk := &capClock{}
		clk.ns.Store(1)
		b := newSeededCapacityBalancer(t, nil, clk.Now, seed, balance.Target{Addr: "fast", Weight: 1}, balance.Target{Addr: "slow", Weight: 1})
		sims := map[string]*simTarget{"fast": {permits: 30, rtt: 20 * time.Millisecond}, "slow": {permits: 90, rtt: 100 * time.Millisecond}}
		sim := newSimulation(b, clk, sims, 100, seed)
		var base float64
		for n := 0; base == 0; n++ {
			if n == 20000 {
				t.Fatalf("seed %d: no baseline after %d outcomes", seed, n)
			}
			sim.run(t, 1)
			c := stateOf(t, b, "slow")
			c.mu.Lock()
			base = c.baseline
			c.mu.Unlock()
		}
		got = append(got, base/float64(time.Millisecond))
	}
	slices.Sort(got)
	// The picker's random start varies the ramps from run to run. Over
	// 40 runs the median was 72-80 ms with the mean of latencies, and
	// 94-104 ms by Little's law; the lowest single ramp was 42-62 ms
	// against 54-73, so only the median separates them.
	if med := got[len(got)/2]; med < 87 {
		t.Errorf("first baselines for a 100 ms target: median %.0f ms, want 87 or more (sorted: %.0f)", med, got)
	}
}

// stateOf is the learner's state for addr.
func stateOf(t *testing.T, b *balance.Balancer, addr string) *capState {
	t.Helper()
	for _, e := range snapOf(b).eps {
		if e.Addr() == addr {
			return capacityOf(e)
		}
	}
	t.Fatalf("no target %s", addr)
	return nil
}

// remeasure lets both targets' samples go stale (2 s is past 16 of
// either mean), refreshes other's at otherLat, and ends addr's stale
// stretch with one sample: the re-measurement Pick sends to an idle
// target.
func remeasure(t *testing.T, clk *capClock, b *balance.Balancer, other string, otherLat time.Duration, addr string, sample time.Duration) {
	t.Helper()
	clk.ns.Add(int64(2 * time.Second))
	teachLatency(t, b, other, otherLat, 4)
	teachLatency(t, b, addr, sample, 1)
}

// TestCapacityOneShortDrawEarnsAFewPicks: one short draw from an idle
// slow target that is being re-measured ranks it first. It gets a few
// picks, and more only as its own successes come back, so a draw that
// lied costs a few slow requests and a target that really got faster
// takes the load within a few round trips.
func TestCapacityOneShortDrawEarnsAFewPicks(t *testing.T) {
	ms := time.Millisecond
	clk := &capClock{}
	clk.ns.Store(1)
	b := taughtPairAt(t, clk, "slow", 100, 30*ms, "quick", 100, 10*ms)
	remeasure(t, clk, b, "quick", 10*ms, "slow", 8*ms) // ranks it ahead of quick
	var counts []int
	for round := range 6 {
		got, held := pickN(t, b, 40)
		n := 0
		for i, a := range got {
			lat := 10 * ms
			if a == "slow" {
				n++
				lat = 8 * ms // it did get faster
			}
			held[i].Report(lat, nil)
		}
		counts = append(counts, n)
		if round == 0 && n > trialFrom {
			t.Errorf("the first 40 picks after one short draw sent %d to the target it came from, want at most %d", n, trialFrom)
		}
	}
	if last := counts[len(counts)-1]; last < 40 {
		t.Errorf("picks per round of 40 that went to a target that got faster: %v; want all 40 by the sixth round", counts)
	}
}

// TestCapacityTrialNeverMakesACallerWait: past the picks its one short
// draw earned, a target is ranked by its old mean, not closed: with the
// other target full, the picks go to it rather than to the queue.
func TestCapacityTrialNeverMakesACallerWait(t *testing.T) {
	ms := time.Millisecond
	clk := &capClock{}
	clk.ns.Store(1)
	b := taughtPairAt(t, clk, "slow", 100, 30*ms, "quick", 5, 10*ms)
	remeasure(t, clk, b, "quick", 10*ms, "slow", 8*ms)
	got, held := pickN(t, b, 40) // fails on ErrAtCapacity
	n := 0
	for _, a := range got {
		if a == "slow" {
			n++
		}
	}
	if n != 35 {
		t.Errorf("%d of 40 picks went to slow, want 35 (quick has 5 permits): %v", n, got)
	}
	for _, p := range held {
		p.Done(nil)
	}
}

// Reconfigure builds the strategy again from new settings over the same
// endpoints: a learned limit and the picks in flight stay; invalid
// options change nothing.
func TestReconfigureKeepsLearnedState(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := newCapacityBalancer(t, nil, clk.Now, balance.Target{Addr: "a", Weight: 1})
	var held []balance.Pick
	for range 20 {
		held = append(held, mustPickCapacity(t, b))
	}
	held[19].Report(time.Millisecond, balance.ErrRejected)
	if l := limitOf(b, "a"); l != 19 {
		t.Fatalf("limit %d, want 19", l)
	}
	if err := b.Reconfigure(balance.Options{Settings: settingsOf(map[string]float64{"tolerance": 0.5})}); err == nil {
		t.Fatal("an invalid setting was accepted")
	}
	if err := b.Reconfigure(balance.Options{Settings: settingsOf(map[string]float64{"tolerance": 3}), Passive: balance.Passive{MaxFailures: 2}}); err != nil {
		t.Fatal(err)
	}
	if l, n := limitOf(b, "a"), b.Endpoints()[0].InFlight; l != 19 || n != 19 {
		t.Fatalf("after Reconfigure: limit %d, in flight %d; want 19, 19", l, n)
	}
	for _, p := range held[:19] {
		p.Done(nil)
	}
	// passive.max_failures 2 is in force: two failures in a row eject.
	for range 2 {
		mustPickCapacity(t, b).Done(errors.New("failed"))
	}
	if !b.Ejected("a") {
		t.Fatal("passive.max_failures 2 not in force after Reconfigure: two failures did not eject")
	}
}

// A target that failed most of what it got is tried again, once its
// failure share has halved, with one pick at a time (a circuit breaker's
// half-open state), another only after the last has gone unanswered four
// latencies, and in full once a trial has succeeded (its share is then
// below the hold-back line): a black hole that is still dark takes one
// request, not the burst that a halved share would otherwise let through
// (bench/contest's blackhole).
func TestCapacityTriesAFailingTargetOnePickAtATime(t *testing.T) {
	const fast = 20 * time.Millisecond
	clk := &capClock{}
	clk.ns.Store(1)
	b := taughtPairAt(t, clk, "silent", 40, fast, "steady", 40, 50*time.Millisecond)
	only := balance.PickInfo{Exclude: excludeAllBut(b, "silent")}
	failEach(t, b, clk, only, 20, errors.New("timeout awaiting response headers"))
	got, held := pickN(t, b, 3)
	if slices.Contains(got, "silent") {
		t.Fatalf("picks %v right after 20 failures in a row; want none on silent", got)
	}
	for _, p := range held {
		p.Done(nil)
	}

	clk.ns.Add(int64(balance.FailureHalfLife)) // the share halves: silent may be tried
	teachLatency(t, b, "steady", 50*time.Millisecond, 1)
	trial := mustPickCapacity(t, b)
	if trial.Addr() != "silent" {
		t.Fatalf("first pick after the share halved went to %s; want the trial on silent (faster)", trial.Addr())
	}
	// Three more requests that only silent may take (retries that tried
	// steady), swallowed with the trial.
	var swallowed []balance.Pick
	for range 3 {
		p, err := b.PickWith(only)
		if err != nil {
			t.Fatal(err)
		}
		swallowed = append(swallowed, p)
	}
	got, held = pickN(t, b, 5)
	if slices.Contains(got, "silent") {
		t.Fatalf("picks %v while silent's trial is out; want every one on steady", got)
	}
	clk.ns.Add(int64(4*fast + time.Millisecond))
	second := mustPickCapacity(t, b)
	if second.Addr() != "silent" {
		t.Fatalf("pick after the trial went unanswered four latencies went to %s; want a second trial on silent", second.Addr())
	}
	second.Report(fast, nil) // it answered: silent is back
	// The first trial and the three, swallowed while silent was still
	// dark, time out only now: they say how silent was before the second
	// answered, and must not hold it back again (timeouts of picks sent
	// before a success; a client's timeout comes long after the target's
	// return).
	for _, p := range append(swallowed, trial) {
		p.Report(time.Second, os.ErrDeadlineExceeded)
	}
	got2, held2 := pickN(t, b, 3)
	if n := len(got2) - len(slices.DeleteFunc(slices.Clone(got2), func(a string) bool { return a == "silent" })); n != 3 {
		t.Fatalf("picks %v after silent's trial succeeded and an older one timed out; want all 3 on silent (faster, its trials over)", got2)
	}
	for _, p := range append(held, held2...) {
		p.Done(nil)
	}
}

// A target that fails by silence (its failures are timeouts: a black
// hole) gets its trials while the other targets have free permits and
// rank better, and the trials it swallows, timing out a client's
// timeout later, do not restart its hold-back: the next trial follows
// four latencies after the last, so a target that came back is found
// within a few latencies, not a failure share's halving after the last
// swallowed trial (bench/contest's blackhole: 0.6-0.9 s of its permits
// unused after it returned).
func TestCapacitySilentTargetTrials(t *testing.T) {
	const slow = 50 * time.Millisecond
	clk := &capClock{}
	clk.ns.Store(int64(10 * time.Second)) // the balancer's clock runs from its creation: timeouts sent after it
	b := taughtPairAt(t, clk, "silent", 40, slow, "steady", 40, 20*time.Millisecond)
	only := balance.PickInfo{Exclude: excludeAllBut(b, "silent")}
	failEach(t, b, clk, only, 20, os.ErrDeadlineExceeded)
	if got, held := pickN(t, b, 3); slices.Contains(got, "silent") {
		t.Fatalf("picks %v right after 20 timeouts; want none on silent", got)
	} else {
		for _, p := range held {
			p.Done(nil)
		}
	}
	clk.ns.Add(int64(balance.FailureHalfLife))
	teachLatency(t, b, "steady", 20*time.Millisecond, 1)
	trial := mustPickCapacity(t, b)
	if trial.Addr() != "silent" {
		t.Fatalf("first pick after the share halved went to %s; want silent's trial, ahead of faster steady", trial.Addr())
	}
	// The trial is swallowed; its client gives up a second later.
	clk.ns.Add(int64(time.Second))
	trial.Report(time.Second, os.ErrDeadlineExceeded)
	second := mustPickCapacity(t, b)
	if second.Addr() != "silent" {
		t.Fatalf("pick after the swallowed trial timed out went to %s; want the next trial on silent", second.Addr())
	}
	second.Report(slow, nil) // it answered: silent is back
	// steady full: the next request goes to silent rather than wait for
	// one of steady's permits, as it would while silent was held back.
	var held []balance.Pick
	for range 40 {
		p, err := b.PickWith(balance.PickInfo{Exclude: excludeAllBut(b, "steady")})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	if p := mustPickCapacity(t, b); p.Addr() != "silent" {
		t.Fatalf("pick with steady full after silent's trial succeeded went to %s; want silent", p.Addr())
	} else {
		p.Done(nil)
	}
	for _, p := range held {
		p.Done(nil)
	}
}
