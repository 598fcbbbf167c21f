package capacity

import (
	"math"

	"github.com/fulcrum-lb/fulcrum/balance"
)

func (c *capState) resetWindow() {
	c.winStart, c.n, c.sum, c.sat, c.rejects, c.winL, c.winIdle = 0, 0, 0, 0, 0, 0, false
}

// changed starts a new window after the limit changed. Outcomes of the
// next round trip mostly belong to picks made under the old limit, so the
// window opens only after it: growth is clocked by feedback, as TCP's is.
func (c *capState) changed(now int64) {
	// The current latency, not the baseline: after an overshoot the round
	// trip is the long one.
	c.quietUntil = now + max(int64(c.baseline), c.lat.Load())
	c.resetWindow()
}

func (c *capState) closeWindow(e *balance.Endpoint, now int64, cfg Settings) {
	old := c.limit
	saturated := c.n > 0 && c.sat*2 >= c.n
	grow := saturated
	// 32 samples at least for latency decisions: exponential service times
	// make the mean of fewer too noisy to tell queueing from chance.
	if c.n >= 32 {
		// A busy window's time per request by Little's law (its
		// in-flight over time, over the successes after its first), not
		// the mean of the latencies that came back: while the load ramps
		// up the ones that come back are the short ones (none of a
		// window that ends 150 ms after the first pick took longer), and
		// a baseline taken from them was half the target's latency.
		// Every later window of a target that never queued read as
		// twice too slow and cut its limit below the callers' demand
		// (bench/contest's swap, before the first swap: a baseline of
		// 55 ms for a 100 ms provider, the limit cut from 96 to 63-78
		// for 70 callers). Under littleBusy in flight the gaps between
		// outcomes may be idle, which Little's law would count as
		// service; such a window keeps the mean (and a light load ramps
		// no bias into it).
		avg := c.sum / float64(c.n)
		if !c.winIdle {
			avg = c.winL / float64(c.n-1)
		}
		if avg <= cfg.Tolerance*c.baseline {
			c.slow = 0
		}
		switch {
		case !c.warm:
			// The first window holds the first completions, the quick
			// ones: a biased sample. Let it pass.
			c.warm = true
		case c.baseline == 0:
			c.baseline, c.baseLimit = avg, c.limit
		case avg > cfg.Tolerance*c.baseline && c.limit > c.baseLimit:
			// Latency rose past tolerance since we grew beyond a limit
			// known to be fine: our load queues at the target. Shrink by
			// the gradient, at most by half and not below that limit, and
			// remember where it hurt.
			g := max(0.5, cfg.Tolerance*c.baseline/avg)
			c.ceiling = c.limit
			c.limit = max(cfg.MinLimit, c.baseLimit, math.Floor(c.limit*g))
			c.step = 1
			grow = false
		case avg > cfg.Tolerance*c.baseline:
			// Slower without our having grown past a known-fine limit.
			// Right after a cut that is the backlog of the overshoot
			// draining; if it lasts five windows the target slowed by
			// itself (or from others' load): accept the new level.
			grow = false
			if c.slow++; c.slow >= 5 {
				c.baseline, c.slow = avg, 0
			}
		case avg <= 1.1*c.baseline:
			// About as fast as the baseline: this limit is fine.
			c.baseLimit = max(c.baseLimit, c.limit)
			if avg < c.baseline {
				c.baseline += (avg - c.baseline) / 4
			} else {
				c.baseline += (avg - c.baseline) / 32
			}
		case c.limit <= c.baseLimit:
			// A little slower at a known-fine limit: drift slowly, so a
			// lasting change is absorbed. Above it, no drift: that is how
			// queueing would creep into the baseline.
			c.baseline += (avg - c.baseline) / 32
		}
	}
	if grow {
		switch {
		case c.ceiling == 0:
			c.limit *= 2 // slow start
		case c.limit < c.ceiling:
			c.limit += max(1, math.Floor((c.ceiling-c.limit)/2))
		default:
			c.limit += c.step
			c.step = min(c.step*2, max(1, math.Floor(c.limit/4)))
			if c.limit > 2*c.ceiling {
				c.ceiling = 0 // far past the old ceiling: it no longer holds
			}
		}
		c.limit = min(c.limit, cfg.MaxLimit)
	}
	if math.Ceil(c.limit) != math.Ceil(old) {
		c.publish(e)
		c.changed(now)
	} else {
		c.resetWindow()
	}
}
