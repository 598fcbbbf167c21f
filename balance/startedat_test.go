package balance

import (
	"testing"
	"time"
)

// Warm-up counts from a registry's start time when the target carries one,
// from first sight when it does not, and starts over when the start time
// moves (the provider restarted).
func TestWarmupCountsFromStartedAt(t *testing.T) {
	clk := newFakeClock()
	b := mustNew(t, "random", Options{Clock: clk.Now})
	clk.Advance(time.Hour)
	started := clk.Now().Add(-30 * time.Second)
	set := func(ts ...Target) {
		t.Helper()
		if err := b.Update(ts); err != nil {
			t.Fatal(err)
		}
	}
	weights := func() map[string]EndpointStats {
		m := map[string]EndpointStats{}
		for _, s := range b.Endpoints() {
			m[s.Target.Addr] = s
		}
		return m
	}
	reg := Target{Addr: "registered", Weight: 10, Warmup: time.Minute, StartedAt: started}
	fresh := Target{Addr: "fresh", Weight: 10, Warmup: time.Minute}
	set(reg, fresh)
	w := weights()
	if got := w["registered"]; !got.Warming || got.EffectiveWeight != 5 {
		t.Fatalf("registered 30s before it appeared, 60s window: %+v, want warming at weight 5", got)
	}
	if got := w["fresh"]; !got.Warming || got.EffectiveWeight != 1 {
		t.Fatalf("target without a start time, just appeared: %+v, want warming at weight 1", got)
	}

	clk.Advance(18 * time.Second)
	set(reg, fresh) // same start time: the warm-up goes on
	if got := weights()["registered"]; got.EffectiveWeight != 8 {
		t.Fatalf("48s into a 60s window: effective weight %d, want 8", got.EffectiveWeight)
	}

	restarted := reg
	restarted.StartedAt = clk.Now().Add(-6 * time.Second)
	set(restarted, fresh)
	if got := weights()["registered"]; !got.Warming || got.EffectiveWeight != 1 {
		t.Fatalf("provider restarted 6s ago: %+v, want warming again at weight 1", got)
	}

	future := Target{Addr: "skewed", Weight: 10, Warmup: time.Minute, StartedAt: clk.Now().Add(time.Hour)}
	set(restarted, fresh, future)
	clk.Advance(30 * time.Second)
	if got := weights()["skewed"]; got.EffectiveWeight != 5 {
		t.Fatalf("start time in the future counts from first sight: 30s in, effective weight %d, want 5", got.EffectiveWeight)
	}
	clk.Advance(30 * time.Second)
	if got := weights()["registered"]; got.Warming || got.EffectiveWeight != 10 {
		t.Fatalf("66s after the restart: %+v, want warm at weight 10", got)
	}
}
