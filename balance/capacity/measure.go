package capacity

import (
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// staleAfter is how many of its mean latencies an idle target's latency
// sample is trusted for picking.
const staleAfter = 16

// measure: a target with a free permit, at least littleBusy picks in
// flight and measureFrom successes behind its mean, that picks have
// passed over for a quarter of its mean, is draining picks
// sent before, and their latencies are old news. Its mean climbs as it
// drains (the long requests come back last), and so does Little's law
// over a window of them. On bench/contest's swap, the provider that
// turned fast showed 150-235 ms against its 20 ms for about 200 ms after
// each swap, and held 10-15 of its 30 permits while the other filled to
// 90. The next pick there is ranked first, at most once per two means:
// its answer, under half the mean, replaces the mean (within a quarter
// of it, as for a stale target), and the outcomes of picks sent before
// it no longer move the mean (freshFrom), nor does Little's law rank the
// target during the trial that follows. A refused measurement (it still
// holds more of the old load than it has permits) re-arms at once.
//
// A target that one re-measuring sample ranks faster than it was is
// ranked by that sample for trialFrom picks in flight (measureTrial for
// a busy target's measure, which has proved room: a draining target
// refuses it otherwise), one more per success after it, until trialTo;
// past those, by its mean from before. Picks in flight count those sent
// since the sample (fresh), not the old ones a busy target drains.
// Slow start for the ranking: its own next outcomes judge the sample
// before the load follows it. An exponential draw is below a third of
// its mean more than one time in four: on bench/contest's underload a
// 30 ms provider whose re-measuring pick drew a short time ranked ahead
// of the 10 ms one and took 34 of the 40 connections until its mean
// caught up, about 100 ms, every few seconds. One that really got faster
// doubles its picks each round trip and is past the cap within five of
// them. Only the rank changes: a target past its trial picks still takes
// a pick that no other target has room for, so the cap never makes a
// caller wait (picks held for minutes, as WebSockets are, would otherwise
// keep it capped).
const (
	trialFrom    = 2
	measureTrial = 8
	trialTo      = 2 + littleN
	// measureFrom is the successes a target's mean must have seen
	// before measure judges it: the first to come back are the short
	// ones, and a mean of 0.3 ms for a 100 ms target made a quarter of it
	// pass between any two picks, and its measurements ranked it first.
	measureFrom = 2 * littleN
)

// freedGrain is the precision of capState.freed, far below the quarter
// of a mean that measure compares it with. Pick stamps picked only after
// an outcome stamped freed, and an outcome stamps freed only freedGrain
// after that: a clock read and a shared write per pick and per outcome
// would cost every pick for the few that measure.
const freedGrain = int64(100 * time.Microsecond)

// Little's law windows: successes per window, the least in-flight each
// outcome must see, and the ratio to the success-latency mean past which
// the window ranks the target.
const (
	littleN    = 32
	littleBusy = 4
	littleSlow = 1.5
	littleKeep = 4 // a verdict holds this many of the longer of W and the mean
)

// little estimates the target's time per request by Little's law over
// windows of littleN successes: W = L / λ, the in-flight integrated over
// the window's time (between two outcomes, the count the later one saw
// just before it ended) over the successes in it. The
// success-latency mean lags a change by more than its alpha: after a
// slowdown the first outcomes are the requests that drew short times,
// while the long ones are still in flight and in no sample; after a
// speed-up the requests the target is still draining are the long ones
// (one in flight at the change has, on average, a whole old mean still to
// go). Little's law counts the picks still out through the in-flight:
// picks that do not come back at the rate the mean promises show at once,
// and so do picks that come back faster. When the roles of bench/contest's
// swap providers change, the one that turned slow kept a mean of 40-70 ms
// for 200 ms where its requests took 100, the one that turned fast showed
// 150-215 ms where they took 20, and it got only the spill-over until
// 300-350 ms after the swap; p2c, blind to latency, was 1.2 % ahead.
//
// Only successes count as departures: a refusal or a fast failure would
// make a target that fails look quick (the rule for the mean too); a slow
// failure stays in the in-flight and makes it look slower. A W above
// littleSlow times the mean, or below the mean over littleSlow, ranks the
// target (Pick) while it has picks in flight, until the next window says
// otherwise or littleKeep of its times have passed; closer, the mean
// ranks alone, so the noise of 32 exponential samples (about 18 %)
// rarely reorders targets. Only windows whose every outcome saw
// littleBusy picks in flight count: where picks arrive late in the gaps
// between outcomes, the count is high by up to one pick, 25 % at 4 in
// flight, inside the margin of littleSlow.
func (c *capState) little(o balance.Outcome) {
	l := o.InFlight - c.held
	if l < littleBusy {
		c.lwLast = 0
		c.littleLat.Store(0)
		return
	}
	if c.lwLast == 0 {
		// The window opens at an outcome and counts those after it.
		c.lwLast, c.lwL, c.lwN = o.Now, 0, 0
		return
	}
	// In flight since the last outcome: what this one saw. The last one
	// left one fewer, but a closed loop refills a freed permit within a
	// turnaround, so the count sits at this level for most of the gap.
	c.lwL += float64(l) * float64(o.Now-c.lwLast)
	c.lwLast = o.Now
	if o.Err != nil {
		return
	}
	if c.lwN++; c.lwN < littleN {
		return
	}
	w := c.lwL / littleN
	c.lwLast = 0
	if mean := float64(c.lat.Load()); mean > 0 && (w > littleSlow*mean || w*littleSlow < mean) {
		c.littleLat.Store(int64(w))
		// A verdict no later window confirms expires: a target ranked
		// slow gets few picks and so few outcomes, and picks that stay
		// out for minutes (a WebSocket holds its pick while it is open)
		// would otherwise keep it ranked by them.
		c.littleTil.Store(o.Now + littleKeep*int64(max(w, mean)))
	} else {
		c.littleLat.Store(0)
	}
}
