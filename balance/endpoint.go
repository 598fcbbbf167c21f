package balance

import (
	"math"
	"sync/atomic"
	"time"
)

// Target is the configuration of one endpoint.
type Target struct {
	// Addr identifies the target (host:port or URL). Targets are matched by
	// Addr across updates.
	Addr string
	// Weight is the relative share of picks. A weight of 0 is never picked.
	Weight int
	// Warmup is the window over which a new or recovered target's weight
	// ramps up to Weight. Zero means no warm-up.
	Warmup time.Duration
	// MaxConcurrency is the number of permits: picks outstanding at once.
	// Zero means unlimited (the capacity strategy then learns a limit).
	MaxConcurrency int
	// Disabled targets are never picked but keep their state.
	Disabled bool
	// StartedAt, when set, is when the provider started (as a service
	// registry reports it): warm-up counts from there instead of from when
	// the balancer first saw the target, so a provider that restarted is
	// warmed up alike by every balancer. A later StartedAt on an update
	// restarts the warm-up.
	StartedAt time.Time
}

// state is an endpoint's runtime state. It outlives snapshots: Update hands
// the same state to the new Endpoint of a target that stays.
type state struct {
	addr     string
	inflight atomic.Int64
	limit    atomic.Int64  // permits; 0 = unlimited
	picks    atomic.Uint64 // picks made (Outcome.Seq)

	requests atomic.Uint64
	failures atomic.Uint64

	ewma atomic.Int64 // mean latency of every outcome, EWMA, ns

	// Health.
	healthy      atomic.Bool  // from active checks; starts true
	upSince      atomic.Int64 // clock when it came up; warm-up counts from here
	consecFails  atomic.Int32 // passive: consecutive failures
	firstFailAt  atomic.Int64 // passive: clock of the first of them
	ejectedUntil atomic.Int64 // passive: 0 = not ejected
	ejections    atomic.Int32 // passive: times ejected recently (backoff)
	lastEnd      atomic.Int64 // passive: clock when the last ejection ended

	// Reopen count: bumped when the target has room again that a
	// refusal denied (see Reopen).
	reopened atomic.Uint32

	// The strategy's own state for this target (see StateOf): a
	// strategy's statistics live with the strategy, not here.
	ext atomic.Pointer[any]
}

// Endpoint is a target as a snapshot sees it: its configuration at the time
// of the snapshot and its live state. Strategies receive Endpoints.
type Endpoint struct {
	t     Target
	s     *state
	index int // position in the snapshot's usable list
}

// Target returns the configuration the endpoint was built with.
func (e *Endpoint) Target() Target { return e.t }

// Addr returns the target's address.
func (e *Endpoint) Addr() string { return e.t.Addr }

// Weight returns the configured weight.
func (e *Endpoint) Weight() int { return e.t.Weight }

// MaxConcurrency returns the configured permits (Target.MaxConcurrency):
// 0 means the limit, if any, is a strategy's to learn.
func (e *Endpoint) MaxConcurrency() int { return e.t.MaxConcurrency }

// Index is the endpoint's position in the slice given to Strategy.Build.
func (e *Endpoint) Index() int { return e.index }

// InFlight returns the picks outstanding on the endpoint.
func (e *Endpoint) InFlight() int64 { return e.s.inflight.Load() }

// Limit returns the number of permits (0 = unlimited).
func (e *Endpoint) Limit() int64 { return e.s.limit.Load() }

// SetLimit sets the permits. It is for strategies that learn a limit; a
// configured MaxConcurrency is restored by the next Update.
func (e *Endpoint) SetLimit(n int64) { e.s.limit.Store(n) }

// HoldPermits takes n of the target's permits out of use without a pick:
// they count in InFlight (and in Outcome.InFlight) whatever the limit,
// so no pick, not even the balancer's fallback to any free permit, gets
// them. A learner holds the permits of a target it believes down
// (capacity parks it) and gives them back with ReleasePermits. The
// strategy keeps the count it holds: the balancer does not.
func (e *Endpoint) HoldPermits(n int64) { e.s.inflight.Add(n) }

// ReleasePermits gives back n permits HoldPermits took. It wakes no
// waiter by itself: a picker that releases permits in Pick says so with
// PickInfo.Wake, after it has taken the one its own pick needs.
func (e *Endpoint) ReleasePermits(n int64) { e.s.inflight.Add(-n) }

// Reopen tells the balancer that the target has permits again after
// refusing (a learner found its capacity back, or its configured limit
// rose): waiters whose retry excluded it because it refused may pick it
// again. Without this, every request queued while a target was down
// carries its refusal there, and the target refills only as fast as new
// requests arrive. A strategy calls it on evidence of room, not on a
// guess such as a probe: a retry that takes a probe's permit and is
// refused again may have no attempt left.
func (e *Endpoint) Reopen() { e.s.reopened.Add(1) }

// Remaining returns the free permits, or math.MaxInt64 when unlimited.
func (e *Endpoint) Remaining() int64 {
	l := e.s.limit.Load()
	if l <= 0 {
		return math.MaxInt64
	}
	return l - e.s.inflight.Load()
}

// AvgLatency returns the exponentially weighted mean latency of outcomes,
// timeouts left out (IsTimeout).
func (e *Endpoint) AvgLatency() time.Duration { return time.Duration(e.s.ewma.Load()) }

// Picks returns how many picks the target has had: less an outcome's
// Seq, how many went out after that one.
func (e *Endpoint) Picks() uint64 { return e.s.picks.Load() }

// Requests returns the outcomes reported.
func (e *Endpoint) Requests() uint64 { return e.s.requests.Load() }

// Failures returns the failed outcomes reported.
func (e *Endpoint) Failures() uint64 { return e.s.failures.Load() }

// Ext returns the strategy-owned value stored with SetExt, or nil.
func (e *Endpoint) Ext() any {
	if p := e.s.ext.Load(); p != nil {
		return *p
	}
	return nil
}

// SetExt stores a strategy-owned value that survives updates of the target
// (a learned capacity, for instance).
func (e *Endpoint) SetExt(v any) { e.s.ext.Store(&v) }

// InitExt returns the strategy-owned value, making it with mk the first
// time; concurrent callers agree on one value.
func (e *Endpoint) InitExt(mk func() any) any {
	for {
		if p := e.s.ext.Load(); p != nil {
			return *p
		}
		v := mk()
		if e.s.ext.CompareAndSwap(nil, &v) {
			return v
		}
	}
}

// tryAcquire takes a permit. It never lets in-flight exceed the limit.
func (s *state) tryAcquire() bool {
	for {
		l := s.limit.Load()
		if l <= 0 {
			s.inflight.Add(1)
			return true
		}
		n := s.inflight.Load()
		if n >= l {
			return false
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// EndpointStats is a point-in-time view of a target, for admin APIs.
type EndpointStats struct {
	Target          Target
	EffectiveWeight int
	Healthy         bool
	Ejected         bool
	EjectedUntil    time.Time // zero unless ejected
	Warming         bool
	InFlight        int64
	Limit           int64 // permits; 0 = unlimited
	AvgLatency      time.Duration
	Requests        uint64
	Failures        uint64
}
