package testenv

import "time"

// TB is what Eventually needs of a test: *testing.T, *testing.B and
// rapid's *T all have it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually polls cond, every few milliseconds at most, until it holds, and fails
// the test naming what it waited for after 30 s. Tests await events with
// it instead of sleeping and hoping; the limit only bounds a hang, it is
// never a claim about speed.
func Eventually(t TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, what, 30*time.Second, cond)
}

// EventuallyEvery is Eventually for a condition that is costly to check
// (a large read served by the code's own event loop): it checks every
// interval, fails after limit, and never backs off below the interval.
func EventuallyEvery(t TB, what string, every, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(every)
	}
}

// EventuallyWithin is Eventually with its own limit.
func EventuallyWithin(t TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	// Poll fast at first (most conditions hold within microseconds), then
	// back off to spare the CPU for the code under test.
	pause := 100 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}
