package balance

import (
	"sync/atomic"
	"time"
)

// FailureShare is a latency-aware strategy's memory of how often a
// target fails: an EWMA (alpha 1/8) of 1 per failure and 0 per success,
// halved for every FailureHalfLife without a failure. A strategy that
// ranks by latency divides the latency by OK: a target answering fast
// 500s or 503s is fast at failing, not at serving, and without it drew
// the traffic (the fast-failure trap, TestFastFailureTrap). The halving
// lets a target that stopped receiving picks be tried again once it has
// been quiet a while, as a re-measure does for a slow one.
type FailureShare struct {
	share atomic.Int64 // 0..failOne
	at    atomic.Int64 // clock of the last failure
	// tripped: the share reached half on a failure, and no success
	// has been counted since (unlike Tripped, which reads the share
	// and outlasts a success that leaves it above half). While set, a
	// success of a request sent before the last failure is not
	// counted (Observe), and the next failure (a trial the halving let
	// through) puts the share back above half: the trial said the
	// target still fails, and it is held back until the next halving.
	// Without that a failed trial left the share just under half, and
	// the target took picks until two or three more fast failures had
	// tripped it again.
	tripped atomic.Bool
}

// FailureHalfLife is how long a target's failure share takes to halve
// with no new failure.
const FailureHalfLife = time.Second

const (
	failOne = 1 << 16
	// okFloor bounds the division: a target failing everything ranks
	// as 1024 times slower than its latency (a 1 ms failure as a 1 s
	// success), and still above nothing.
	okFloor = 1.0 / 1024
)

// Observe records one outcome at clock now (Outcome.Now) of a request
// sent at clock sent; a client that left says nothing of the target.
func (f *FailureShare) Observe(failed bool, now, sent int64) {
	cur := f.share.Load()
	if cur == 0 && !failed {
		return // the common case: no failure to remember, no write
	}
	if !failed && f.tripped.Load() && sent < f.at.Load() {
		// Sent before the failure that keeps the target tripped ended:
		// it says how the target was, not how it is. A target that
		// starts failing fast still has the requests sent before in
		// flight, and their successes, counted, wiped the failures
		// out as they came back: the target took picks again, all of
		// them fast failures.
		return
	}
	cur = f.decayed(cur, now)
	if failed {
		cur += (failOne - cur) / 8
		if f.tripped.Load() {
			cur = max(cur, failOne/2+failOne/16)
		}
		f.at.Store(now)
		if cur >= failOne/2 {
			f.tripped.Store(true)
		}
	} else {
		cur -= cur / 8
		if cur < failOne/1024 {
			cur = 0
		}
		if f.tripped.Load() {
			f.tripped.Store(false)
		}
	}
	f.share.Store(cur)
}

// Failing reports whether any failure is remembered: only then does OK
// need the clock.
func (f *FailureShare) Failing() bool { return f.share.Load() != 0 }

// Tripped reports whether failures made up at least half of the share
// when the last one came (before any halving since): a target that was
// failing most of what it got, whichever way it looks now.
func (f *FailureShare) Tripped() bool { return f.share.Load() >= failOne/2 }

// LastFailure is the clock of the last failure observed; 0 = none.
func (f *FailureShare) LastFailure() int64 { return f.at.Load() }

// OK is the share of outcomes that succeeded, as of clock now, at least
// 1/1024.
func (f *FailureShare) OK(now int64) float64 {
	s := f.decayed(f.share.Load(), now)
	return max(1-float64(s)/failOne, okFloor)
}

func (f *FailureShare) decayed(s, now int64) int64 {
	if s == 0 {
		return 0
	}
	if h := (now - f.at.Load()) / int64(FailureHalfLife); h > 0 {
		if h >= 17 {
			return 0
		}
		s >>= h
	}
	return s
}
