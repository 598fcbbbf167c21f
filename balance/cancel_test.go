package balance

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

// A pick given back unused returns its permit (a waiter gets it) but is
// not a request: no count, no latency, and it does not break a run of
// failures toward passive ejection the way a success would.
func TestCancelReturnsThePermitWithoutAnOutcome(t *testing.T) {
	boom := errors.New("boom")
	b := mustNew(t, "round_robin", Options{Passive: Passive{MaxFailures: 2, Window: 1 << 40, EjectFor: 1 << 40}},
		Target{Addr: "a", Weight: 1, MaxConcurrency: 1})
	mustPick(t, b, "").Done(boom)

	p := mustPick(t, b, "")
	got := make(chan Pick)
	go func() {
		w, err := b.Wait(context.Background(), PickInfo{})
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	// Cancel once the waiter is queued, so the wake-up is what serves it.
	for b.wq.n.Load() == 0 {
		runtime.Gosched()
	}
	p.Cancel()
	var w Pick
	select {
	case w = <-got: // the permit went to the waiter
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the cancelled pick's permit")
	}
	st := b.Endpoints()[0]
	if st.Requests != 1 || st.AvgLatency != 0 {
		t.Errorf("after a cancel: %d requests, latency %v; want only the failed one counted", st.Requests, st.AvgLatency)
	}
	w.Done(boom) // the second failure in a row: the cancel did not reset the run
	if !b.Endpoints()[0].Ejected {
		t.Error("two failures around a cancel did not eject the target")
	}
	if n := b.Endpoints()[0].InFlight; n != 0 {
		t.Errorf("in flight after all ended: %d", n)
	}
}

// A timeout is a failure, and its length is the caller's patience, not
// the target's latency: the mean stays what the answers made it (the
// gateway's auto try timeout is ten of those means).
func TestTimeoutsStayOutOfTheMeanLatency(t *testing.T) {
	b := mustNew(t, "round_robin", Options{}, Target{Addr: "a", Weight: 1})
	mustPick(t, b, "").Report(10*time.Millisecond, nil)
	mustPick(t, b, "").Report(time.Second, os.ErrDeadlineExceeded)
	mustPick(t, b, "").Report(time.Second, context.DeadlineExceeded)
	st := b.Endpoints()[0]
	if st.AvgLatency != 10*time.Millisecond || st.Failures != 2 || st.Requests != 3 {
		t.Fatalf("mean %v, %d failures of %d requests; want 10ms, 2 of 3", st.AvgLatency, st.Failures, st.Requests)
	}
	mustPick(t, b, "").Report(time.Second, errors.New("reset")) // a failure that answered: its time counts
	if st := b.Endpoints()[0]; st.AvgLatency <= 10*time.Millisecond {
		t.Fatalf("mean %v after a 1 s failure that was no timeout; want it counted", st.AvgLatency)
	}
}
