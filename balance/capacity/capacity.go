package capacity

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// strategy is capacity as a balance.Strategy: its settings, checked.
type strategy struct{ cfg Settings }

func (s strategy) Build(eps []*balance.Endpoint) balance.Picker {
	p := &picker{eps: eps, st: make([]*capState, len(eps)), cfg: s.cfg}
	for i, e := range eps {
		c := capacityOf(e)
		p.st[i] = c
		c.mu.Lock()
		c.unpark(e, math.MaxInt64) // a new set starts with every permit usable
		c.revive = false
		c.reviveAt.Store(0)
		c.mu.Unlock()
		if e.MaxConcurrency() == 0 {
			c.mu.Lock()
			if c.limit == 0 || e.Limit() == 0 {
				// New, or its configured limit was just removed: learn
				// afresh from the initial limit.
				c.limit, c.ceiling, c.step, c.probeAt = s.cfg.InitialLimit, 0, 1, 0
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
func capacityOf(e *balance.Endpoint) *capState {
	if c, ok := e.Ext().(*capState); ok {
		return c // every outcome asks: a plain type assertion, no generic call
	}
	return balance.StateOf[capState](e)
}

// capState is one target's learner. lat is read by picks without a lock;
// the rest is guarded by mu and only touched by Observe and Build.
type capState struct {
	lat       atomic.Int64         // EWMA of success latency, ns; 0 = no sample yet
	parkUntil atomic.Int64         // clock at which a parked target's permit comes back; 0 = not parked
	reviveAt  atomic.Int64         // unparked: clock at which an unrefused probe means the target is back; 0 = none
	quietTill atomic.Int64         // no retry probe before this clock (the target refused lately)
	seen      atomic.Int64         // clock of the last success (when lat was last measured)
	okSent    atomic.Int64         // send clock of the latest-sent pick that succeeded (oldTimeout)
	ansSeq    atomic.Uint64        // Seq of the latest pick the target answered (silenced)
	halfAt    atomic.Int64         // clock since which half of silenced's bound of picks is unanswered; 0 = not so
	dev       atomic.Int64         // EWMA of success latencies' distance from lat, ns (silenced)
	littleLat atomic.Int64         // the time per request Little's law found, when far from lat; 0 = none
	littleTil atomic.Int64         // clock until which littleLat ranks the target
	trial     atomic.Int64         // picks it holds ranked by one faster sample (trialFrom); 0 = none
	trialLat  atomic.Int64         // its mean before that sample: its rank past trial picks
	fresh     atomic.Int64         // picks in flight sent since freshFrom, counted while trial is on
	freshFrom atomic.Int64         // send clock of the last re-measuring sample: earlier picks' latencies are older news
	picked    atomic.Int64         // clock of its last pick
	freed     atomic.Int64         // clock of its first outcome since then
	measure   atomic.Int64         // clock of the last re-measuring pick of a busy target
	measuring atomic.Bool          // that pick's outcome has not come back
	successes atomic.Int64         // successes seen, counted up to measureFrom
	trialSent atomic.Int64         // clock of the last pick of a tripped target with no success since (pick's half-open)
	refuseLat int64                // EWMA of refusal latencies, ns (under mu); 0 = none yet
	fail      balance.FailureShare // failed outcomes' share: divides the rank (fast 500s are not fast service)

	mu            sync.Mutex
	limit         float64 // learned limit; 0 = not initialised
	ceiling       float64 // in-flight at which rejections last appeared; 0 = none
	step          float64 // probe step past the ceiling
	baseline      float64 // latency of windows without queueing, ns
	baseLimit     float64 // a limit known not to queue at baseline latency
	slow          int     // windows in a row too slow at a known-fine limit
	lastReject    int64   // clock of the last rejection; 0 = none
	held          int64   // permits the learner holds while the target is parked (see park)
	peak          float64 // highest limit since the last revival: where a revived target is probed back to
	revive        bool    // unparked: the next success means the target came back
	raised        float64 // size of the last raise: the rejections an overshoot may draw
	raisedAt      int64   // clock of the last probe's raise
	raiseAnswered bool    // a pick sent since raisedAt has succeeded: the next step may follow
	run           int     // rejections since the start of runFrom's pick, with no success of a later pick
	runFrom       int64   // start of the first refused pick of the run
	runSeen       int64   // clock when the run's first rejection came back
	nextCut       int     // run length at which the limit is halved
	cutAt         int64   // clock of the last halving
	probeAt       int64   // a target that rejects: probe at this clock if still full; 0 = not armed
	warm          bool    // the first window has passed
	quietUntil    int64   // no window before this clock (the last change's round trip)

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

type picker struct {
	eps []*balance.Endpoint
	st  []*capState
	cfg Settings
}

// publish sets the endpoint's permits to the learned limit.
func (c *capState) publish(e *balance.Endpoint) {
	if l := max(int64(math.Ceil(c.limit)), 1); e.Limit() != l {
		e.SetLimit(l)
	}
}
