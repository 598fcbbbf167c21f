package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
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
	waitQueued(&g, n)
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
	waitQueued(&g, 2)
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

// TestGroupSurvivesAPanickingRun: a run that panics fails the calls it
// served with errGroupPanic, the panic reaches the leader's caller, and
// the group serves the next call (it was left busy, jamming every later
// call of the type, before).
func TestGroupSurvivesAPanickingRun(t *testing.T) {
	var g group[int, int]
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	run := func(_ context.Context, ins []int) ([]int, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-release
			panic("a driver bug")
		}
		return make([]int, len(ins)), nil
	}
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		g.do(context.Background(), 0, 1, 10, run)
	}()
	<-started
	queued := make(chan error, 1)
	go func() {
		_, err := g.do(context.Background(), 1, 1, 10, run)
		queued <- err
	}()
	waitQueued(&g, 1)
	close(release)
	if p := <-panicked; p != "a driver bug" {
		t.Fatalf("the leader's caller recovered %v, want the run's panic", p)
	}
	// The queued call was either handed the lead (and ran: no error) or
	// served by the panicking run; it is answered either way.
	if err := <-queued; err != nil && !errors.Is(err, errGroupPanic) {
		t.Fatalf("queued call: %v", err)
	}
	if _, err := g.do(context.Background(), 2, 1, 10, run); err != nil {
		t.Fatalf("a call after the panic: %v", err)
	}
}

// TestGroupSkipsEndedCalls: a call whose context has ended before its
// run starts is answered with its context's error and nothing is run for
// it (a hold would otherwise claim tasks under a lease nobody reads).
func TestGroupSkipsEndedCalls(t *testing.T) {
	var g group[int, int]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	_, err := g.do(ctx, 1, 1, 10, func(context.Context, []int) ([]int, error) { ran = true; return []int{0}, nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("ended call: err %v, ran %v; want context.Canceled and no run", err, ran)
	}
	if g.busy {
		t.Fatal("group left busy")
	}
}

// TestGroupRunEndsAtTheLatestDeadline: a run of several calls is not
// cancelled with one of them, but ends at the latest of their deadlines.
func TestGroupRunEndsAtTheLatestDeadline(t *testing.T) {
	var g group[int, int]
	started, release := make(chan struct{}), make(chan struct{})
	var deadline atomic.Value
	var calls atomic.Int32
	run := func(ctx context.Context, ins []int) ([]int, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		} else {
			d, _ := ctx.Deadline()
			deadline.Store(d)
		}
		return make([]int, len(ins)), nil
	}
	go g.do(context.Background(), 0, 1, 10, run)
	<-started
	base := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for i := 1; i <= 2; i++ {
		ctx, cancel := context.WithDeadline(context.Background(), base.Add(time.Duration(i)*time.Minute))
		defer cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.do(ctx, i, 1, 10, run); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}()
	}
	waitQueued(&g, 2)
	close(release)
	wg.Wait()
	if got, _ := deadline.Load().(time.Time); !got.Equal(base.Add(2 * time.Minute)) {
		t.Fatalf("the merged run's deadline %v, want the later call's %v", got, base.Add(2*time.Minute))
	}
}

// waitQueued returns once n calls wait in g's queue.
func waitQueued[In, Out any](g *group[In, Out], n int) {
	for {
		g.mu.Lock()
		q := len(g.next)
		g.mu.Unlock()
		if q == n {
			return
		}
		runtime.Gosched()
	}
}

// TestSplitByLeaseGivesEachTaskOnce: a coalesced claim's rows go to the
// holds by lease and owner, at most each hold's limit, so two holds given
// one lease never get the same task, nor a row written with the other's
// owner (whose heartbeat would not renew it), whatever order the
// database returned the rows in.
func TestSplitByLeaseGivesEachTaskOnce(t *testing.T) {
	ps := []HoldParams{{Lease: "a", WorkerID: "w0", Limit: 2}, {Lease: "b", WorkerID: "w1", Limit: 1}, {Lease: "a", WorkerID: "w2", Limit: 2}}
	var recs []flow.Record
	for i, h := range [][2]string{{"a", "w2"}, {"b", "w1"}, {"a", "w0"}, {"a", "w2"}} {
		recs = append(recs, flow.Record{Task: flow.Task{TaskID: fmt.Sprint(i), Lease: h[0], Owner: h[1]}})
	}
	outs := splitByLease(ps, recs)
	seen := map[string]int{}
	for i, out := range outs {
		if len(out) > ps[i].Limit {
			t.Fatalf("hold %d got %d tasks, limit %d", i, len(out), ps[i].Limit)
		}
		for _, r := range out {
			if r.Lease != ps[i].Lease || r.Owner != ps[i].WorkerID {
				t.Fatalf("hold %d (lease %s, owner %s) got a task of lease %s, owner %s", i, ps[i].Lease, ps[i].WorkerID, r.Lease, r.Owner)
			}
			seen[r.TaskID]++
		}
	}
	if len(seen) != len(recs) {
		t.Fatalf("%d of %d tasks handed out: %v", len(seen), len(recs), outs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("task %s handed to %d holds", id, n)
		}
	}
}
