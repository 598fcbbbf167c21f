package capacity

import (
	"math"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// silenced reports whether a target has gone silent: so many of its
// latest picks are unanswered that a service with its latencies would
// almost never leave them so. A target that turns into a black hole
// (accepts, never answers) still answers the picks sent before, and
// each answer freed a permit that the next pick took into the hole: the
// first news of the hole was its first request's timeout, a client's
// timeout later, by when the learned limit's worth of requests (60 on
// bench/contest's blackhole) sat there, each to fail. Held while
// silenced, it takes no new pick until an answer of a later pick comes,
// which a target that is merely slow sends soon.
//
// The test: k picks sent after the latest-sent pick that was answered
// (Outcome.Seq). With n in flight and exponential service times, the k
// newest picks are all unanswered with probability about exp(-k²/2n), so
// k at least 3√n+4 is under 1 in 500 per look (a false hold lasts until
// the next answer), and held only once k has been at least half that for
// a quarter of a mean latency: a burst sends many picks at once, all
// unanswered for a moment, and is not a silence. With times that vary
// less the newest picks are always the unanswered ones (a constant
// latency leaves all n of them so), so the test applies only to a target
// whose latencies spread like an exponential's (mean deviation at least
// half the mean).
//
// now is the pick's clock, read here only when it is needed (0: not yet).
func (c *capState) silenced(e *balance.Endpoint, info *balance.PickInfo, now *int64) bool {
	lat := c.lat.Load()
	ans := c.ansSeq.Load()
	if lat <= 0 || ans == 0 || c.dev.Load() < lat/2 {
		return false
	}
	k := float64(e.Picks() - ans)
	bound := 3*math.Sqrt(float64(e.InFlight())) + 4
	if k < bound/2 {
		if c.halfAt.Load() != 0 {
			c.halfAt.Store(0)
		}
		return false
	}
	if *now == 0 {
		*now = info.Now()
	}
	h := c.halfAt.Load()
	if h == 0 {
		c.halfAt.CompareAndSwap(0, *now)
		return false
	}
	return k >= bound && *now-h >= lat/4
}

// answered records an outcome the target sent (a success, a refusal, a
// failure other than a timeout) for silenced.
func (c *capState) answered(o balance.Outcome) {
	if o.Class == balance.ClientGone || o.TimedOut() {
		return
	}
	for {
		// Outcomes run concurrently: a plain store could put an older
		// number back, and the picks after it would read as unanswered.
		cur := c.ansSeq.Load()
		if o.Seq <= cur || c.ansSeq.CompareAndSwap(cur, o.Seq) {
			return
		}
	}
}
