package capacity

import (
	"math"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// capTie is the latency ratio within which two targets tie in Pick.
const capTie = 1 + 1.0/16

// failHeldBack is the share of successes below which a target is held
// back while another could serve (Pick).
const failHeldBack = 0.5

// trialEvery is how many mean latencies a tripped target's one trial
// pick may go unanswered before another is sent (trialOut).
const trialEvery = 4

// untried reports whether the target was failing most of what it got
// (FailureShare.Tripped) and nothing has succeeded there since its last
// failure.
func (c *capState) untried() bool {
	return c.fail.Failing() && c.fail.Tripped() && c.seen.Load() < c.fail.LastFailure()
}

// trialOut reports whether an untried target already has its trial in
// flight: it is then held back like a failing one. When its failure share
// has halved enough to be picked again, such a target takes one pick at a
// time until one succeeds, as a circuit breaker's half-open state does,
// and another only once the last has been out trialEvery latencies. A
// target that fails by silence (a black hole) answers a burst with
// nothing: the burst the halving let through, 30 picks, sat there for
// the callers' whole timeout on bench/contest's blackhole, and the
// failures it ended with held the target back another second after it
// had come back.
func (c *capState) trialOut(e *balance.Endpoint, now int64) bool {
	if e.InFlight() == 0 {
		return false
	}
	every := trialEvery * max(c.lat.Load(), int64(time.Millisecond))
	return now-c.trialSent.Load() < every
}

// unlimitedFree stands for the free permits of a target without a limit.
const unlimitedFree = 1 << 20

func (p *picker) Pick(info balance.PickInfo) *balance.Endpoint {
	n := len(p.eps)
	if n == 0 {
		return nil
	}
	var best *balance.Endpoint
	var bestRate float64
	var bestFree int64
	bestJ, bestMeasure := 0, false
	var now int64   // read only when a target needs it
	var freed int64 // permits that unparking or reviving made free here
	var probe *balance.Endpoint
	// A target failing most of what it gets (failHeldBack) is a pick
	// only when no other target could serve: with one that is merely
	// full, the request waits for its permit (in the queue) rather than
	// take a free permit where it would most likely fail. Its share
	// halves every FailureHalfLife without a failure, which lets it be
	// picked again, one trial at a time until one succeeds (trialOut).
	// With every target held back, the best ranked of them is picked.
	var held *balance.Endpoint
	var heldRate float64
	heldJ, serving := 0, false
	// A retry leaves a down target's probe to a first attempt: refused,
	// a first attempt still has its retry; a retry refused there has
	// none left, and answers the client with an error.
	retry := len(info.Exclude) > 0
	// Every target from a random place (so that ties do not all land on
	// the first), or above balance.ScanAll a sample of them, and all of
	// them if no target drawn had a free permit.
scan:
	for sc := balance.NewScan(&info, n); ; sc = balance.FullScan(&info, n) {
		sampled := sc.Sampled()
		for sc.More() {
			j := sc.Next()
			e := p.eps[j]
			if until := p.st[j].parkUntil.Load(); until != 0 {
				// Before Usable: a parked target has no free permit.
				if retry {
					continue
				}
				if now == 0 {
					now = info.Now()
				}
				if now >= until {
					c := p.st[j]
					c.mu.Lock()
					held := c.held
					unparked := c.unpark(e, now)
					c.mu.Unlock()
					if unparked {
						freed += held
					}
					if unparked && info.Usable(e) {
						// The pick that ends the park is the probe: left
						// free, the permit went to whichever pick came
						// next, a retry's fallback included.
						probe = e
						break scan
					}
				}
			}
			if at := p.st[j].reviveAt.Load(); at != 0 {
				if now == 0 {
					now = info.Now()
				}
				if now >= at {
					c := p.st[j]
					c.mu.Lock()
					before := e.Limit()
					c.revived(e, now, p.cfg)
					freed += max(e.Limit()-before, 0)
					c.mu.Unlock()
				}
				if retry && p.st[j].reviveAt.Load() != 0 {
					continue // its probe is out, or a first attempt's to take
				}
			}
			usable := info.Usable(e)
			hard, trialNow := false, false
			if (usable || !serving) && p.st[j].fail.Failing() {
				if now == 0 {
					now = info.Now()
				}
				// Held back until its failure share has halved, then, if
				// nothing has succeeded there since its last failure, one
				// trial pick at a time (trialOut).
				c := p.st[j]
				hard = c.fail.OK(now) < failHeldBack || (usable && c.untried() && c.trialOut(e, now))
				// A trial that may go now goes first, for a first
				// attempt: with the other targets full, picks come from
				// waiters woken for their freed permits, and every one
				// went back to those, so a target that had come back got
				// its trial only by chance.
				trialNow = !hard && usable && !retry && c.untried()
			}
			// Serving: it has a free permit, or requests in flight whose
			// end frees one and wakes a waiter. A parked target's permits
			// are held, not in flight: nothing would wake the queue.
			if !serving && !hard && (usable || (e.InFlight() > 0 && p.st[j].parkUntil.Load() == 0 && !info.Excluded(e))) {
				serving = true
			}
			if !usable {
				continue
			}
			if e.InFlight() >= 4 && p.st[j].silenced(e, &info, &now) {
				continue // (silenced) its in-flight keeps it serving
			}
			free := e.Remaining()
			if free > unlimitedFree {
				free = unlimitedFree
			}
			lat := p.st[j].lat.Load()
			measure := false
			failing := p.st[j].fail.Failing()
			if lat <= 0 {
				lat = int64(time.Millisecond) // unmeasured: cheap, so it gets measured
			} else if e.InFlight() == 0 {
				// An idle target's latency is as old as its last success: a
				// provider that got faster while the picker ranked it slow
				// would never be tried again. Past staleAfter latencies,
				// one pick at a time measures it again.
				if now == 0 {
					now = info.Now()
				}
				if now-p.st[j].seen.Load() > staleAfter*lat {
					lat = int64(time.Millisecond)
				}
			} else {
				c := p.st[j]
				// Passed over: picks have gone elsewhere for a quarter of
				// its mean since its first outcome after its last pick
				// (from then on it had a permit back, or drained a load it
				// had more of than permits); not merely no pick for that
				// long, which a full target sees between two completions.
				if fr := c.freed.Load(); !retry && free > 0 && e.InFlight() >= littleBusy && c.trial.Load() == 0 &&
					c.successes.Load() >= measureFrom && fr > c.picked.Load() {
					if now == 0 {
						now = info.Now()
					}
					if now-fr > lat/4 && (c.measure.Load() == 0 || now-c.measure.Load() > 2*lat) {
						lat, measure = int64(time.Millisecond), true // (measure)
					}
				}
				if w := c.littleLat.Load(); !measure && w > 0 && c.trial.Load() == 0 {
					// The mean lags a change that Little's law shows
					// (little). Not during a trial: a busy target's window
					// still counts the old picks that the trial's sample
					// has outdated.
					if now == 0 {
						now = info.Now()
					}
					if now < c.littleTil.Load() {
						lat = w
					}
				}
			}
			if t := p.st[j].trial.Load(); !measure && t != 0 && p.st[j].fresh.Load() >= t {
				// One sample ranks it this fast: past the picks that sample
				// earned, its mean from before ranks it (trialFrom).
				lat = max(lat, p.st[j].trialLat.Load())
			}
			// Latency first: a permit on a faster target completes sooner,
			// and in a closed loop every completion is the next request, so
			// the load goes where it is served fastest and spills to slower
			// targets only when the faster ones' limits are taken. Latencies
			// within a sixteenth of each other are a tie (exponential service
			// times make the means of equal targets differ by that much), and
			// a tie goes to the target with more free permits, which spreads
			// equal targets by their capacity.
			rate := info.Weight(e) / float64(lat)
			if failing {
				// Served per unit of time: fast failures are not service.
				if now == 0 {
					now = info.Now()
				}
				rate *= p.st[j].fail.OK(now)
			}
			if trialNow {
				rate = math.Inf(1)
			}
			if hard {
				if held == nil || rate > heldRate {
					held, heldRate, heldJ = e, rate, j
				}
				continue
			}
			if best == nil || rate > bestRate*capTie || (rate*capTie >= bestRate && free > bestFree) {
				best, bestRate, bestFree, bestJ, bestMeasure = e, rate, free, j, measure
			}
		}
		if best != nil || !sampled {
			break
		}
	}
	if best == nil && held != nil && !serving {
		best, bestJ, bestMeasure = held, heldJ, false // every target fails: the best ranked of them
	}
	if probe != nil {
		best = probe
		freed-- // the permit this pick takes
	} else if best != nil {
		// What measure reads: when each target was last picked, and
		// whether this pick is the measurement.
		c := p.st[bestJ]
		if c.picked.Load() <= c.freed.Load() {
			// The first pick since an outcome stamped freed: not every
			// pick (a clock read and a shared write each).
			if now == 0 {
				now = info.Now()
			}
			c.picked.Store(now)
		}
		if bestMeasure {
			c.measure.Store(now)
			c.measuring.Store(true)
		}
		if c.trial.Load() != 0 {
			c.fresh.Add(1)
		}
		if c.untried() {
			if now == 0 {
				now = info.Now()
			}
			c.trialSent.Store(now)
		}
	}
	if freed > 0 {
		// Permits that came back here, not through a pick's end: wake
		// waiters for them as a release would (a revived target's limit
		// jumps by tens of permits, which would otherwise wait for
		// releases elsewhere to wake one waiter each).
		info.Wake(freed)
	}
	if best == nil && len(info.Exclude) > 0 {
		return p.retryProbe(info)
	}
	return best
}
