package capacity

import (
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// A target whose latencies spread like an exponential's and whose
// latest picks go unanswered in numbers its service would almost never
// leave so (a black hole that opened) takes no new pick until an answer
// of a later pick comes; a target with steady latencies, whose newest
// picks are always the unanswered ones, is not held for that.
func TestCapacityHoldsATargetThatWentSilent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spread bool // latencies 10 and 70 ms in turn, else 40 ms each
		held   bool
	}{
		{"exponential-like", true, true},
		{"steady latencies", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &capClock{}
			clk.ns.Store(int64(10 * time.Second))
			b := newCapacityBalancer(t, nil, clk.Now,
				balance.Target{Addr: "hole", Weight: 1, MaxConcurrency: 100},
				balance.Target{Addr: "steady", Weight: 1, MaxConcurrency: 100})
			teachLatency(t, b, "steady", 50*time.Millisecond, 40)
			only := balance.PickInfo{Exclude: excludeAllBut(b, "hole")}
			for i := range 64 {
				lat := 40 * time.Millisecond
				if tc.spread {
					lat = []time.Duration{10 * time.Millisecond, 70 * time.Millisecond}[i%2]
				}
				p, err := b.PickWith(only)
				if err != nil {
					t.Fatal(err)
				}
				clk.ns.Add(int64(time.Millisecond))
				p.Report(lat, nil)
			}
			if p := mustPickCapacity(t, b); p.Addr() != "hole" {
				t.Fatalf("first pick went to %s; want hole (faster)", p.Addr())
			} else {
				p.Report(40*time.Millisecond, nil)
			}
			// 30 picks go out and nothing comes back for 20 ms (over a
			// quarter of hole's mean latency).
			var out []balance.Pick
			for range 30 {
				p, err := b.PickWith(only)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, p)
			}
			clk.ns.Add(int64(20 * time.Millisecond))
			p := mustPickCapacity(t, b)
			if got := p.Addr() == "steady"; got != tc.held {
				t.Fatalf("pick with 30 of hole's picks unanswered for 20 ms went to %s; held %v, want %v", p.Addr(), got, tc.held)
			}
			p.Done(nil)
			// An answer of the newest pick: hole answers again.
			out[len(out)-1].Report(20*time.Millisecond, nil)
			if p := mustPickCapacity(t, b); p.Addr() != "hole" {
				t.Fatalf("pick after hole answered its newest pick went to %s; want hole", p.Addr())
			} else {
				p.Done(nil)
			}
			for _, p := range out[:len(out)-1] {
				p.Done(nil)
			}
		})
	}
}
