package capacity

import (
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Observe feeds one outcome to the target's learner.
func (p *picker) Observe(e *balance.Endpoint, o balance.Outcome) {
	c := capacityOf(e)
	c.answered(o)
	if o.Class != balance.ClientGone && !c.oldTimeout(o) {
		// Refusals are the limit's to learn from (reject), not the rank's.
		failed := o.Class == balance.Failed
		c.fail.Observe(failed, o.Now, o.Sent())
		if failed && fastFailure(o.Latency, c.lat.Load()) {
			// Counted twice: a target that starts answering at once with
			// 500s still has the successes of the requests sent before
			// in flight, and with each failure weighed as one success
			// the share hovered just under half while every permit
			// those successes freed went to a fast failure (about 40
			// errors a gateway on bench/contest's fast500).
			c.fail.Observe(true, o.Now, o.Sent())
		}
	}
	lat := int64(o.Latency)
	learn := e.MaxConcurrency() == 0
	sent := o.Now - lat
	ff := c.freshFrom.Load()
	fresh := ff == 0 || sent >= ff
	if fresh && c.trial.Load() != 0 && c.fresh.Add(-1) < 0 {
		c.fresh.Store(0)
	}
	if pk := c.picked.Load(); c.freed.Load() <= pk && o.Now-pk >= freedGrain {
		c.freed.Store(o.Now) // the first outcome since the stamped pick, to freedGrain
	}
	// The first outcome of a pick sent since the measuring one claims
	// the measurement (outcomes run concurrently; one sample each).
	m := c.measure.Load()
	measured := sent >= m && c.measuring.Load() && c.measuring.CompareAndSwap(true, false)
	if measured && o.Err != nil {
		// Refused or failed (a target that turned fast may still hold
		// more of the old load than it now has permits): the next pass
		// over it measures again.
		c.measure.Store(0)
	}
	if o.Err == nil && lat > 0 {
		// alpha 1/16: exponential service times are noisy, and a stage
		// change still shows within a few dozen outcomes. A sample that
		// ends a stale stretch (the re-measurement Pick sends to an idle
		// target) replaces the mean, the old one saying nothing of now,
		// but within a quarter and twice the old mean: it is one sample.
		// Taken whole, a short draw from a slow target ranked it first
		// and the load herded there until its windows said otherwise
		// (100-200 ms, every few seconds on bench/contest's underload),
		// and a long draw from an idle target that had turned fast left
		// it unmeasured for seconds (its next re-measurement comes
		// staleAfter of the new mean later).
		old := c.lat.Load()
		if old != 0 {
			// The spread of the latencies, for silenced: EWMA of the
			// distance from the mean, alpha 1/16.
			d := lat - old
			if d < 0 {
				d = -d
			}
			dv := c.dev.Load()
			c.dev.Store(dv + (d-dv)/16)
		}
		if old == 0 {
			c.lat.Store(lat)
		} else if measured && lat < old/2 || o.Now-c.seen.Load() > staleAfter*old {
			c.lat.Store(min(max(lat, old/4), 2*old))
			c.freshFrom.Store(sent)
			if lat < old {
				c.fresh.Store(0)
				c.trialLat.Store(old)
				if measured {
					c.trial.Store(measureTrial)
				} else {
					c.trial.Store(trialFrom)
				}
			}
		} else if fresh {
			// A pick sent before the last re-measuring one reports the
			// state that sample replaced (a draining target's old
			// requests are the long ones, and would pull the mean back
			// to the old rate): it does not move the mean.
			c.lat.Store(old + (lat-old)/16)
			if t := c.trial.Load(); t+1 >= trialTo {
				c.trial.Store(0)
			} else if t != 0 {
				c.trial.Store(t + 1)
			}
		}
		c.seen.Store(o.Now)
		if sent > c.okSent.Load() {
			c.okSent.Store(sent) // outcomes run concurrently: close enough
		}
		if c.successes.Load() < measureFrom {
			c.successes.Add(1)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.little(o)
	if !learn || c.limit == 0 {
		return // a configured limit, or not built by this strategy yet
	}
	if o.Err != nil {
		if o.Class == balance.Refused {
			c.reject(e, o, p.cfg)
		}
		return
	}
	if lat <= 0 {
		return
	}
	if c.run > 0 && o.Now-lat >= c.runFrom {
		// A pick sent after the run's first refused one got a permit:
		// the target takes work again.
		c.run, c.runFrom = 0, 0
	}
	if c.lastReject != 0 && o.Now-c.lastReject < int64(rejectMemory) {
		c.probe(e, o, p.cfg)
		return
	}
	if float64(o.InFlight) > c.limit+1 {
		// Still draining down to a lowered limit: what we see now is the
		// old load's latency, and so is the next round trip's.
		c.quietUntil = max(c.quietUntil, o.Now+c.lat.Load())
	}
	if o.Now < c.quietUntil {
		return
	}
	l := o.InFlight - c.held
	if c.winStart == 0 {
		c.winStart = o.Now
	} else {
		c.winL += float64(l) * float64(o.Now-c.winLast)
	}
	c.winIdle = c.winIdle || l < littleBusy
	c.winLast = o.Now
	c.n++
	c.sum += float64(lat)
	if float64(o.InFlight) >= c.limit*0.9 || o.InFlight+1 >= int64(c.limit) {
		c.sat++
	}
	base := c.baseline
	if base == 0 {
		base = float64(c.lat.Load())
	}
	el := float64(o.Now - c.winStart)
	if (c.n >= 32 && el >= base/2) || (c.n > 0 && el >= 8*base) {
		c.closeWindow(e, o.Now, p.cfg)
	}
}

// fastFailure reports whether a failure took under a quarter of the
// target's mean success latency: an answer without the work, a target
// failing fast rather than a slow request that broke.
func fastFailure(lat time.Duration, mean int64) bool {
	return mean > 0 && int64(lat) < mean/4
}

// oldTimeout reports whether o is a timeout that says nothing new of the
// target, and is not counted in its failure share:
//
//   - a timeout of a pick sent before one that has since succeeded: the
//     target answers again. Counted, the trials that a black hole
//     swallowed came back as failures a client's timeout after it had
//     returned, and held it back another FailureHalfLife
//     (bench/contest's blackhole: its 60 permits idle 0.9 s after it
//     came back);
//   - a timeout of a target already held back for failing with nothing
//     succeeding since (untried): a trial it swallowed, or a request sent
//     before it was held. Counted, it restarted the share's halving a
//     client's timeout after the trial went out: one trial every two
//     seconds.
func (c *capState) oldTimeout(o balance.Outcome) bool {
	if !o.TimedOut() {
		return false
	}
	ok := c.okSent.Load()
	return ok != 0 && o.Sent() < ok || c.untried()
}
