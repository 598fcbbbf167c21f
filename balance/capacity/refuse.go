package capacity

import (
	"math"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// rejectMemory is how long after its last rejection a target counts as
// one that rejects (and is not judged by its latency).
const rejectMemory = 30 * time.Second

// reject handles a rejection. The target had every permit taken while our
// picks in flight were within the limit (ours are out from the pick to
// the outcome, longer than they hold the target's permit): it has fewer
// permits than the limit. Each rejection takes one permit off, no more
// (the in-flight when the outcome is handled can be far lower than when
// the target refused, after a scheduling stall, so it is no bound): an overshoot of k permits answers with k
// rejections and lands back on the last limit that fitted, and a capacity
// drop answers every pick sent while the old load drains, so the limit
// follows the in-flight down to the new permits. Nothing is cut by a
// factor, so nothing is lost to over-correction.
func (c *capState) reject(e *balance.Endpoint, o balance.Outcome, cfg Settings) {
	if c.lastReject == 0 || o.Now-c.lastReject >= int64(rejectMemory) {
		// First rejection: the target says itself when it is full from
		// now on; the latency windows no longer decide.
		c.resetWindow()
		c.quietUntil = 0
		c.limit = math.Ceil(c.limit)
	}
	c.lastReject = o.Now
	if r := int64(o.Latency); r > 0 {
		if c.refuseLat == 0 {
			c.refuseLat = r
		} else {
			c.refuseLat += (r - c.refuseLat) / 8
		}
	}
	// A target that refuses is probed by its own clock only: retry
	// probes of a full target in a row would each draw a refusal.
	c.quietTill.Store(o.Now + int64(cfg.ProbeInterval*float64(max(c.lat.Load(), int64(time.Millisecond)))))
	c.peak = max(c.peak, c.limit)
	sent := o.Now - int64(o.Latency)
	if c.run == 0 {
		c.runFrom, c.runSeen = sent, o.Now
		c.nextCut = 4 + int(c.raised)
	}
	c.probeAt = 0
	if c.cutAt < c.runFrom {
		c.step = 1
	}
	// else this run halved the limit already: the probes that repair an
	// undershoot keep the quick pace. Each refusal of the picks still in
	// transit at the halving used to reset it to the slow one, and a
	// provider whose permits fell from 100 to 60 sat at a limit of 39
	// for 250 ms.

	// A pick already on its way when the run's first refusal came back
	// is part of the same overshoot (a burst of k picks past the permits
	// draws k refusals before any success can answer): it takes its one
	// permit off and does not lengthen the run. Counted, a burst of
	// retries onto an idle target halved it: 30 picks at 25 permits left
	// a limit of 13, and 12 permits stood idle while probes climbed back.
	inTransit := c.run > 0 && sent < c.runSeen
	if !inTransit {
		c.run++
	}
	l := max(cfg.MinLimit, c.limit-1)
	if n := float64(o.InFlight - 1); n < l {
		// The target refused while it held at most our other picks in
		// flight, so its permits (for us) are no more than those. With
		// the limit above the in-flight, one off per refusal kept the
		// gap: each refusal freed the slot it took, the next pick took
		// it and was refused too, until the run was long enough to
		// halve. In-flight handled late after a stall can read low, so
		// it cuts no deeper than a halving would.
		l = max(cfg.MinLimit, n, math.Floor(c.limit/2))
	}
	if !inTransit && c.run >= c.nextCut {
		// More refusals in a row than the last raise can explain, and no
		// pick sent since the first of them got a permit: the target
		// refuses everything new while the old load drains (its
		// capacity fell far, or to nothing). One permit per refusal
		// would draw one refusal per pick the drain lets through; halve
		// instead, again each time the run doubles. An undershoot is
		// probed back up at the quick pace.
		l = max(cfg.MinLimit, math.Floor(c.limit/2))
		c.nextCut = 2 * c.run
		c.step = 2
		c.cutAt = o.Now
	}
	if l == c.limit {
		c.park(e, o.Now, o.Waiting)
		return
	}
	if l < c.limit {
		c.ceiling = c.limit
		c.limit = l
		c.baseLimit = min(c.baseLimit, c.limit)
		c.publish(e)
	}
}
