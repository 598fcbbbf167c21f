package balance

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Options configure a Balancer. The zero value is usable: every field has a
// default, given in its comment.
// LIFOPatience, as Options.LIFOAfter, makes the queue adaptive LIFO
// once its oldest waiter has waited half the patience that waiters have
// shown: the mean wait (an EWMA) of those that left the queue unserved,
// their client gone or their deadline passed. Until one has, nobody has
// waited too long and the queue stays first come, first served. A
// spike that drains within the clients' patience is then served in
// order, where a fixed 100 ms switched to newest first and the spike's
// oldest requests passed their clients' timeouts; under sustained
// overload the clients that give up set the switch below their
// patience, and the queue serves the newest before the oldest die in
// flight (first come, first served there serves requests whose clients
// are gone).
const LIFOPatience time.Duration = -1

type Options struct {
	// Registry resolves the strategy name; nil means the default registry.
	Registry *Registry

	// Warmup selects the warm-up formula: "linear" (default; Dubbo's
	// weight*uptime/window clamped to [1, weight]; "seed" is accepted as
	// its old name) or "envoy" (Envoy's slow start:
	// weight*max(min_weight_percent, time_factor^(1/aggression))).
	Warmup string
	// Aggression is Envoy's warm-up curve exponent (default 1: linear).
	Aggression float64
	// MinWeightPercent is Envoy's floor of the ramp (default 10).
	MinWeightPercent float64

	// Settings are the strategy's own settings, which its factory decodes
	// and checks (HashSettings, BoundedHashSettings, P2CSettings,
	// ShortestResponseSettings, capacity.Settings); nil means the
	// strategy's defaults.
	Settings Settings

	// Passive configures ejection on consecutive failures (off by default).
	Passive Passive

	// LIFOAfter turns Wait's queue to adaptive LIFO: while the longest
	// waiter has waited less than this, a returned permit goes to the
	// oldest waiter (first come, first served); past it, the queue is
	// standing, not a burst, and the permit goes to the newest one. The
	// newest is the one whose client is still likely to be there, and
	// it waits a permit's turn instead of the whole queue's, so under
	// sustained overload most requests are served at once and the
	// oldest wait out their deadline and fail, instead of every request
	// waiting the queue's length (Facebook's adaptive LIFO, "Fail at
	// Scale", 2015). 0 (the default) keeps the queue first come, first
	// served. LIFOPatience sets it from the waiters' own patience.
	LIFOAfter time.Duration

	// TrackLatency makes Done measure latency for every strategy (the
	// latency-driven ones always do). Report takes a latency regardless.
	TrackLatency bool

	// Clock replaces time.Now (tests use a fake clock).
	Clock func() time.Time
	// Rand replaces the runtime's random source for every draw the
	// strategies make (simulations seed one, rand.NewPCG(seed, 0), so a
	// run repeats). The balancer serialises its calls, so it need not be
	// safe for concurrent use; nil, the default, is the runtime's source,
	// which takes no lock.
	Rand rand.Source
}

// Passive is outlier ejection from reported outcomes.
type Passive struct {
	// MaxFailures consecutive failures (within Window) eject a target;
	// 0 turns passive ejection off (a config that turns it on without a
	// count uses DefaultMaxFailures).
	MaxFailures int
	// Window bounds the time over which the failures must fall (default
	// 10s).
	Window time.Duration
	// EjectFor is the first ejection's length (default 30s); each repeat
	// doubles it up to MaxEjectFor (default 10 x EjectFor). A target that
	// stays clean for MaxEjectFor starts again from EjectFor.
	EjectFor    time.Duration
	MaxEjectFor time.Duration
	// MaxEjectedPercent caps the share of targets ejected at once (default
	// 50); one target may always be ejected.
	MaxEjectedPercent int
}

// Defaults of the options, the one place they are set: the gateway's
// config fills its own fields from these (and from WarmupFormula and
// Passive.WithDefaults), so a default cannot differ between the library and
// the gateway.
const (
	DefaultWarmup            = "linear"
	DefaultAggression        = 1.0
	DefaultMinWeightPercent  = 10.0
	DefaultMaxFailures       = 5 // when passive ejection is turned on without a count
	DefaultPassiveWindow     = 10 * time.Second
	DefaultEjectFor          = 30 * time.Second
	DefaultMaxEjectFactor    = 10 // MaxEjectFor's default, in EjectFors
	DefaultMaxEjectedPercent = 50
)

// WarmupFormulas are the warm-up formulas Options.Warmup takes.
var WarmupFormulas = []string{"linear", "envoy"}

// WarmupFormula resolves a warm-up formula's name: "" is the default,
// "seed" the old name of linear; ok is false for an unknown name.
func WarmupFormula(name string) (formula string, ok bool) {
	switch name {
	case "":
		return DefaultWarmup, true
	case "seed":
		return "linear", true
	case "linear", "envoy":
		return name, true
	}
	return name, false
}

// WithDefaults returns p with its zero durations and percentage set to
// their defaults (MaxFailures is left alone: 0 means off).
func (p Passive) WithDefaults() Passive {
	if p.Window == 0 {
		p.Window = DefaultPassiveWindow
	}
	if p.EjectFor == 0 {
		p.EjectFor = DefaultEjectFor
	}
	if p.MaxEjectFor == 0 {
		p.MaxEjectFor = DefaultMaxEjectFactor * p.EjectFor
	}
	if p.MaxEjectedPercent == 0 {
		p.MaxEjectedPercent = DefaultMaxEjectedPercent
	}
	return p
}

func (o *Options) normalize() error {
	w, ok := WarmupFormula(o.Warmup)
	if !ok {
		return fmt.Errorf("balance: warmup: unknown formula %q (linear or envoy)", o.Warmup)
	}
	o.Warmup = w
	if o.Aggression == 0 {
		o.Aggression = DefaultAggression
	}
	if o.Aggression < 0 {
		return fmt.Errorf("balance: aggression: %v is negative", o.Aggression)
	}
	if o.LIFOAfter < 0 && o.LIFOAfter != LIFOPatience {
		return fmt.Errorf("balance: lifo_after: %v is negative", o.LIFOAfter)
	}
	if o.MinWeightPercent == 0 {
		o.MinWeightPercent = DefaultMinWeightPercent
	}
	if o.MinWeightPercent < 0 || o.MinWeightPercent > 100 {
		return fmt.Errorf("balance: min_weight_percent: %v is outside 0..100", o.MinWeightPercent)
	}
	if o.Passive.MaxFailures < 0 {
		return fmt.Errorf("balance: passive.max_failures: %d is negative", o.Passive.MaxFailures)
	}
	o.Passive = o.Passive.WithDefaults()
	p := &o.Passive
	if p.Window < 0 || p.EjectFor < 0 || p.MaxEjectFor < p.EjectFor {
		return fmt.Errorf("balance: passive: window, eject_for must be positive and max_eject_for at least eject_for")
	}
	if p.MaxEjectedPercent < 0 || p.MaxEjectedPercent > 100 {
		return fmt.Errorf("balance: passive.max_ejected_percent: %d is outside 0..100", p.MaxEjectedPercent)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return nil
}
