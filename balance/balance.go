package balance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a pick can return. Callers branch on them with errors.Is.
var (
	// ErrNoTargets: the balancer has no targets at all.
	ErrNoTargets = errors.New("balance: no targets")
	// ErrNoneAvailable: targets exist but none may be picked (all
	// disabled, of weight 0, unhealthy, ejected or excluded).
	ErrNoneAvailable = errors.New("balance: no target available")
	// ErrAtCapacity: usable targets exist but every permit is taken.
	ErrAtCapacity = errors.New("balance: every target at capacity")
)

// Balancer picks targets with one strategy. It is safe for concurrent use.
type Balancer struct {
	name  string
	opts  Options // Clock, Rand, Registry, TrackLatency: fixed at New; the rest is live's
	epoch time.Time
	rnd   *randSource
	live  atomic.Pointer[liveOpts]

	mu      sync.Mutex // serialises changes to the set and snapshot builds
	targets []Target
	states  map[string]*state
	snap    atomic.Pointer[snapshot]

	wq waitQueue
}

// snapshot is an immutable view of the set, rebuilt on every membership or
// usability change.
type snapshot struct {
	b        *Balancer
	all      []*Endpoint // every target, in configuration order
	eps      []*Endpoint // the usable ones, given to the strategy
	picker   Picker
	observer Observer
	loadObs  LoadObserver
	tracker  Tracker
	counter  *atomic.Int64 // an InFlightCounter's, or nil
	timed    bool          // Done measures latency
	warmEnd  int64         // clock when the last warm-up ends; 0 if none
	recheck  int64         // clock when an ejection ends; 0 if none
	warmDone atomic.Bool
}

// liveOpts are the options Reconfigure may change, with the strategy
// built from its settings; replaced whole, read without a lock.
type liveOpts struct {
	strat   Strategy
	warm    warmup
	passive Passive
}

// New builds a balancer for the named strategy.
func New(strategy string, opts Options) (*Balancer, error) {
	l, err := compile(strategy, &opts)
	if err != nil {
		return nil, err
	}
	b := &Balancer{
		name:   strategy,
		opts:   opts,
		epoch:  opts.Clock(),
		rnd:    newRandSource(opts.Rand),
		states: map[string]*state{},
	}
	b.live.Store(l)
	b.wq.after.Store(int64(opts.LIFOAfter))
	b.wq.now = b.now
	b.mu.Lock()
	b.rebuild()
	b.mu.Unlock()
	return b, nil
}

// compile checks opts (normalising them) and builds the strategy.
func compile(strategy string, opts *Options) (*liveOpts, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	reg := opts.Registry
	if reg == nil {
		reg = defaultRegistry
	}
	f, err := reg.factory(strategy)
	if err != nil {
		return nil, err
	}
	st, err := f(opts.Settings)
	if err != nil {
		return nil, fmt.Errorf("balance: strategy %q: %w", strategy, err)
	}
	return &liveOpts{
		strat:   st,
		warm:    warmup{envoy: opts.Warmup == "envoy", aggression: opts.Aggression, minFactor: opts.MinWeightPercent / 100},
		passive: opts.Passive,
	}, nil
}

// CheckOptions reports whether New(strategy, opts) would succeed,
// building nothing that lasts: a caller validates a whole configuration
// before it changes a live balancer (Reconfigure).
func CheckOptions(strategy string, opts Options) error {
	_, err := compile(strategy, &opts)
	return err
}

// Reconfigure hands new options to the live balancer, as grpc's
// UpdateClientConnState hands a new config to a live LB policy: the
// strategy is built again from the new settings over the same endpoints,
// and every target keeps what it has (picks in flight, latency means,
// learned limits and what the learner knows, warm-up, health, ejections).
// Warm-up formula, passive health, LIFOAfter and the strategy's settings
// change; Clock, Rand, Registry and TrackLatency stay as New set them. A
// strategy of another name needs a new Balancer. An invalid opts changes
// nothing.
func (b *Balancer) Reconfigure(opts Options) error {
	opts.Clock, opts.Rand, opts.Registry, opts.TrackLatency = b.opts.Clock, b.opts.Rand, b.opts.Registry, b.opts.TrackLatency
	l, err := compile(b.name, &opts)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live.Store(l)
	b.wq.after.Store(int64(opts.LIFOAfter))
	b.rebuild()
	return nil
}

// Strategy returns the strategy name the balancer was built with.
func (b *Balancer) Strategy() string { return b.name }

// UsesKey reports whether the strategy picks by PickInfo.Key (it
// implements KeyUser), so callers know whether to compute a key.
func (b *Balancer) UsesKey() bool {
	k, ok := b.live.Load().strat.(KeyUser)
	return ok && k.UsesKey()
}

// now is the balancer's clock in nanoseconds; never 0, so 0 can mean unset.
func (b *Balancer) now() int64 { return int64(b.opts.Clock().Sub(b.epoch)) + 1 }

// Now returns the balancer's clock in nanoseconds, as PickInfo.Now and
// Outcome.Now read it (monotonic from the balancer's creation, never 0):
// a strategy's tests feed its Observer outcomes stamped with it.
func (b *Balancer) Now() int64 { return b.now() }

// Queued returns the callers queued in Wait now and the ticket of the
// one first in line (0 when none). Tickets count up in queueing order,
// and a woken waiter that finds no permit keeps its ticket and its
// place: a strategy's tests see from the ticket whether what it did (a
// refusal that parks a target, say) sent the oldest waiter to the back.
func (b *Balancer) Queued() (n int, head uint64) {
	b.wq.mu.Lock()
	defer b.wq.mu.Unlock()
	if len(b.wq.q) > 0 {
		head = b.wq.q[0].seq
	}
	return len(b.wq.q), head
}

// Update replaces the set of targets. Targets that stay (same Addr) keep
// their runtime state; new ones start their warm-up; removed ones are never
// picked again, and picks already handed out on them finish safely. An
// invalid set is refused whole.
func (b *Balancer) Update(targets []Target) error {
	seen := make(map[string]bool, len(targets))
	for i, t := range targets {
		switch {
		case t.Addr == "":
			return fmt.Errorf("balance: targets[%d].addr: empty", i)
		case seen[t.Addr]:
			return fmt.Errorf("balance: targets[%d].addr: %q appears twice", i, t.Addr)
		case t.Weight < 0:
			return fmt.Errorf("balance: targets[%d].weight: %d is negative", i, t.Weight)
		case t.Warmup < 0:
			return fmt.Errorf("balance: targets[%d].warmup: %v is negative", i, t.Warmup)
		case t.MaxConcurrency < 0:
			return fmt.Errorf("balance: targets[%d].max_concurrency: %d is negative", i, t.MaxConcurrency)
		}
		seen[t.Addr] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	old := b.targets
	oldCfg := make(map[string]Target, len(old))
	for _, t := range old {
		oldCfg[t.Addr] = t
	}
	states := make(map[string]*state, len(targets))
	for _, t := range targets {
		st := b.states[t.Addr]
		if st == nil {
			st = &state{addr: t.Addr}
			st.healthy.Store(true)
			st.upSince.Store(b.startedAt(t, now))
		} else if !t.StartedAt.IsZero() && !t.StartedAt.Equal(oldCfg[t.Addr].StartedAt) {
			// The registry says the provider restarted: it is cold again.
			st.upSince.Store(b.startedAt(t, now))
		}
		switch {
		case t.MaxConcurrency > 0:
			if was := st.limit.Load(); was > 0 && int64(t.MaxConcurrency) > was {
				st.reopened.Add(1) // more permits: retries that excluded it may come back
			}
			st.limit.Store(int64(t.MaxConcurrency))
		case oldCfg[t.Addr].MaxConcurrency > 0:
			st.limit.Store(0) // was configured, now unlimited (or learned afresh)
			st.reopened.Add(1)
		}
		states[t.Addr] = st
	}
	b.targets = append([]Target(nil), targets...)
	b.states = states
	b.rebuild()
	return nil
}

// startedAt is the clock a target's warm-up counts from: the start time a
// registry reported (never later than now, against clock skew), else now.
func (b *Balancer) startedAt(t Target, now int64) int64 {
	if t.StartedAt.IsZero() {
		return now
	}
	return min(int64(t.StartedAt.Sub(b.epoch))+1, now)
}

// Targets returns the current configuration.
func (b *Balancer) Targets() []Target {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Target(nil), b.targets...)
}

// SetHealthy records an active health check's verdict. A target that turns
// healthy starts its warm-up again (a restarted server is cold). Unknown
// addresses are an error.
func (b *Balancer) SetHealthy(addr string, healthy bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.states[addr]
	if st == nil {
		return fmt.Errorf("balance: no target %q", addr)
	}
	if st.healthy.Load() == healthy {
		return nil
	}
	st.healthy.Store(healthy)
	if healthy {
		st.upSince.Store(b.now())
	}
	b.rebuild()
	return nil
}

// rebuild makes and publishes a new snapshot; b.mu must be held.
func (b *Balancer) rebuild() {
	now := b.now()
	s := &snapshot{b: b, all: make([]*Endpoint, len(b.targets))}
	for i, t := range b.targets {
		st := b.states[t.Addr]
		e := &Endpoint{t: t, s: st, index: -1}
		s.all[i] = e
		if t.Disabled || t.Weight <= 0 || !st.healthy.Load() {
			continue
		}
		if until := st.ejectedUntil.Load(); until != 0 {
			if until > now {
				if s.recheck == 0 || until < s.recheck {
					s.recheck = until
				}
				continue
			}
			// Back from ejection: it warms up from the moment it returned.
			st.ejectedUntil.Store(0)
			st.upSince.Store(until)
		}
		e.index = len(s.eps)
		s.eps = append(s.eps, e)
		if t.Warmup > 0 {
			if end := st.upSince.Load() + int64(t.Warmup); end > now && end > s.warmEnd {
				s.warmEnd = end
			}
		}
	}
	s.picker = b.live.Load().strat.Build(s.eps)
	s.observer, _ = s.picker.(Observer)
	s.loadObs, _ = s.picker.(LoadObserver)
	s.tracker, _ = s.picker.(Tracker)
	if c, ok := s.picker.(InFlightCounter); ok {
		s.counter = c.InFlightCounter()
	}
	s.timed = b.opts.TrackLatency || s.observer != nil
	b.snap.Store(s)
	b.wq.wakeAll() // capacity or membership changed: let waiters look again
}

// Pick picks a target for key without waiting. It returns ErrNoTargets,
// ErrNoneAvailable or ErrAtCapacity when it cannot.
func (b *Balancer) Pick(key string) (Pick, error) {
	return b.PickWith(PickInfo{Key: key})
}

// PickWith is Pick with every pick option.
func (b *Balancer) PickWith(info PickInfo) (Pick, error) {
	s := b.snap.Load()
	if s.recheck != 0 && b.now() >= s.recheck {
		s = b.refresh(s)
	}
	if len(s.eps) == 0 {
		if len(s.all) == 0 {
			return Pick{}, ErrNoTargets
		}
		return Pick{}, ErrNoneAvailable
	}
	info.snap = s
	if s.warmEnd != 0 && !s.warmDone.Load() {
		if now := b.now(); now < s.warmEnd {
			info.now = now
		} else {
			s.warmDone.Store(true)
		}
	}
	// The picker chose without holding a permit; another pick may take
	// the last one first. Ask again a few times, then take any free one.
	// A picker that answers nil found none that suits (Picker): no
	// permit is taken behind its back. A strategy may hold a target back
	// that has permits free (capacity: one failing most of what it gets,
	// while another could serve), and the request waits for a permit
	// elsewhere instead.
	declined := false
	for range 3 {
		e := s.picker.Pick(info)
		if e == nil {
			declined = true
			break
		}
		if e.s.tryAcquire() {
			return b.started(s, e, &info), nil
		}
	}
	excluded := 0
	if n := len(s.eps); n > 0 {
		off := b.rnd.intN(n)
		for i := range n {
			e := s.eps[(off+i)%n]
			if !info.Usable(e) {
				if info.Excluded(e) {
					excluded++
				}
				continue
			}
			if !declined && e.s.tryAcquire() {
				return b.started(s, e, &info), nil
			}
		}
	}
	if excluded == len(s.eps) {
		return Pick{}, ErrNoneAvailable
	}
	return Pick{}, ErrAtCapacity
}

// refresh rebuilds a snapshot whose ejection has ended.
func (b *Balancer) refresh(s *snapshot) *snapshot {
	b.mu.Lock()
	if cur := b.snap.Load(); cur == s {
		b.rebuild()
	}
	b.mu.Unlock()
	return b.snap.Load()
}

func (b *Balancer) started(s *snapshot, e *Endpoint, info *PickInfo) Pick {
	p := Pick{e: e, s: s, seq: e.s.picks.Add(1)}
	if s.counter != nil {
		s.counter.Add(1)
	}
	if s.tracker != nil {
		p.load = max(info.Load, 1)
		s.tracker.Started(e, p.load)
	}
	if s.timed {
		p.start = b.now()
	}
	return p
}

// Wait is PickWith that waits, instead of failing with ErrAtCapacity, until
// a permit is free or ctx ends. Waiters are served first come, first served,
// or newest first once the oldest has waited Options.LIFOAfter. When ctx
// ends the error wraps both ErrAtCapacity and ctx.Err().
func (b *Balancer) Wait(ctx context.Context, info PickInfo) (Pick, error) {
	var w *waiter      // queued: it keeps its place across wake-ups that find no permit
	var opens []uint32 // the excluded targets' reopen counts when it queued
	for {
		p, err := b.PickWith(info)
		if err != ErrAtCapacity {
			return p, err
		}
		switch {
		case w == nil:
			if len(info.Exclude) > 0 {
				opens = make([]uint32, len(info.Exclude))
				for i, x := range info.Exclude {
					opens[i] = x.s.reopened.Load()
				}
			}
			at := b.now()
			if !info.Arrived.IsZero() {
				at = min(at, int64(info.Arrived.Sub(b.epoch))+1)
			}
			w = b.wq.enqueueAt(at, info.Exclude)
		default:
			// Woken, but another pick took the permit first, or the
			// picker would not use the one that came free (a target it
			// holds back), so nobody else could use it either (PickWith
			// takes any free permit the picker's answer allows; a
			// wake-up goes only to a waiter that does not exclude the
			// permit's target): back to its place, queued as long as
			// before. Passing the wake-up on here, as every waiter
			// once did, sent each lost race round the whole queue and
			// moved every waiter to its end: 300 waiters were served in
			// no order, and none looked older than its last lost race.
			w.ex = info.Exclude
			b.wq.requeue(w)
		}
		// A permit may have come back between the pick and enqueue.
		if p, err = b.PickWith(info); err != ErrAtCapacity {
			b.wq.leave(w)
			return p, err
		}
		select {
		case <-w.ch:
			if opens != nil {
				info.Exclude, opens = dropReopened(info.Exclude, opens)
			}
		case <-ctx.Done():
			b.wq.gaveUp(w)
			return Pick{}, fmt.Errorf("%w: %w", ErrAtCapacity, ctx.Err())
		}
	}
}

// dropReopened removes from a waiter's excluded targets those reopened
// (Endpoint.Reopen) since it queued: a refusal excluded them, and they
// have room again. The caller's slice is never changed.
func dropReopened(ex []*Endpoint, opens []uint32) ([]*Endpoint, []uint32) {
	keep := 0
	for i, x := range ex {
		if x.s.reopened.Load() == opens[i] {
			keep++
		}
	}
	if keep == len(ex) {
		return ex, opens
	}
	kx, ko := make([]*Endpoint, 0, keep), make([]uint32, 0, keep)
	for i, x := range ex {
		if x.s.reopened.Load() == opens[i] {
			kx, ko = append(kx, x), append(ko, opens[i])
		}
	}
	return kx, ko
}

// SetLIFOAfter changes Options.LIFOAfter on a running balancer (a reload
// that changes only the queue keeps the targets' learned state and the
// patience the queue has seen); d < 0 other than LIFOPatience counts as
// 0.
func (b *Balancer) SetLIFOAfter(d time.Duration) {
	if d < 0 && d != LIFOPatience {
		d = 0
	}
	b.wq.after.Store(int64(d))
}

// Endpoints returns a view of every target, in configuration order.
func (b *Balancer) Endpoints() []EndpointStats {
	s := b.snap.Load()
	now := b.now()
	out := make([]EndpointStats, len(s.all))
	for i, e := range s.all {
		until := e.s.ejectedUntil.Load()
		ew := e.t.Weight
		usable := e.index >= 0
		warming := false
		if usable && e.t.Warmup > 0 && now-e.s.upSince.Load() < int64(e.t.Warmup) {
			warming = true
			ew = int(b.live.Load().warm.weight(e, now) + 0.5)
		}
		if !usable || e.t.Disabled {
			ew = 0
		}
		st := EndpointStats{
			Target:          e.t,
			EffectiveWeight: ew,
			Healthy:         e.s.healthy.Load(),
			Ejected:         until > now,
			Warming:         warming,
			InFlight:        e.s.inflight.Load(),
			Limit:           e.s.limit.Load(),
			AvgLatency:      time.Duration(e.s.ewma.Load()),
			Requests:        e.s.requests.Load(),
			Failures:        e.s.failures.Load(),
		}
		if st.Ejected {
			st.EjectedUntil = b.epoch.Add(time.Duration(until))
			st.EffectiveWeight = 0
		}
		out[i] = st
	}
	return out
}

// Pick is one picked target. Call Done or Report exactly once when the work
// ends; until then the pick holds one of the target's permits.
type Pick struct {
	e     *Endpoint
	s     *snapshot
	start int64
	load  int64
	seq   uint64 // its number among the endpoint's picks (Outcome.Seq)
}

// Endpoint returns the picked endpoint (nil for the zero Pick).
func (p Pick) Endpoint() *Endpoint { return p.e }

// Addr returns the picked target's address.
func (p Pick) Addr() string { return p.e.t.Addr }

// Target returns the picked target's configuration.
func (p Pick) Target() Target { return p.e.t }

// Done ends the pick. err non-nil marks a failure: it counts in the
// statistics and towards passive ejection. Latency is measured since the
// pick when the strategy or Options.TrackLatency needs it.
func (p Pick) Done(err error) {
	var lat, now int64
	if p.start != 0 {
		now = p.s.b.now()
		lat = now - p.start
	}
	p.finish(lat, now, err)
}

// Cancel gives the pick back unused: nothing was sent to the target (the
// client left, the target was removed before the request went out). The
// permit and the load return and a waiter may take them, but the pick is
// not a request: no count, no latency, nothing for a learner or for
// passive ejection, which would otherwise read it as a success at zero
// latency.
func (p Pick) Cancel() {
	if p.e == nil {
		return
	}
	p.release()
	if b := p.s.b; b.wq.n.Load() > 0 {
		b.wq.wake(p.e)
	}
}

// release returns the pick's permit and load: what Done and Cancel share.
// It returns the target's in-flight count before the release.
func (p Pick) release() int64 {
	inflight := p.e.s.inflight.Add(-1) + 1
	if p.s.counter != nil {
		p.s.counter.Add(-1)
	}
	if p.load != 0 {
		// The current picker's order follows the load, wherever the pick
		// started.
		if cur := p.s.b.snap.Load(); cur.tracker != nil {
			cur.tracker.Ended(p.e, p.load)
		}
	}
	return inflight
}

// ReportLoad hands the pick's strategy the target's own report of its
// load, sent with the response (the Fulcrum-Load header, which package
// balance/probe parses): call it when the response's header arrives,
// before Done or Report. Strategies that do not read reports (all but
// probe) ignore it, at the cost of one nil check.
func (p Pick) ReportLoad(l LoadReport) {
	if p.e == nil || p.s.loadObs == nil {
		return
	}
	p.s.loadObs.ObserveLoad(p.e, l, p.s.b.now())
}

// Report ends the pick with a latency the caller measured.
func (p Pick) Report(latency time.Duration, err error) { p.finish(int64(latency), 0, err) }

// finish returns the permit and feeds the statistics; now is the clock if
// the caller already read it, else 0 (the clock is read at most once).
func (p Pick) finish(lat, now int64, err error) {
	if p.e == nil {
		return
	}
	b, st := p.s.b, p.e.s
	inflight := p.release()
	class := ClassOf(err)
	if class == ClientGone {
		// Nothing was learned of the target: no request, failure or
		// latency counts, and passive health neither counts a failure
		// nor clears a run of them.
		lat = 0
	} else {
		st.requests.Add(1)
	}
	if class == Failed || class == Refused {
		st.failures.Add(1)
	}
	if lat > 0 && (class != Failed || !IsTimeout(err)) {
		// EWMA with alpha 1/8; concurrent updates may lose one sample.
		// Not of a timeout: its length is the caller's limit, and one
		// 1 s timeout took a 50 ms target's mean to 170 ms, and with it
		// the auto try timeout (ten means) past the clients' own.
		old := st.ewma.Load()
		if old == 0 {
			st.ewma.Store(lat)
		} else {
			st.ewma.Store(old + (lat-old)/8)
		}
	}
	raised := int64(0)
	if p.s.observer != nil {
		// The picker that made the pick learns from it: e is one of its
		// endpoints.
		if now == 0 {
			now = b.now()
		}
		before := st.limit.Load()
		p.s.observer.Observe(p.e, Outcome{Class: class, Latency: time.Duration(lat), Err: err, InFlight: inflight, Now: now, Waiting: int(b.wq.n.Load()), Seq: p.seq})
		if after := st.limit.Load(); before > 0 && after > before {
			raised = after - before // a learner grew the limit: more waiters may go
		}
	}
	if b.live.Load().passive.MaxFailures > 0 && class != ClientGone {
		b.passive(st, err, now)
	}
	freed := raised + 1
	if l := st.limit.Load(); raised == 0 && l > 0 && st.inflight.Load() >= l {
		// The learner took the permit back (a refusal cut the limit or
		// parked the target): nothing came free. A waiter woken for it
		// would find no permit, and a retry that excludes another
		// target passes such a wake-up on and queues again at the end:
		// every refusal of a down target's probe sent the oldest waiter
		// to the back.
		freed = 0
	}
	b.wakeWaiters(p.e, freed)
}

// wakeWaiters wakes up to n waiters, one per permit that became free on
// e's target (nil: on some target).
func (b *Balancer) wakeWaiters(e *Endpoint, n int64) {
	for i := int64(0); i < n && b.wq.n.Load() > 0; i++ {
		b.wq.wake(e)
	}
}

// passive counts consecutive failures and ejects a target that reaches
// MaxFailures within the window.
func (b *Balancer) passive(st *state, err error, now int64) {
	pv := &b.live.Load().passive
	if err == nil {
		if st.consecFails.Load() != 0 {
			st.consecFails.Store(0)
		}
		return
	}
	if now == 0 {
		now = b.now()
	}
	n := st.consecFails.Add(1)
	if n == 1 {
		st.firstFailAt.Store(now)
	}
	if int(n) < pv.MaxFailures {
		return
	}
	if now-st.firstFailAt.Load() > int64(pv.Window) {
		// Too spread out: start counting again from this failure.
		st.consecFails.Store(1)
		st.firstFailAt.Store(now)
		return
	}
	b.eject(st, now)
}

func (b *Balancer) eject(st *state, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st.ejectedUntil.Load() > now || b.states[st.addr] != st {
		return // already ejected, or removed meanwhile
	}
	ejected := 0
	for _, o := range b.states {
		if o.ejectedUntil.Load() > now {
			ejected++
		}
	}
	p := b.live.Load().passive
	if ejected > 0 && (ejected+1)*100 > p.MaxEjectedPercent*len(b.states) {
		return
	}
	// Repeat offenders stay out longer; a long clean spell forgives.
	if last := st.lastEnd.Load(); last != 0 && now-last > int64(p.MaxEjectFor) {
		st.ejections.Store(0)
	}
	k := st.ejections.Add(1)
	d := p.EjectFor << min(k-1, 30)
	if d > p.MaxEjectFor || d <= 0 {
		d = p.MaxEjectFor
	}
	st.ejectedUntil.Store(now + int64(d))
	st.lastEnd.Store(now + int64(d))
	st.consecFails.Store(0)
	b.rebuild()
}

// Ejected reports whether addr is ejected now.
func (b *Balancer) Ejected(addr string) bool {
	b.mu.Lock()
	st := b.states[addr]
	b.mu.Unlock()
	return st != nil && st.ejectedUntil.Load() > b.now()
}

// waitQueue is the goroutines waiting for a permit, in order of arrival.
// Each returned permit wakes one waiter that may take it, so a burst of
// waiters costs no thundering herd: the oldest, or the newest once the
// queue stands (adaptive LIFO, see Options.LIFOAfter).
type waitQueue struct {
	mu       sync.Mutex
	q        []*waiter // in queueing order (seq)
	seq      uint64
	n        atomic.Int32
	after    atomic.Int64 // Options.LIFOAfter, ns; 0: always the oldest
	patience atomic.Int64 // ns, EWMA of the waits of waiters that gave up; 0: none has
	standing bool         // newest first until the queue empties (under mu)
	now      func() int64 // the balancer's clock
}

type waiter struct {
	ch       chan struct{}
	signaled bool
	ex       []*Endpoint // targets it may not take (a retry's), set while it is out of the queue
	freed    *Endpoint   // set when signalled: the target whose permit woke it (nil: any)
	seq      uint64      // queueing order
	at       int64       // when it queued
}

// takes reports whether the waiter may take a permit of e's target (nil:
// a permit on some target).
func (wt *waiter) takes(e *Endpoint) bool {
	for _, x := range wt.ex {
		if e == nil || x == e || x.s == e.s {
			return false
		}
	}
	return true
}

// enqueueAt queues a waiter that came at clock at: behind those that
// came before it, ahead of those that came after (PickInfo.Arrived). ex
// are the targets it may not take.
func (w *waitQueue) enqueueAt(at int64, ex []*Endpoint) *waiter {
	wt := &waiter{ch: make(chan struct{}, 1), at: at, ex: ex}
	w.mu.Lock()
	if len(w.q) == 0 {
		// The queue drained: it was a burst, or the standing queue is
		// gone. First come, first served again.
		w.standing = false
	}
	w.seq++
	wt.seq = w.seq
	if n := len(w.q); n == 0 || w.q[n-1].at <= at {
		w.q = append(w.q, wt) // the usual case: it came last
	} else {
		i := sort.Search(n, func(i int) bool { return w.q[i].at > at })
		w.q = slices.Insert(w.q, i, wt)
	}
	w.n.Store(int32(len(w.q)))
	w.mu.Unlock()
	return wt
}

// requeue puts back a woken waiter that found no permit where its
// queueing order puts it, keeping when it queued: a lost race for a
// permit does not cost it its turn, and waiters woken together (a
// rebuild wakes all) keep their order whichever runs first.
func (w *waitQueue) requeue(wt *waiter) {
	w.mu.Lock()
	wt.signaled, wt.freed = false, nil
	i := sort.Search(len(w.q), func(i int) bool { return w.q[i].at > wt.at || w.q[i].at == wt.at && w.q[i].seq > wt.seq })
	w.q = slices.Insert(w.q, i, wt)
	w.n.Store(int32(len(w.q)))
	w.mu.Unlock()
}

// leave removes wt; if it was already signalled, the wake-up passes on to
// the next waiter so no returned permit goes unnoticed.
func (w *waitQueue) leave(wt *waiter) {
	w.mu.Lock()
	signaled, freed := wt.signaled, wt.freed
	if !signaled {
		for i, x := range w.q {
			if x == wt {
				w.q = append(w.q[:i], w.q[i+1:]...)
				break
			}
		}
		w.n.Store(int32(len(w.q)))
	}
	w.mu.Unlock()
	if signaled {
		w.wake(freed)
	}
}

// gaveUp removes wt, whose context ended before it got a permit, and
// learns from how long it waited (LIFOPatience).
func (w *waitQueue) gaveUp(wt *waiter) {
	w.leave(wt)
	waited := w.now() - wt.at
	if waited <= 0 {
		return
	}
	// EWMA with alpha 1/8, the first wait as it is; concurrent updates
	// may lose one sample.
	if old := w.patience.Load(); old == 0 {
		w.patience.Store(waited)
	} else {
		w.patience.Store(old + (waited-old)/8)
	}
}

// lifoAfter is how long the oldest waiter must have waited for the
// queue to serve the newest first; 0: never.
func (w *waitQueue) lifoAfter() int64 {
	after := w.after.Load()
	if after == int64(LIFOPatience) {
		return w.patience.Load() / 2
	}
	return after
}

// wake signals the first waiter that may take a permit of e's target
// (the oldest, or the newest in a standing queue), passing by the
// retries that exclude it, which keep their places for a permit they
// can take. e nil (a permit somewhere) prefers a waiter that excludes
// nothing, which any permit serves.
func (w *waitQueue) wake(e *Endpoint) {
	w.mu.Lock()
	if n := len(w.q); n > 0 {
		after := w.lifoAfter()
		if !w.standing && after > 0 && w.now()-w.q[0].at >= after {
			// Newest first from now until the queue empties: as its
			// oldest give up, the next oldest are younger than after,
			// and serving them in order again served requests half
			// their clients' patience old, which died in flight.
			w.standing = true
		}
		newest := n > 1 && w.standing && after > 0 // a reload may turn it off
		i := -1
		for k := range n {
			j := k
			if newest {
				j = n - 1 - k // a standing queue: the newest waiter goes first
			}
			if w.q[j].takes(e) {
				i = j
				break
			}
		}
		if i < 0 && e == nil {
			i = 0 // every waiter excludes a target: the oldest looks
			if newest {
				i = n - 1
			}
		}
		if i >= 0 {
			wt := w.q[i]
			switch i {
			case 0: // the usual case, without a copy
				w.q[0] = nil
				w.q = w.q[1:]
			case n - 1:
				w.q[i] = nil
				w.q = w.q[:i]
			default:
				w.q = slices.Delete(w.q, i, i+1)
			}
			w.n.Store(int32(len(w.q)))
			wt.signaled, wt.freed = true, e
			wt.ch <- struct{}{}
		}
	}
	w.mu.Unlock()
}

func (w *waitQueue) wakeAll() {
	w.mu.Lock()
	for _, wt := range w.q {
		wt.signaled = true
		wt.ch <- struct{}{}
	}
	w.q = nil
	w.n.Store(0)
	w.mu.Unlock()
}
