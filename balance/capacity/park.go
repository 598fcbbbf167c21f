package capacity

import (
	"math"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// park takes a target at the lowest limit that still refuses out of use
// for a while: the learner holds its permits (they count in the target's
// in-flight, so no pick, not even the balancer's fallback to any free
// permit, sends to it). Without it a dead target at min_limit would draw
// one pick per rejection round trip, thousands of rejections a second.
// The first pick after the time takes the permits back (unpark) and is
// the probe. How long is parkFor's choice.
func (c *capState) park(e *balance.Endpoint, now int64, waiting int) {
	if c.held != 0 {
		return
	}
	c.held = max(1, int64(math.Ceil(c.limit)))
	c.revive = false
	c.reviveAt.Store(0)
	e.HoldPermits(c.held)
	c.parkUntil.Store(now + c.parkFor(waiting))
}

// parkFor is how long a parked target holds its permits before the next
// probe. With nobody waiting, a quarter of a mean latency: four refused
// probes per latency while it stays down, and nobody loses by a late
// find. While callers wait in the queue, a sixteenth (at least four
// refusal round trips): the probe that finds the target back comes half
// a park after its return on average, and every waiter waits that long
// with it. On flap (50 waiters at each return of a provider that is down
// a second at a time) the quarter-latency park left them waiting about
// 8 ms each time, 0.6 % of the connections' time; a refused probe costs
// one fast refusal, which its caller's retry takes back to the queue.
func (c *capState) parkFor(waiting int) int64 {
	lat := c.lat.Load()
	if waiting == 0 {
		return max(lat/4, int64(time.Millisecond))
	}
	return max(lat/16, 4*c.refuseLat, int64(500*time.Microsecond))
}

// unpark gives a parked target's permits back if its time has come, and
// reports whether it did.
func (c *capState) unpark(e *balance.Endpoint, now int64) bool {
	if c.held == 0 || now < c.parkUntil.Load() {
		return false
	}
	e.ReleasePermits(c.held)
	c.held = 0
	c.parkUntil.Store(0)
	c.revive = true
	// A refusal answers in well under an eighth of a latency; the probe's
	// success takes a whole one. No refusal by then means the target
	// takes work again.
	c.reviveAt.Store(now + c.reviveAfter())
	return true
}

// reviveAfter is how long a probe of a parked target goes unrefused
// before the target counts as back: four of its refusals' round trips
// (they measure how fast a refusal answers, on this machine, now), and
// at most an eighth of a latency, the bound before refusals were timed.
// A return found 6 ms sooner is 6 ms less of the queue standing while
// the provider has its permits again.
func (c *capState) reviveAfter() int64 {
	h := max(c.lat.Load()/8, int64(time.Millisecond))
	if c.refuseLat > 0 {
		h = min(h, max(4*c.refuseLat, int64(200*time.Microsecond)))
	}
	return h
}

// revived handles a target that came back: the first success since an
// unpark, or no refusal of the probe for an eighth of a latency. The limit
// jumps back to the highest it reached before the target went down (a
// dead target walked its limit down to min_limit on the way) and probes
// on from there at the quick pace. An overshoot costs a burst of fast
// rejections, each taking one permit off; an idle permit costs a whole
// latency of work. Jumping halfway, as before, left a provider that
// flaps between all its permits and none 3 % below the sprayers on
// bench/contest's flap scenario; the full jump closed that to 0.3 %.
func (c *capState) revived(e *balance.Endpoint, now int64, cfg Settings) {
	c.reviveAt.Store(0)
	if !c.revive {
		return
	}
	c.revive = false
	old := c.limit
	c.limit = max(c.limit, math.Min(cfg.MaxLimit, c.peak))
	c.raised = c.limit - old
	c.peak, c.step = 0, 2
	c.probeAt = now + max(c.lat.Load(), int64(time.Millisecond))/4
	c.publish(e)
	e.Reopen() // the requests it refused while down may come back
}
