package balance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// fakeClock is a manual clock for warm-up and ejection tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// tb is what both *testing.T and *rapid.T offer.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustNew(t tb, name string, o Options, targets ...Target) *Balancer {
	t.Helper()
	b, err := New(name, o)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	if len(targets) > 0 {
		if err := b.Update(targets); err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	return b
}

func mustPick(t tb, b *Balancer, key string) Pick {
	t.Helper()
	p, err := b.Pick(key)
	if err != nil {
		t.Fatalf("%s: Pick(%q): %v", b.Strategy(), key, err)
	}
	return p
}

// targetsN makes n targets of weight 1.
func targetsN(n int) []Target {
	ts := make([]Target, n)
	for i := range ts {
		ts[i] = Target{Addr: fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256), Weight: 1}
	}
	return ts
}

// capClock is a settable clock (the wait-queue tests; the capacity
// package's tests have their own).
type capClock struct{ ns atomic.Int64 }

func (c *capClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// enqueue queues a waiter that excludes nothing, now.
func (w *waitQueue) enqueue() *waiter { return w.enqueueAt(w.now(), nil) }

// wakeOne wakes a waiter for a permit on some target.
func (w *waitQueue) wakeOne() { w.wake(nil) }
