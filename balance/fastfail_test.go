package balance_test

import (
	"container/heap"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	_ "github.com/fulcrum-lb/fulcrum/balance/capacity" // registers capacity
	_ "github.com/fulcrum-lb/fulcrum/balance/probe"    // registers probe
)

// The fast-failure trap, for every strategy that ranks by latency: a
// target answering fast 500s (Failed) or fast 503s (Refused) is fast at
// failing, not at serving, and must not draw more traffic than a healthy
// one; once it answers again it must draw traffic again. Eight callers
// in a closed loop, as a gateway's connections are: each outcome is
// reported through Pick.Report when it ends on a simulated clock, and
// the caller's next pick follows at once. Each answer carries the
// target's load report (Pick.ReportLoad, read by probe alone): its other
// requests in flight and its latency, which for the failing target is
// its fast failures'.
func TestFastFailureTrap(t *testing.T) {
	failures := []struct {
		name string
		err  error
	}{
		{"fast_500", errors.New("status 500")},
		{"fast_503", balance.ErrRejected},
	}
	for _, name := range latencyAware {
		for _, f := range failures {
			t.Run(name+"/"+f.name, func(t *testing.T) {
				sim := newLoopSim(t, name)
				// Healthy answers successes in 20 ms, the other its
				// error in 1 ms.
				sim.answer = func(addr string) (time.Duration, error) {
					if addr == "failing" {
						return time.Millisecond, f.err
					}
					return 20 * time.Millisecond, nil
				}
				picks := sim.run(4000)
				t.Logf("failing: failing %d, healthy %d picks", picks["failing"], picks["healthy"])
				if picks["failing"] > picks["healthy"] {
					t.Errorf("failing drew %d picks, healthy %d: fast failures ranked it fast", picks["failing"], picks["healthy"])
				}
				// capacity holds a target that fails most of what it gets
				// back while another could serve, full or not: a request
				// waits for the healthy target's permit. What the failing
				// one draws is what its decaying share readmits.
				if name == "capacity" && f.name == "fast_500" && picks["failing"]*20 > picks["healthy"] {
					t.Errorf("failing drew %d picks, healthy %d: want under a twentieth of its", picks["failing"], picks["healthy"])
				}
				// It recovers: successes in 10 ms, twice as fast as
				// the other. Within the next 4000 outcomes (10 s and
				// more of the clock) it must be found again and draw
				// its share.
				sim.answer = func(addr string) (time.Duration, error) {
					if addr == "failing" {
						return 10 * time.Millisecond, nil
					}
					return 20 * time.Millisecond, nil
				}
				sim.run(4000)
				picks = sim.run(2000)
				t.Logf("recovered: once failing %d, other %d picks", picks["failing"], picks["healthy"])
				if picks["failing"]*4 < picks["healthy"] {
					t.Errorf("after it recovered, the once failing target drew %d picks, the other %d: want at least a quarter of its", picks["failing"], picks["healthy"])
				}
			})
		}
	}
}

// When every target fails, a strategy still picks one (the request gets
// the target's answer), however the failures rank them.
func TestEveryTargetFailing(t *testing.T) {
	for _, name := range latencyAware {
		t.Run(name, func(t *testing.T) {
			sim := newLoopSim(t, name)
			sim.answer = func(addr string) (time.Duration, error) {
				return time.Millisecond, errors.New("status 500")
			}
			picks := sim.run(4000) // fails the test if a pick finds no target with permits free
			if picks["failing"] == 0 || picks["healthy"] == 0 {
				t.Errorf("picks %v: want both targets used", picks)
			}
		})
	}
}

// A pick never declines while nothing is in flight: no request's end
// would wake a waiter, which would sleep to its deadline. Both targets
// serve first (the limits are learned), then one refuses everything
// (capacity parks it, holding its permits) and the other fails
// everything: neither serves, so the failing one is picked rather than
// held back behind the parked one. The simulation fails the test when
// no pick is in flight and none is possible.
func TestNoDeclineWithNothingInFlight(t *testing.T) {
	for _, name := range latencyAware {
		t.Run(name, func(t *testing.T) {
			sim := newLoopSim(t, name)
			sim.answer = func(addr string) (time.Duration, error) { return 20 * time.Millisecond, nil }
			sim.run(4000)
			sim.answer = func(addr string) (time.Duration, error) {
				if addr == "healthy" {
					return 100 * time.Microsecond, balance.ErrRejected // "healthy" no more: it refuses
				}
				return 100 * time.Microsecond, errors.New("status 500")
			}
			picks := sim.run(4000)
			t.Logf("picks %v", picks)
		})
	}
}

// latencyAware are the strategies that rank targets by latency.
var latencyAware = []string{"p2c", "shortest_response", "capacity", "probe"}

// loopSim runs callers in a closed loop against two targets on a
// simulated clock: every outcome is an event at its end time.
type loopSim struct {
	t      *testing.T
	b      *balance.Balancer
	ns     atomic.Int64
	answer func(addr string) (time.Duration, error)
	ev     events
	idle   int // callers whose pick found no permit: they try at the next event
}

func newLoopSim(t *testing.T, strategy string) *loopSim {
	s := &loopSim{t: t}
	s.ns.Store(1)
	b, err := balance.New(strategy, balance.Options{Clock: func() time.Time { return time.Unix(0, s.ns.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update([]balance.Target{{Addr: "healthy", Weight: 1}, {Addr: "failing", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	s.b, s.idle = b, 8
	return s
}

// run handles n outcomes and returns the picks each target drew.
func (s *loopSim) run(n int) map[string]int {
	picks := map[string]int{}
	start := func() {
		for ; s.idle > 0; s.idle-- {
			p, err := s.b.Pick("")
			if err != nil {
				if errors.Is(err, balance.ErrAtCapacity) {
					return // every permit taken: try at the next outcome
				}
				s.t.Fatal(err)
			}
			picks[p.Addr()]++
			lat, err := s.answer(p.Addr())
			heap.Push(&s.ev, event{at: s.ns.Load() + int64(lat), p: p, lat: lat, err: err})
		}
	}
	start()
	for range n {
		if s.ev.Len() == 0 {
			s.t.Fatal("no pick in flight and none possible")
		}
		e := heap.Pop(&s.ev).(event)
		s.ns.Store(e.at)
		others := int64(0)
		for _, o := range s.ev {
			if o.p.Addr() == e.p.Addr() {
				others++
			}
		}
		e.p.ReportLoad(balance.LoadReport{InFlight: others, Latency: e.lat})
		e.p.Report(e.lat, e.err)
		s.idle++
		start()
	}
	return picks
}

type event struct {
	at  int64
	p   balance.Pick
	lat time.Duration
	err error
}

type events []event

func (h events) Len() int           { return len(h) }
func (h events) Less(i, j int) bool { return h[i].at < h[j].at }
func (h events) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)        { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// The onset of fast failures under load: a target that starts answering
// at once with 500s still has many requests from before in flight, and
// their successes come back among its new failures. capacity must hold
// it back within a handful of failures all the same (each one is a
// client's error), and a trial the halving lets through that fails
// again must hold it back until the next halving, not let two or three
// more fast failures through first.
func TestFastFailureOnset(t *testing.T) {
	sim := newLoopSim(t, "capacity")
	sim.idle = 64
	healthy := func(string) (time.Duration, error) { return 20 * time.Millisecond, nil }
	sim.answer = healthy
	sim.run(3000)
	start := sim.ns.Load()
	sim.answer = func(addr string) (time.Duration, error) {
		if addr == "failing" {
			return 100 * time.Microsecond, errors.New("status 500")
		}
		return 20 * time.Millisecond, nil
	}
	// 12,000 outcomes: about 4 s of the clock, four halvings.
	picks := sim.run(12000)
	secs := float64(sim.ns.Load()-start) / float64(time.Second)
	t.Logf("after the onset: failing %d picks, healthy %d, over %.1f s", picks["failing"], picks["healthy"], secs)
	// The onset's picks (made in the instant the failures started,
	// before any came back) and one trial a halving: 14 here; 59 when
	// the old successes made it a pick again.
	if picks["failing"] > 20 {
		t.Errorf("the failing target drew %d picks over %.1f s, want at most 20: the onset's in-flight successes kept it picked, or failed trials did", picks["failing"], secs)
	}
}
