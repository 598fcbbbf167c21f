package balance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// capacity: seed 004's backpressure. Each target's permits are its max
// concurrency; a pick takes a permit and its outcome returns it. The pick
// goes to the target with the most remaining capacity scaled by observed
// latency (Little's law: free permits / mean latency is the rate at which
// the target can still absorb work); when no permit is free, Wait blocks
// until one returns.
//
// A target without MaxConcurrency gets a learned limit instead, because a
// balancer often cannot read its upstreams' settings (the seed's contest
// forbade it). The learner combines three signals, per target:
//
//   - rejections: an outcome whose error is a rejection (see IsRejection)
//     means the target had no permit free. A few percent of rejections are
//     wanted: between a permit's release at the target and the next
//     request's arrival the target idles, and only a limit a little above
//     its permits covers that round trip (callers retry a rejection at
//     once). Over the last few hundred outcomes, more than 30% rejections
//     step the limit down by 3%, and more than 50%, or half the limit in a
//     row, mean the capacity dropped: the limit falls at once to 90% of
//     what was in flight.
//   - latency gradient (as Netflix's Gradient2), for targets that do not
//     reject (none in the last 30s): the mean success latency of a window
//     against a baseline measured at a limit known to be fine. A window
//     more than tolerance times slower, after the limit grew past that
//     known-fine limit, means our load queues at the target: the limit
//     shrinks by the ratio (at most by half). Slower at a known-fine limit
//     for five windows in a row means the target itself slowed: the
//     baseline moves.
//   - probing: while the target is saturated (the balancer keeps it at its
//     limit) and under 15% of its outcomes are rejections, the limit grows,
//     like TCP BIC: it doubles while no ceiling is known, climbs halfway to
//     the last ceiling per window, and past it grows by a step that doubles
//     every window. A window opens only after the last change's round trip
//     (half of it for a target that rejects), so growth is clocked by
//     feedback. A target that is not saturated keeps its limit: there is
//     no evidence to learn from, and no need. For a target that rejects,
//     two saturated windows in a row without a single rejection, at or
//     past the last ceiling, mean its permits grew: the limit then grows
//     by a quarter per window (whatever the long-run rejection share
//     still remembers) until a window sees a rejection. An idle permit
//     costs a whole service time of work; an overshoot costs fast
//     rejections that callers retry elsewhere.
//
// Latencies used for picking are success latencies only: a rejection
// answers fast and must not make a full target look quick.
//
// Options.Params tunes the learner: initial_limit (default 20), min_limit
// (1), max_limit (4096), tolerance (2: the latency ratio read as queueing)
// and backoff (0.9: the cut on a capacity drop).
type capacityStrategy struct{ cfg capacityConfig }

// capacityConfig holds the learner's knobs. Options.Params may set them
// under the keys in capacityParams.
type capacityConfig struct {
	initial   float64 // first learned limit
	min, max  float64 // bounds of a learned limit
	tolerance float64 // window latency above tolerance x baseline is queueing
	backoff   float64 // limit after a rejection: backoff x the in-flight then
}

var capacityParams = []string{"initial_limit", "min_limit", "max_limit", "tolerance", "backoff"}

func newCapacity(o Options) (Strategy, error) {
	c := capacityConfig{initial: 20, min: 1, max: 4096, tolerance: 2, backoff: 0.9}
	for _, k := range capacityParams {
		s, ok := o.Params[k]
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("params.%s: %q is not a number", k, s)
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
		case "backoff":
			c.backoff = v
		}
	}
	switch {
	case c.min < 1:
		return nil, fmt.Errorf("params.min_limit: %v is below 1", c.min)
	case c.max < c.min:
		return nil, fmt.Errorf("params.max_limit: %v is below min_limit %v", c.max, c.min)
	case c.initial < c.min || c.initial > c.max:
		return nil, fmt.Errorf("params.initial_limit: %v is outside [%v, %v]", c.initial, c.min, c.max)
	case c.tolerance <= 1:
		return nil, fmt.Errorf("params.tolerance: %v must be above 1", c.tolerance)
	case c.backoff <= 0 || c.backoff >= 1:
		return nil, fmt.Errorf("params.backoff: %v is outside (0, 1)", c.backoff)
	}
	return capacityStrategy{cfg: c}, nil
}

// ErrRejected is what a caller reports (wrapped or not) when a target
// refused a request for lack of capacity (HTTP 503 or 429, a full pool).
// The capacity strategy cuts the target's learned limit on it.
var ErrRejected = errors.New("balance: target rejected the request (no permit)")

// IsRejection reports whether err says a target had no capacity: it wraps
// ErrRejected, has a method Rejected() bool that returns true, or its text
// names an overload ("no permit", "too many requests", "service
// unavailable", "overload", "rejected", "status 503", "status 429"), for
// errors from code that knows nothing of this package.
func IsRejection(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrRejected) {
		return true
	}
	var r interface{ Rejected() bool }
	if errors.As(err, &r) {
		return r.Rejected()
	}
	msg := strings.ToLower(err.Error())
	for _, s := range [...]string{"no permit", "too many requests", "service unavailable", "overload", "rejected", "status 503", "status 429"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (s capacityStrategy) Build(eps []*Endpoint) Picker {
	p := &capacityPicker{eps: eps, st: make([]*capState, len(eps)), cfg: s.cfg}
	for i, e := range eps {
		c := capacityOf(e)
		p.st[i] = c
		if e.t.MaxConcurrency == 0 {
			c.mu.Lock()
			if c.limit == 0 || e.Limit() == 0 {
				// New, or its configured limit was just removed: learn
				// afresh from the initial limit.
				c.limit, c.ceiling, c.step, c.holdUntil, c.rejLat = s.cfg.initial, 0, 1, 0, 0
				c.lastReject, c.warm, c.rejShare, c.rejRun, c.cleanRun = 0, false, 0, 0, 0
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
	lat atomic.Int64 // EWMA of success latency, ns; 0 = no sample yet

	mu         sync.Mutex
	limit      float64 // learned limit; 0 = not initialised
	ceiling    float64 // in-flight at which rejections last appeared; 0 = none
	step       float64 // probe step past the ceiling
	baseline   float64 // latency of windows without queueing, ns
	baseLimit  float64 // a limit known not to queue at baseline latency
	slow       int     // windows in a row too slow at a known-fine limit
	holdUntil  int64   // no rejection cut before this clock
	rejLat     int64   // EWMA of rejection latency, ns
	lastReject int64   // clock of the last rejection; 0 = none
	rejShare   float64 // EWMA of the share of outcomes that are rejections
	rejRun     int     // rejections since the last success
	cleanRun   int     // saturated windows in a row without a rejection
	warm       bool    // the first window has passed
	quietUntil int64   // no window before this clock (the last change's round trip)

	// Current window.
	winStart int64
	n        int     // successes
	sum      float64 // their latencies, ns
	sat      int     // successes that found the target at its limit
	rejects  int
}

type capacityPicker struct {
	eps []*Endpoint
	st  []*capState
	cfg capacityConfig
}

// The limit stops growing while more than rejectGrow of a target's last
// few hundred outcomes are rejections, steps down when more than rejectCut
// are, and is cut multiplicatively when more than rejectDrop are or half
// the limit (at least rejectRun) come in a row (its capacity just
// dropped): it settles
// where a few percent bounce, which keeps the target's permits busy through
// the round trip between one request and the next.
const (
	rejectGrow = 0.15
	rejectCut  = 0.30
	rejectDrop = 0.50
	rejectRun  = 8
)

// rejectMemory is how long after its last rejection a target counts as
// one that rejects (and is not judged by its latency).
const rejectMemory = 30 * time.Second

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
	bestRate := -1.0
	for i := range n {
		j := i + off
		if j >= n {
			j -= n
		}
		e := p.eps[j]
		if !info.Usable(e) {
			continue
		}
		free := e.Remaining()
		if free > unlimitedFree {
			free = unlimitedFree
		}
		lat := p.st[j].lat.Load()
		if lat <= 0 {
			lat = int64(time.Millisecond) // unmeasured: cheap, so it gets measured
		}
		rate := float64(free) * info.Weight(e) / float64(lat)
		if rate > bestRate {
			best, bestRate = e, rate
		}
	}
	return best
}

// Observe feeds one outcome to the target's learner.
func (p *capacityPicker) Observe(e *Endpoint, o Outcome) {
	c := capacityOf(e)
	lat := int64(o.Latency)
	learn := e.t.MaxConcurrency == 0
	if o.Err == nil && lat > 0 {
		// alpha 1/16: exponential service times are noisy, and a stage
		// change still shows within a few dozen outcomes.
		if old := c.lat.Load(); old == 0 {
			c.lat.Store(lat)
		} else {
			c.lat.Store(old + (lat-old)/16)
		}
	}
	if !learn {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit == 0 {
		return // not built by this strategy yet
	}
	if o.Err != nil {
		if IsRejection(o.Err) {
			c.rejects++
			c.rejRun++
			c.rejShare += (1 - c.rejShare) / 256
			c.reject(e, o, p.cfg)
		}
		return
	}
	if lat <= 0 {
		return
	}
	c.rejShare -= c.rejShare / 256
	c.rejRun = 0
	if float64(o.InFlight) > c.limit+1 {
		// Still draining down to a lowered limit: what we see now is the
		// old load's latency, and so is the next round trip's.
		c.quietUntil = max(c.quietUntil, o.Now+c.lat.Load())
	}
	if o.Now < c.quietUntil {
		return
	}
	if c.winStart == 0 {
		c.winStart = o.Now
	}
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

// reject handles a rejection seen with o.InFlight picks outstanding (this
// one included).
func (c *capState) reject(e *Endpoint, o Outcome, cfg capacityConfig) {
	if lat := int64(o.Latency); lat > 0 {
		if c.rejLat == 0 {
			c.rejLat = lat
		} else {
			c.rejLat += (lat - c.rejLat) / 8
		}
	}
	c.lastReject = o.Now
	if o.Now < c.holdUntil {
		return // a pick sent before the last cut: already accounted for
	}
	switch {
	case c.rejShare >= rejectDrop || float64(c.rejRun) >= max(rejectRun, c.limit/2):
		// The target's capacity dropped: cut at once to a little under
		// what it held when it refused.
		seen := min(max(float64(o.InFlight-1), cfg.min), c.limit)
		c.ceiling = seen
		c.limit = max(cfg.min, math.Floor(seen*cfg.backoff))
	case c.rejShare >= rejectCut:
		// A little too high: step down.
		c.ceiling = c.limit
		c.limit = max(cfg.min, c.limit-max(1, math.Floor(c.limit*0.03)))
	default:
		// A few rejections are the price of a full target: between a
		// permit's release and the next request's arrival the target
		// idles, and only a limit a little above its permits covers that
		// gap. The caller retries a rejection elsewhere at once.
		return
	}
	c.baseLimit = min(c.baseLimit, c.limit)
	c.step = 1
	// Rejections of picks sent before the cut come back within about one
	// rejection round trip; after that, a rejection means the lowered
	// limit is still too high.
	hold := 2 * c.rejLat
	if hold == 0 {
		hold = int64(time.Millisecond)
	}
	c.holdUntil = o.Now + hold
	c.publish(e)
	c.changed(o.Now)
}

// publish sets the endpoint's permits to the learned limit.
func (c *capState) publish(e *Endpoint) {
	if l := max(int64(math.Ceil(c.limit)), 1); e.Limit() != l {
		e.SetLimit(l)
	}
}

func (c *capState) resetWindow() {
	c.winStart, c.n, c.sum, c.sat, c.rejects = 0, 0, 0, 0, 0
}

// changed starts a new window after the limit changed. Outcomes of the
// next round trip mostly belong to picks made under the old limit, so the
// window opens only after it: growth is clocked by feedback, as TCP's is.
func (c *capState) changed(now int64) {
	// The current latency, not the baseline: after an overshoot the round
	// trip is the long one.
	quiet := max(int64(c.baseline), c.lat.Load())
	if c.lastReject != 0 && now-c.lastReject < int64(rejectMemory) {
		// A target that rejects answers growth with rejections at once,
		// not a round trip later: half a round trip is enough.
		quiet /= 2
	}
	c.quietUntil = now + quiet
	c.resetWindow()
}

func (c *capState) closeWindow(e *Endpoint, now int64, cfg capacityConfig) {
	old := c.limit
	saturated := c.n > 0 && c.sat*2 >= c.n
	// A whole window at the limit without one rejection says the target
	// has permits we do not use (its capacity grew, or the last ceiling
	// was a transient): grow at once, whatever the long-run share says,
	// which still remembers the rejections of a smaller stage.
	// Only for a target that rejects (one that queues says nothing by
	// rejections), and only on the second such window in a row at or past
	// the last ceiling: below it, BIC's climb is quick already, and one
	// clean window right at the right limit can be chance.
	rejecting := c.lastReject != 0 && now-c.lastReject < int64(rejectMemory)
	clean := saturated && c.rejects == 0 && c.n >= 16 && rejecting
	if clean {
		c.cleanRun++
	} else {
		c.cleanRun = 0
	}
	fast := clean && c.warm && c.cleanRun >= 2 && c.limit >= c.ceiling
	grow := saturated && (c.rejShare < rejectGrow || clean)
	// 32 samples at least for latency decisions: exponential service times
	// make the mean of fewer too noisy to tell queueing from chance.
	// A target that rejected lately says itself when it is full; its
	// latency is not needed to guess, and may change for its own reasons.
	if c.n >= 32 {
		avg := c.sum / float64(c.n)
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
		case rejecting:
			c.baseline += (avg - c.baseline) / 8
			c.baseLimit = max(c.baseLimit, c.limit)
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
		case fast:
			// Multiplicative: a permit left idle costs a whole service
			// time of work, an overshoot only fast rejections (retried
			// elsewhere), and the first rejecting window stops this.
			c.limit += max(1, c.step, math.Floor(c.limit/4))
			if c.limit > c.ceiling {
				c.ceiling = 0
			}
			c.step = 1
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
