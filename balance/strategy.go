package balance

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Strategy is the SPI a way of picking implements. Build is called once per
// snapshot (membership or usability change), never per pick, with the
// usable endpoints: enabled, weight above zero, healthy and not ejected.
type Strategy interface {
	Build(eps []*Endpoint) Picker
}

// Picker picks among the endpoints of one snapshot. Pick must be safe for
// concurrent use and should not allocate. It returns nil when no endpoint
// suits; it should skip endpoints for which info.Usable is false (excluded
// or without a free permit). The balancer takes the permit after Pick
// returns and asks again if another pick took it first. A nil answer is
// final: the balancer takes no other permit behind it (the pick fails
// with ErrAtCapacity, or waits in the queue), so a picker may hold back
// a target that has free permits. One that does must decline only while
// a permit will come back elsewhere (a request in flight ends, or the
// picker calls PickInfo.Wake), or a waiter sleeps until its deadline.
type Picker interface {
	Pick(info PickInfo) *Endpoint
}

// The optional interfaces below are how a picker asks the balancer for
// more than Pick; the built-in strategies use nothing else, so a strategy
// registered from outside the package can do whatever they do (capacity,
// in package balance/capacity, is one). A picker keeps per-endpoint state
// of its own with StateOf; a learner sets an endpoint's permits
// (Endpoint.SetLimit), holds some out of use (Endpoint.HoldPermits), wakes
// waiters for permits it freed in Pick (PickInfo.Wake) and lets refused
// retries back (Endpoint.Reopen).

// Observer is implemented by pickers that learn from outcomes. Observe is
// called from Done for every pick the picker made (so e is one of its own
// snapshot's endpoints, and e.Index() is valid for it), after the
// endpoint's shared statistics were updated. Done measures the latency of
// every pick of an Observer.
type Observer interface {
	Observe(e *Endpoint, o Outcome)
}

// LoadReport is a target's own report of its load, sent with a response:
// what Google's Prequal probes for, carried on the traffic instead.
type LoadReport struct {
	// InFlight is the requests the target was serving when it answered,
	// from every gateway, the answering one not counted.
	InFlight int64
	// Latency is the target's estimate of its latency now (its recent
	// requests' mean, say); 0 when it has none.
	Latency time.Duration
}

// LoadObserver is implemented by pickers that learn from targets' own
// load reports (probe). ObserveLoad is called from Pick.ReportLoad, with
// one of the picker's own endpoints (as for Observe) while the pick is
// still in flight, and the balancer's clock.
type LoadObserver interface {
	ObserveLoad(e *Endpoint, l LoadReport, now int64)
}

// Tracker is implemented by pickers that follow the load on each endpoint
// as picks start and end (least_loaded's heap) but need no latency: no
// clock is read for them. Started is called once a pick holds its permit,
// Ended when it is done, both with the pick's load units (PickInfo.Load,
// at least 1). Both go to the current snapshot's picker, which keeps its
// order up to date: e may come from an older snapshot, so e.Index() holds
// only for an e the picker knows as its own; StateOf finds any e's state.
type Tracker interface {
	Started(e *Endpoint, load int64)
	Ended(e *Endpoint, load int64)
}

// InFlightCounter is implemented by pickers that need the number of their
// strategy's picks in flight (bounded_hash's bound). The balancer adds 1
// to the returned counter when a pick starts and takes 1 off when it ends,
// without a call into the picker per pick. Every picker of one strategy
// should return the same counter, kept by the strategy, since a pick may
// end after its snapshot was replaced.
type InFlightCounter interface {
	InFlightCounter() *atomic.Int64
}

// KeyUser is implemented by strategies that pick by PickInfo.Key (the hash
// strategies): callers compute a request's key only for those. A strategy
// that does not implement it is given no key.
type KeyUser interface {
	UsesKey() bool
}

// StateOf returns the strategy's own state for e's target, a *T made with
// new(T) the first time. It lives as long as the target stays in the
// balancer (across snapshots), as grpc's weighted round robin keeps an
// endpointWeight per endpoint. A balancer runs one strategy and a target
// holds one state, so a strategy keeps all it needs in one T (a second
// type would replace the first); pickers look their states up once in
// Build and index them by e.Index() on the hot path.
func StateOf[T any](e *Endpoint) *T {
	if v, ok := e.Ext().(*T); ok {
		return v
	}
	v, ok := e.InitExt(func() any { return new(T) }).(*T)
	if !ok {
		// Another type's value (a balancer's targets handed to a
		// different strategy in a test, say): replace it.
		v = new(T)
		e.SetExt(v)
	}
	return v
}

// Class is how a pick's request ended, as every strategy reads it: a
// type, not an error's text, so that a caller's wording cannot change what
// a strategy learns.
type Class uint8

const (
	Succeeded  Class = iota // the target answered
	Failed                  // the target failed it: an error, or a status counted as failure
	Refused                 // the target had no capacity for it (HTTP 503 or 429, a full pool): capacity cuts its limit
	ClientGone              // the caller's client left first: nothing learned of the target
)

func (c Class) String() string {
	switch c {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Refused:
		return "refused"
	case ClientGone:
		return "client_gone"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// ErrClientGone is what a caller reports (wrapped or not) when its client
// left before the target answered: the permit goes back, and neither a
// failure nor a latency is recorded.
var ErrClientGone = errors.New("balance: the client left before the target answered")

// ErrRejected is what a caller reports (wrapped or not) when a target
// refused a request for lack of capacity (HTTP 503 or 429, a full pool):
// the outcome's Class is Refused, on which the capacity strategy
// (package balance/capacity) cuts the target's learned limit.
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

// IsTimeout reports whether err says the target did not answer in time:
// it has a method Timeout() bool that returns true, as net.Error,
// os.ErrDeadlineExceeded and context.DeadlineExceeded do. Such an
// outcome is a failure, and its latency measures the caller's patience,
// not the target: AvgLatency leaves it out.
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return err != nil && errors.As(err, &t) && t.Timeout()
}

// ClassOf classifies a reported error: nil succeeded; ErrClientGone, the
// client left; ErrRejected or an error with a Rejected() bool method that
// returns true, refused; anything else failed.
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return Succeeded
	case errors.Is(err, ErrClientGone):
		return ClientGone
	case IsRejection(err):
		return Refused
	}
	return Failed
}

// Outcome is what Done reports about one pick.
type Outcome struct {
	Class    Class
	Latency  time.Duration // zero when unknown, and for ClientGone
	Err      error         // the error reported, nil when it succeeded
	InFlight int64         // in-flight on the endpoint just before this pick ended (this pick included)
	Now      int64         // the balancer's clock (ns) when the pick ended
	Waiting  int           // callers queued in Wait when the pick ended: demand no free permit could take
	Seq      uint64        // the pick's number among its endpoint's (1, 2, …): Endpoint.Picks less Seq went out after it
}

// TimedOut reports whether the outcome is a failure by timeout
// (IsTimeout): the target did not answer.
func (o Outcome) TimedOut() bool { return o.Class == Failed && IsTimeout(o.Err) }

// Sent is the balancer's clock when the request was sent: Now less the
// latency.
func (o Outcome) Sent() int64 { return o.Now - int64(o.Latency) }

// PickInfo is what a Picker knows about one pick.
type PickInfo struct {
	// Key is the request's key for the hash strategies ("" is a key too).
	Key string
	// Load is the load units the pick adds (least_loaded); 0 means 1.
	Load int64
	// Exclude lists endpoints not to pick (those a retry already tried).
	Exclude []*Endpoint
	// Arrived, when set, is when the caller's request arrived: Wait
	// queues it where a waiter that came then would be, so that a
	// retry (a refusal sent back to the queue) keeps its place instead
	// of waiting the whole queue again. Zero: now.
	Arrived time.Time

	now  int64 // clock, set only while the snapshot is warming
	snap *snapshot
}

// Usable reports whether e may be picked now: not excluded and with a free
// permit.
func (in *PickInfo) Usable(e *Endpoint) bool {
	if in.Excluded(e) {
		return false
	}
	l := e.s.limit.Load()
	return l <= 0 || e.s.inflight.Load() < l
}

// Excluded reports whether the pick excludes e's target (Exclude names
// it, as an endpoint of this snapshot or of an older one).
func (in *PickInfo) Excluded(e *Endpoint) bool {
	for _, x := range in.Exclude {
		if x == e || x.s == e.s {
			return true
		}
	}
	return false
}

// Wake tells the balancer that n permits came free during this pick
// other than by a pick's end (the picker gave back permits it held, or
// raised a limit): up to n callers queued in Balancer.Wait are woken to
// take them, as n releases would wake them. Without it they would sleep
// until picks elsewhere end. After Observe no call is needed: the
// balancer wakes one waiter per permit that a raised limit added. Wake
// on a PickInfo that no balancer made (a picker called directly) does
// nothing.
func (in *PickInfo) Wake(n int64) {
	if n > 0 && in.snap != nil {
		in.snap.b.wakeWaiters(nil, n)
	}
}

// Weight returns e's weight with warm-up applied.
func (in *PickInfo) Weight(e *Endpoint) float64 {
	if in.now == 0 {
		return float64(e.t.Weight)
	}
	return in.snap.b.live.Load().warm.weight(e, in.now)
}

// Warming reports whether some endpoint of the snapshot is still warming
// up, in which case Weight may differ from the configured weight.
func (in *PickInfo) Warming() bool { return in.now != 0 }

// Now returns the balancer's clock in nanoseconds (monotonic, from the
// balancer's creation).
func (in *PickInfo) Now() int64 {
	if in.now != 0 {
		return in.now
	}
	return in.snap.b.now()
}

// Factory makes a Strategy from its settings (Options.Settings; nil when
// none were given, which means every default). It decodes them into its
// own settings type, fills the defaults, validates, and reports a bad
// setting as a *FieldError naming its key.
type Factory func(s Settings) (Strategy, error)

// Registry maps strategy names to factories. The zero value is empty;
// NewRegistry returns one holding the built-in strategies.
type Registry struct {
	mu sync.RWMutex
	m  map[string]Factory
}

// ErrUnknownStrategy is returned (wrapped) for a name no one registered.
var ErrUnknownStrategy = errors.New("balance: unknown strategy")

// NewRegistry returns a registry holding the built-in strategies. A
// strategy of its own package registers itself in the default registry
// only; here it is added like any plug-in (for capacity,
// r.Register(capacity.Name, capacity.New)).
func NewRegistry() *Registry {
	r := &Registry{}
	for name, f := range builtins() {
		_ = r.Register(name, f)
	}
	return r
}

// Register adds a strategy under name. Registering a name twice is an
// error, so a plug-in cannot silently replace a built-in.
func (r *Registry) Register(name string, f Factory) error {
	if name == "" || f == nil {
		return errors.New("balance: register needs a name and a factory")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]Factory{}
	}
	if _, ok := r.m[name]; ok {
		return fmt.Errorf("balance: strategy %q already registered", name)
	}
	r.m[name] = f
	return nil
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Has reports whether name is registered.
func (r *Registry) Has(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.m[name]
	return ok
}

// Check reports whether name is registered and accepts the settings s,
// without building a balancer (a configuration check).
func (r *Registry) Check(name string, s Settings) error {
	f, err := r.factory(name)
	if err != nil {
		return err
	}
	if _, err := f(s); err != nil {
		return fmt.Errorf("balance: strategy %q: %w", name, err)
	}
	return nil
}

func (r *Registry) factory(name string) (Factory, error) {
	r.mu.RLock()
	f, ok := r.m[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownStrategy, name, r.Names())
	}
	return f, nil
}

// defaultRegistry backs the package-level Register, Names and New: like
// database/sql drivers, strategies plug in by name process-wide.
var defaultRegistry = NewRegistry()

// Register adds a strategy to the default registry.
func Register(name string, f Factory) error { return defaultRegistry.Register(name, f) }

// Names lists the strategies of the default registry.
func Names() []string { return defaultRegistry.Names() }

// Known reports whether the default registry has a strategy by that name.
func Known(name string) bool { return defaultRegistry.Has(name) }

// Check is Registry.Check on the default registry.
func Check(name string, s Settings) error { return defaultRegistry.Check(name, s) }

func builtins() map[string]Factory {
	return map[string]Factory{
		"random":            newRandom,
		"round_robin":       newRoundRobin,
		"hash":              newHash,
		"bounded_hash":      newBoundedHash,
		"least_active":      newLeastActive,
		"shortest_response": newShortestResponse,
		"p2c":               newP2C,
		"least_loaded":      newLeastLoaded,
	}
}
