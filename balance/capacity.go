package balance

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// capacity: backpressure as in the 2019 Tianchi adaptive load-balancing
// contest. Each target's permits are its max concurrency; a pick takes a
// permit and its outcome returns it. The pick goes to the fastest target
// (lowest mean success latency over weight) that has a free permit,
// latencies within a sixteenth counting as a tie that the most free
// permits break: in a closed loop each completion brings the next
// request, so a permit on a faster target serves more of them, and
// ranking by free permits per latency instead spread light load over
// slow targets by their size. A busy target whose time per request by
// Little's law (in-flight over success rate, a window of 32 successes)
// is above 1.5 times its mean or below two thirds of it is ranked by that
// instead, for a few latencies: the mean of finished requests lags a
// change by hundreds of milliseconds (little). Neither says what a pick
// sent now would cost at a target that still drains picks sent before a
// change: those that come back last are the long ones (the requests in
// flight at a given moment average twice the mean), so a provider that
// turned fast looks slower the more it drains. Such a target, with room
// and passed over for a quarter of its mean, gets one pick ranked first
// (measure), and a short answer ranks it as a stale target's does. When
// no permit is free, Wait blocks until one returns.
//
// A target without MaxConcurrency gets a learned limit instead, because a
// balancer often cannot read its upstreams' settings (the contest forbade
// it). The learner has two regimes, per target:
//
//   - a target that rejects (an outcome whose error is a rejection, see
//     IsRejection, in the last 30s) says itself when it is full, and the
//     limit tracks its permits exactly. A rejection proves the target had
//     fewer permits than our picks in flight, so it takes one permit off
//     the limit, and cuts it to our other picks in flight when those are
//     fewer (never below half): an overshoot of k answers with k
//     rejections and lands on the last limit that fitted, and a capacity
//     drop answers
//     every pick sent while the old load drains, which walks the limit
//     down to the new permits. Only when more refusals come in a row than
//     the last raise explains (refusals of picks already on their way
//     when the first came back do not count: they are the same
//     overshoot), and no pick sent since the first of them
//     got a permit (the target refuses everything new while the old load
//     drains: its capacity fell far), is the limit halved, again each
//     time the run doubles, so a provider that goes down draws a score
//     of refusals instead of one per permit it had; the probes that
//     repair such an undershoot keep the quick pace until a success ends
//     the run. While the target stays full and silent the limit is held
//     probe_interval mean latencies (queued_probe_interval while callers
//     wait in the queue: then a found permit serves a waiter at once),
//     then probed one permit up; a probe that draws no rejection found a
//     permit, and the next, twice as big, follows once it has gone
//     unrefused for four refusal round trips (probe). The limit
//     follows the permits as the oracle does, at the cost of one rejection
//     per failed probe, a few per second. A target that still refuses at
//     min_limit is parked: the learner holds its permits for a quarter of
//     a mean latency (a sixteenth while callers wait in the queue), and
//     the first pick after that, never a retry, probes it (park), so a
//     dead target costs four (sixteen) rejections per latency, not one
//     per rejection round trip; when a probe draws no refusal within
//     four refusal round trips (at most an eighth of a latency) the limit
//     jumps back to the highest it reached before the target went down
//     (revived), and waiting retries that it refused may take it again
//     (Endpoint.Reopen). A retry
//     that finds every other target at its learned limit probes one of
//     them a permit over it (retryProbe): a caller that does not wait
//     would answer the client with the refusal.
//   - a target that never rejected grows by slow start (doubling per
//     window of successes while saturated; BIC's climb towards the last
//     ceiling once one is known) and is bounded by its latency gradient
//     (as Netflix's Gradient2): a window's time per request (by
//     Little's law while busy: the mean of the latencies that came back
//     would be the short ones while the load ramps)
//     against a baseline measured at a limit known to be fine. A window
//     more than tolerance times slower, after the limit grew past that
//     known-fine limit, means our load queues at the target: the limit
//     shrinks by the ratio (at most by half). Slower at a known-fine limit
//     for five windows in a row means the target itself slowed: the
//     baseline moves. A window opens only after the last change's round
//     trip, so growth is clocked by feedback. A target that is not
//     saturated keeps its limit: there is no evidence to learn from, and
//     no need.
//
// Latencies used for picking are success latencies only: a rejection
// answers fast and must not make a full target look quick. An idle
// target's sample goes stale after staleAfter of its latencies, and one
// pick at a time then measures it again; that one sample moves the mean
// within a quarter and twice of it, and if it ranks the target faster
// than before, only for a few picks at first (trialFrom).
//
// Its settings (Options.Settings, named numbers) tune the learner: initial_limit (default 20), min_limit
// (1), max_limit (4096), tolerance (2: the latency ratio read as queueing),
// probe_interval (4: mean success latencies a full, rejecting target
// holds its limit before probing one permit more) and
// queued_probe_interval (1: the same while callers wait in the queue).
type capacityStrategy struct{ cfg capacityConfig }

// capacityConfig holds the learner's knobs. The strategy's settings may set
// them under the keys in capacityParams.
type capacityConfig struct {
	initial   float64 // first learned limit
	min, max  float64 // bounds of a learned limit
	tolerance float64 // window latency above tolerance x baseline is queueing
	probe     float64 // mean latencies at a steady limit before a probe
	queued    float64 // the same while callers wait in the queue
}

var capacityParams = []string{"initial_limit", "min_limit", "max_limit", "tolerance", "probe_interval", "queued_probe_interval"}

func newCapacity(set Settings) (Strategy, error) {
	c := capacityConfig{initial: 20, min: 1, max: 4096, tolerance: 2, probe: 4, queued: 1}
	params, err := decodeNumbers(set, capacityParams)
	if err != nil {
		return nil, err
	}
	for _, k := range capacityParams {
		v, ok := params[k]
		if !ok {
			continue
		}
		switch k {
		case "initial_limit":
			c.initial = v
		case "min_limit":
			c.min = v
		case "max_limit":
			c.max = v
		case "tolerance":
			c.tolerance = v
		case "probe_interval":
			c.probe = v
		case "queued_probe_interval":
			c.queued = v
		}
	}
	switch {
	case c.min < 1:
		return nil, settingErr("min_limit", "%v is below 1", c.min)
	case c.max < c.min:
		return nil, settingErr("max_limit", "%v is below min_limit %v", c.max, c.min)
	case c.initial < c.min || c.initial > c.max:
		return nil, settingErr("initial_limit", "%v is outside [%v, %v]", c.initial, c.min, c.max)
	case c.tolerance <= 1:
		return nil, settingErr("tolerance", "%v must be above 1", c.tolerance)
	case c.probe <= 0 || c.probe > 1000:
		return nil, settingErr("probe_interval", "%v is outside (0, 1000]", c.probe)
	case c.queued <= 0 || c.queued > 1000:
		return nil, settingErr("queued_probe_interval", "%v is outside (0, 1000]", c.queued)
	}
	return capacityStrategy{cfg: c}, nil
}

// ErrRejected is what a caller reports (wrapped or not) when a target
// refused a request for lack of capacity (HTTP 503 or 429, a full pool).
// The capacity strategy cuts the target's learned limit on it.
var ErrRejected = errors.New("balance: target rejected the request (no permit)")

// IsRejection reports whether err says a target had no capacity: it wraps
// ErrRejected, or has a method Rejected() bool that returns true. The
// error's text is not read: a refusal is a type (see Class).
func IsRejection(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrRejected) {
		return true
	}
	var r interface{ Rejected() bool }
	return errors.As(err, &r) && r.Rejected()
}

func (s capacityStrategy) Build(eps []*Endpoint) Picker {
	p := &capacityPicker{eps: eps, st: make([]*capState, len(eps)), cfg: s.cfg}
	for i, e := range eps {
		c := capacityOf(e)
		p.st[i] = c
		c.mu.Lock()
		c.unpark(e, math.MaxInt64) // a new set starts with every permit usable
		c.revive = false
		c.reviveAt.Store(0)
		c.mu.Unlock()
		if e.t.MaxConcurrency == 0 {
			c.mu.Lock()
			if c.limit == 0 || e.Limit() == 0 {
				// New, or its configured limit was just removed: learn
				// afresh from the initial limit.
				c.limit, c.ceiling, c.step, c.probeAt = s.cfg.initial, 0, 1, 0
				c.lastReject, c.warm = 0, false
				c.baseline, c.baseLimit, c.slow = 0, 0, 0
				c.resetWindow()
				c.quietUntil = 0
			}
			e.SetLimit(int64(math.Ceil(c.limit)))
			c.mu.Unlock()
		}
	}
	return p
}

// capacityOf returns e's learner state, making it on first use. It lives in
// the endpoint's state, so it survives updates of the set.
func capacityOf(e *Endpoint) *capState {
	if c, ok := e.Ext().(*capState); ok {
		return c
	}
	c, ok := e.InitExt(func() any { return &capState{} }).(*capState)
	if !ok {
		// Another strategy's value (the balancer was rebuilt with a
		// different strategy): replace it.
		c = &capState{}
		e.SetExt(c)
	}
	return c
}

// capState is one target's learner. lat is read by picks without a lock;
// the rest is guarded by mu and only touched by Observe and Build.
type capState struct {
	lat       atomic.Int64 // EWMA of success latency, ns; 0 = no sample yet
	parkUntil atomic.Int64 // clock at which a parked target's permit comes back; 0 = not parked
	reviveAt  atomic.Int64 // unparked: clock at which an unrefused probe means the target is back; 0 = none
	quietTill atomic.Int64 // no retry probe before this clock (the target refused lately)
	seen      atomic.Int64 // clock of the last success (when lat was last measured)
	littleLat atomic.Int64 // the time per request Little's law found, when far from lat; 0 = none
	littleTil atomic.Int64 // clock until which littleLat ranks the target
	trial     atomic.Int64 // picks it holds ranked by one faster sample (trialFrom); 0 = none
	trialLat  atomic.Int64 // its mean before that sample: its rank past trial picks
	fresh     atomic.Int64 // picks in flight sent since freshFrom, counted while trial is on
	freshFrom atomic.Int64 // send clock of the last re-measuring sample: earlier picks' latencies are older news
	picked    atomic.Int64 // clock of its last pick
	freed     atomic.Int64 // clock of its first outcome since then
	measure   atomic.Int64 // clock of the last re-measuring pick of a busy target
	measuring atomic.Bool  // that pick's outcome has not come back
	successes atomic.Int64 // successes seen, counted up to measureFrom
	refuseLat int64        // EWMA of refusal latencies, ns (under mu); 0 = none yet

	mu         sync.Mutex
	limit      float64 // learned limit; 0 = not initialised
	ceiling    float64 // in-flight at which rejections last appeared; 0 = none
	step       float64 // probe step past the ceiling
	baseline   float64 // latency of windows without queueing, ns
	baseLimit  float64 // a limit known not to queue at baseline latency
	slow       int     // windows in a row too slow at a known-fine limit
	lastReject int64   // clock of the last rejection; 0 = none
	held       int64   // permits the learner holds while the target is parked (see park)
	peak       float64 // highest limit since the last revival: where a revived target is probed back to
	revive     bool    // unparked: the next success means the target came back
	raised     float64 // size of the last raise: the rejections an overshoot may draw
	run        int     // rejections since the start of runFrom's pick, with no success of a later pick
	runFrom    int64   // start of the first refused pick of the run
	runSeen    int64   // clock when the run's first rejection came back
	nextCut    int     // run length at which the limit is halved
	cutAt      int64   // clock of the last halving
	probeAt    int64   // a target that rejects: probe at this clock if still full; 0 = not armed
	warm       bool    // the first window has passed
	quietUntil int64   // no window before this clock (the last change's round trip)

	// Little's-law window (little), for every target.
	lwLast int64   // clock of its last outcome; 0 = no window open
	lwN    int     // successes
	lwL    float64 // in-flight over time since it opened, ns

	// Current window.
	winStart int64
	n        int     // successes
	sum      float64 // their latencies, ns
	sat      int     // successes that found the target at its limit
	rejects  int
	winLast  int64   // clock of its last success
	winL     float64 // in-flight over time since its first success, ns
	winIdle  bool    // a success saw fewer than littleBusy in flight
}

type capacityPicker struct {
	eps []*Endpoint
	st  []*capState
	cfg capacityConfig
}

// rejectMemory is how long after its last rejection a target counts as
// one that rejects (and is not judged by its latency).
const rejectMemory = 30 * time.Second

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

// capTie is the latency ratio within which two targets tie in Pick.
const capTie = 1 + 1.0/16

// unlimitedFree stands for the free permits of a target without a limit.
const unlimitedFree = 1 << 20

func (p *capacityPicker) Pick(info PickInfo) *Endpoint {
	n := len(p.eps)
	if n == 0 {
		return nil
	}
	// Start at a random place so that ties do not all land on the first.
	off := 0
	if n > 1 {
		off = rand.IntN(n)
	}
	var best *Endpoint
	var bestRate float64
	var bestFree int64
	bestJ, bestMeasure := 0, false
	var now int64   // read only when a target needs it
	var freed int64 // permits that unparking or reviving made free here
	var probe *Endpoint
	// A retry leaves a down target's probe to a first attempt: refused,
	// a first attempt still has its retry; a retry refused there has
	// none left, and answers the client with an error.
	retry := len(info.Exclude) > 0
	for i := range n {
		j := i + off
		if j >= n {
			j -= n
		}
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
					break
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
		if !info.Usable(e) {
			continue
		}
		free := e.Remaining()
		if free > unlimitedFree {
			free = unlimitedFree
		}
		lat := p.st[j].lat.Load()
		measure := false
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
		if best == nil || rate > bestRate*capTie || (rate*capTie >= bestRate && free > bestFree) {
			best, bestRate, bestFree, bestJ, bestMeasure = e, rate, free, j, measure
		}
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
	}
	if freed > 0 && info.snap != nil {
		// Permits that came back here, not through a pick's end: wake
		// waiters for them as a release would (a revived target's limit
		// jumps by tens of permits, which would otherwise wait for
		// releases elsewhere to wake one waiter each).
		info.snap.b.wakeWaiters(freed)
	}
	if best == nil && len(info.Exclude) > 0 {
		return p.retryProbe(info)
	}
	return best
}

// retryProbe serves a retry (a pick that excludes the targets that just
// refused it) that finds every other target at its learned limit: it
// probes the one with the most learned capacity per latency, one permit
// over its limit. A caller that does not wait (the gateway's retry on an
// upstream without a queue) would answer the client with the refusal, and
// one that waits would queue behind every other waiter; probing instead
// turns it into a
// success when that target has permits we have not learned yet (a stage
// that just grew them, a provider that swapped roles), and costs nothing
// more when it has not: the probe's rejection takes the permit back off
// (reject). Targets with configured or parked limits, targets that
// refused within probe_interval latencies and targets retry-probed within
// the last latency are not probed.
func (p *capacityPicker) retryProbe(info PickInfo) *Endpoint {
	var best *Endpoint
	var bc *capState
	bestRate := -1.0
	now := info.Now()
	for j, e := range p.eps {
		parked := p.st[j].parkUntil.Load() != 0
		if isExcluded(&info, e) {
			if parked {
				// Refused by a target that is down: that says nothing
				// of the others' permits, and the retry waits for one
				// (a parked target's probes come every few refusal
				// round trips, and each refused probe's retry sent
				// over a full target's limit was a client error).
				return nil
			}
			continue
		}
		if e.t.MaxConcurrency != 0 || parked || now < p.st[j].quietTill.Load() {
			continue
		}
		lat := max(p.st[j].lat.Load(), int64(time.Millisecond))
		if rate := float64(e.Limit()) * info.Weight(e) / float64(lat); rate > bestRate {
			best, bc, bestRate = e, p.st[j], rate
		}
	}
	if best == nil {
		return nil
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.limit == 0 || bc.held != 0 || bc.limit >= p.cfg.max || now < bc.quietTill.Load() {
		return nil
	}
	// One retry probe per target per latency: its answer (a refusal is
	// back in far less) decides the next. Without this, a burst of
	// refusals elsewhere (a provider going down) sent a burst of retries
	// that each raised the limit by one before the first probe's answer,
	// and their refusals then halved a limit that had been exact.
	bc.quietTill.Store(now + max(bc.lat.Load(), int64(time.Millisecond)))
	bc.limit++
	bc.raised = 1
	bc.peak = max(bc.peak, bc.limit)
	bc.publish(best)
	return best
}

// Observe feeds one outcome to the target's learner.
func (p *capacityPicker) Observe(e *Endpoint, o Outcome) {
	c := capacityOf(e)
	lat := int64(o.Latency)
	learn := e.t.MaxConcurrency == 0
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
		if old := c.lat.Load(); old == 0 {
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
		if o.Class == Refused {
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
func (c *capState) little(o Outcome) {
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
func (c *capState) reject(e *Endpoint, o Outcome, cfg capacityConfig) {
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
	c.quietTill.Store(o.Now + int64(cfg.probe*float64(max(c.lat.Load(), int64(time.Millisecond)))))
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
	l := max(cfg.min, c.limit-1)
	if n := float64(o.InFlight - 1); n < l {
		// The target refused while it held at most our other picks in
		// flight, so its permits (for us) are no more than those. With
		// the limit above the in-flight, one off per refusal kept the
		// gap: each refusal freed the slot it took, the next pick took
		// it and was refused too, until the run was long enough to
		// halve. In-flight handled late after a stall can read low, so
		// it cuts no deeper than a halving would.
		l = max(cfg.min, n, math.Floor(c.limit/2))
	}
	if !inTransit && c.run >= c.nextCut {
		// More refusals in a row than the last raise can explain, and no
		// pick sent since the first of them got a permit: the target
		// refuses everything new while the old load drains (its
		// capacity fell far, or to nothing). One permit per refusal
		// would draw one refusal per pick the drain lets through; halve
		// instead, again each time the run doubles. An undershoot is
		// probed back up at the quick pace.
		l = max(cfg.min, math.Floor(c.limit/2))
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

// park takes a target at the lowest limit that still refuses out of use
// for a while: the learner holds its permits (they count in the target's
// in-flight, so no pick, not even the balancer's fallback to any free
// permit, sends to it). Without it a dead target at min_limit would draw
// one pick per rejection round trip, thousands of rejections a second.
// The first pick after the time takes the permits back (unpark) and is
// the probe. How long is parkFor's choice.
func (c *capState) park(e *Endpoint, now int64, waiting int) {
	if c.held != 0 {
		return
	}
	c.held = max(1, int64(math.Ceil(c.limit)))
	c.revive = false
	c.reviveAt.Store(0)
	e.s.inflight.Add(c.held)
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
func (c *capState) unpark(e *Endpoint, now int64) bool {
	if c.held == 0 || now < c.parkUntil.Load() {
		return false
	}
	e.s.inflight.Add(-c.held)
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
func (c *capState) revived(e *Endpoint, now int64, cfg capacityConfig) {
	c.reviveAt.Store(0)
	if !c.revive {
		return
	}
	c.revive = false
	old := c.limit
	c.limit = max(c.limit, math.Min(cfg.max, c.peak))
	c.raised = c.limit - old
	c.peak, c.step = 0, 2
	c.probeAt = now + max(c.lat.Load(), int64(time.Millisecond))/4
	c.publish(e)
	e.Reopen() // the requests it refused while down may come back
}

// probe handles a success on a target that rejects. While the target
// stays full (the outcome found every learned permit taken), the limit is
// held probe_interval mean latencies, then grows by one permit. A probe
// that draws no rejection within a quarter latency (a rejection answers
// in far less) found a permit: the next probe comes a quarter latency
// later and is twice as big (at most a quarter of the limit), so a stage
// that doubles the permits is found in a few latencies; the first
// rejection ends the run (reject). One probe that fails costs one
// rejection per probe_interval.
func (c *capState) probe(e *Endpoint, o Outcome, cfg capacityConfig) {
	if c.revive {
		c.revived(e, o.Now, cfg)
		return
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
	wait := int64(cfg.probe * float64(lat))
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
		wait = min(wait, int64(cfg.queued*float64(lat)))
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
	c.limit = min(cfg.max, c.limit+c.step)
	c.raised = c.step
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

// publish sets the endpoint's permits to the learned limit.
func (c *capState) publish(e *Endpoint) {
	if l := max(int64(math.Ceil(c.limit)), 1); e.Limit() != l {
		e.SetLimit(l)
	}
}

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

func (c *capState) closeWindow(e *Endpoint, now int64, cfg capacityConfig) {
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
		if avg <= cfg.tolerance*c.baseline {
			c.slow = 0
		}
		switch {
		case !c.warm:
			// The first window holds the first completions, the quick
			// ones: a biased sample. Let it pass.
			c.warm = true
		case c.baseline == 0:
			c.baseline, c.baseLimit = avg, c.limit
		case avg > cfg.tolerance*c.baseline && c.limit > c.baseLimit:
			// Latency rose past tolerance since we grew beyond a limit
			// known to be fine: our load queues at the target. Shrink by
			// the gradient, at most by half and not below that limit, and
			// remember where it hurt.
			g := max(0.5, cfg.tolerance*c.baseline/avg)
			c.ceiling = c.limit
			c.limit = max(cfg.min, c.baseLimit, math.Floor(c.limit*g))
			c.step = 1
			grow = false
		case avg > cfg.tolerance*c.baseline:
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
		c.limit = min(c.limit, cfg.max)
	}
	if math.Ceil(c.limit) != math.Ceil(old) {
		c.publish(e)
		c.changed(now)
	} else {
		c.resetWindow()
	}
}
