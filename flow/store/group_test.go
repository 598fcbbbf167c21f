package store

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGroupMergesCalls: calls that arrive while a run is in flight are
// served together by the next run, each gets its own output, one run is
// in flight at a time, and a run takes at most max of the sizes (or one
// call).
func TestGroupMergesCalls(t *testing.T) {
	var g group[int, int]
	var inFlight, runs, merged atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{})
	run := func(_ context.Context, ins []int) ([]int, error) {
		if inFlight.Add(1) != 1 {
			t.Error("two runs in flight")
		}
		defer inFlight.Add(-1)
		if runs.Add(1) == 1 {
			close(first)
			<-release // hold the first run until the others queued
		}
		if len(ins) > 1 {
			merged.Add(1)
		}
		if sum := len(ins) * 2; len(ins) > 1 && sum > 10 {
			t.Errorf("a run of %d calls of size 2, max 10", len(ins))
		}
		outs := make([]int, len(ins))
		for i, in := range ins {
			outs[i] = in * 10
		}
		return outs, nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if out, err := g.do(context.Background(), 0, 2, 10, run); err != nil || out != 0 {
			t.Errorf("call 0: %d, %v", out, err)
		}
	}()
	<-first
	const n = 20
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := g.do(context.Background(), i, 2, 10, run); err != nil || out != i*10 {
				t.Errorf("call %d: %d, %v", i, out, err)
			}
		}()
	}
	for { // all queued
		g.mu.Lock()
		q := len(g.next)
		g.mu.Unlock()
		if q == n {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if merged.Load() == 0 || runs.Load() > 1+n/5+1 {
		t.Fatalf("%d runs, %d merged, for 1 + %d calls queued behind the first", runs.Load(), merged.Load(), n)
	}
	if g.busy || len(g.next) != 0 {
		t.Fatalf("group left busy=%v with %d queued", g.busy, len(g.next))
	}
}

// TestGroupQueuedCallLeavesOnCancel: a queued call whose context ends
// returns its error and is not run; the run's error reaches every call
// it served.
func TestGroupQueuedCallLeavesOnCancel(t *testing.T) {
	var g group[int, int]
	release := make(chan struct{})
	started := make(chan struct{})
	var seen sync.Map
	boom := errors.New("boom")
	run := func(_ context.Context, ins []int) ([]int, error) {
		for _, in := range ins {
			seen.Store(in, true)
		}
		if ins[0] == 0 {
			close(started)
			<-release
			return []int{0}, nil
		}
		return nil, boom
	}
	done := make(chan error, 3)
	go func() { _, err := g.do(context.Background(), 0, 1, 10, run); done <- err }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := g.do(ctx, 1, 1, 10, run); done <- err }()
	go func() { _, err := g.do(context.Background(), 2, 1, 10, run); done <- err }()
	for {
		g.mu.Lock()
		q := len(g.next)
		g.mu.Unlock()
		if q == 2 {
			break
		}
		runtime.Gosched()
	}
	cancel()
	var errs []error
	errs = append(errs, <-done) // the cancelled call leaves at once
	close(release)
	errs = append(errs, <-done, <-done)
	if !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("cancelled call: %v", errs[0])
	}
	if _, ok := seen.Load(1); ok {
		t.Fatal("the cancelled call was run")
	}
	var nils, booms int
	for _, err := range errs[1:] {
		switch {
		case err == nil:
			nils++
		case errors.Is(err, boom):
			booms++
		}
	}
	if nils != 1 || booms != 1 {
		t.Fatalf("errors %v", errs)
	}
}
