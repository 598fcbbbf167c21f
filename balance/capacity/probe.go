package capacity

import (
	"math"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// probe handles a success on a target that rejects. While the target
// stays full (the outcome found every learned permit taken), the limit is
// held probe_interval mean latencies, then grows by one permit. A probe
// that draws no rejection within a quarter latency (a rejection answers
// in far less) found a permit: the next probe comes a quarter latency
// later and is twice as big (at most a quarter of the limit), so a stage
// that doubles the permits is found in a few latencies; the first
// rejection ends the run (reject). One probe that fails costs one
// rejection per probe_interval. Each step also waits for an answer to a
// pick sent since the last one: silence is not a permit.
func (c *capState) probe(e *balance.Endpoint, o balance.Outcome, cfg Settings) {
	if c.revive {
		c.revived(e, o.Now, cfg)
		return
	}
	if o.Now-int64(o.Latency) >= c.raisedAt {
		c.raiseAnswered = true
	}
	full := int64(math.Ceil(c.limit))
	if o.InFlight < full {
		// Not full at this instant. Between one pick's end and the next
		// waiter's pick a full target shows a permit or two free, so only
		// a clearly emptier one (no demand past the limit, nothing to
		// learn) stops the probe clock; probes themselves wait for a
		// full target, so a probed permit is a used one.
		if 4*o.InFlight < 3*full {
			c.probeAt = 0
		}
		return
	}
	lat := max(c.lat.Load(), int64(time.Millisecond))
	wait := int64(cfg.ProbeInterval * float64(lat))
	switch {
	case c.step > 1:
		wait = lat / 4
	case o.Waiting > 0:
		// Callers queue for a permit: one found serves a waiter at once,
		// and a failed probe costs a fast refusal that the waiter's
		// retry takes back to the queue. A target whose permits came
		// back (a provider that recovers from 15 permits to 80 while
		// its mean still says 150 ms) was found up to 600 ms late at
		// the idle pace, with the queue standing meanwhile.
		wait = min(wait, int64(cfg.QueuedProbeInterval*float64(lat)))
	}
	if c.probeAt == 0 {
		c.probeAt = o.Now + wait
		return
	}
	if o.Now < c.probeAt {
		// Armed at an older, longer latency (a slow stage that just
		// ended): the wait follows the latency now.
		c.probeAt = min(c.probeAt, o.Now+wait)
		return
	}
	if !c.raiseAnswered {
		// No pick sent since the last raise has been answered yet. Not
		// being refused is no sign of a permit from a target that has
		// stopped answering (a black hole refuses nothing): the answers
		// still coming are of picks sent before it went silent, and
		// stepping on them doubled the limit into the hole, 60 to 91 in
		// a few milliseconds on bench/contest's blackhole, with every
		// new pick stuck there until the callers' timeout.
		return
	}
	c.limit = min(cfg.MaxLimit, c.limit+c.step)
	c.raised = c.step
	c.raisedAt, c.raiseAnswered = o.Now, false
	c.peak = max(c.peak, c.limit)
	if c.limit > c.ceiling {
		c.ceiling = 0
	}
	// Each step at most half the limit: from a parked target's one permit
	// to 60 in about ten probes, and an overshoot near a large limit
	// costs at most a proportionate burst of rejections.
	c.step = min(c.step*2, max(2, math.Floor(c.limit/2)))
	// The next, bigger step follows once this one has gone unrefused
	// for four refusal round trips (as a revival is judged), not a
	// quarter latency: a refusal answers within one, and on collapse
	// (permits 5 -> 20 -> 50 -> 90) the quarter-latency pace left
	// 1.1-1.35 % of the permits idle against 0.7-0.8 %.
	c.probeAt = o.Now + c.reviveAfter()
	c.publish(e)
}
