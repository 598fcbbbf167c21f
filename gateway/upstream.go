package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/balance/probe"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/health"
)

// liveConfig is one configuration made live: routes and upstreams. It is
// immutable once published except for each upstream's target set, which
// the admin API swaps atomically.
type liveConfig struct {
	cfg    *config.Config
	router *router
	ups    map[string]*upstream
	order  []*upstream // by name
}

// upstream is a named group of targets made live.
type upstream struct {
	name     string
	cfg      *config.Upstream
	bal      *balance.Balancer
	usesKey  bool
	keyLower string // hash_key's header name in lower case, as reqView.header takes it
	// readsLoad: the strategy learns from targets' Fulcrum-Load headers
	// (probe), so each response head is searched for one.
	readsLoad bool
	statuses  [600]bool // statuses that are retried and count as failures
	budget    budget
	targets   atomic.Pointer[map[string]*target]
	checker   atomic.Pointer[health.Checker]
	set       atomic.Pointer[targetSet] // live targets and their source (sources.go)
	tls       *http.Transport           // for https targets; nil for http (upstream_tls.go)
	m         *metrics
	// reconfigure: the balancer is the old config's, kept for what it
	// learned, and ApplyConfig hands it this config's options.
	reconfigure bool
}

// target is one target's connection pool and metric handles.
type target struct {
	addr    string
	pool    *pool
	m       *targetMetrics
	ejected atomic.Bool // last seen ejection state, to count ejections
}

func (u *upstream) target(addr string) *target {
	return (*u.targets.Load())[addr]
}

// balanceOptions maps the upstream config onto balance options.
func balanceOptions(u *config.Upstream) balance.Options {
	o := balance.Options{Warmup: u.Warmup, Settings: u.Settings(), LIFOAfter: u.Queue.LIFO()}
	if p := u.Health.Passive; p != nil {
		o.Passive = balance.Passive{
			MaxFailures:       p.MaxFailures,
			Window:            p.Window.D(),
			EjectFor:          p.EjectFor.D(),
			MaxEjectFor:       p.MaxEjectFor.D(),
			MaxEjectedPercent: p.MaxEjectedPercent,
		}
	}
	return o
}

func balanceTargets(ts []config.Target) []balance.Target {
	out := make([]balance.Target, len(ts))
	for i, t := range ts {
		out[i] = balance.Target{Addr: t.Addr, Weight: t.W(), Warmup: t.Warmup.D(), MaxConcurrency: t.MaxConcurrency, Disabled: t.Disabled, StartedAt: t.StartedAt.Time}
	}
	return out
}

// sameBalancer reports whether an upstream's balancer can carry over to a
// new config (its state kept): same strategy, settings and balance options
// (queue.lifo_after aside: ApplyConfig sets it on the kept balancer).
func sameBalancer(a, b *config.Upstream) bool {
	if a.Strategy != b.Strategy || a.Warmup != b.Warmup || !a.SameSettings(b) {
		return false
	}
	pa, pb := a.Health.Passive, b.Health.Passive
	if (pa == nil) != (pb == nil) {
		return false
	}
	return pa == nil || *pa == *pb
}

// closeLimiters closes the rate limiters of rt that keep is not using
// (keep may be nil): those of a config that did not go live, or of one
// replaced.
func (rt *liveConfig) closeLimiters(keep *liveConfig) {
	var used map[*rateLimiter]bool
	if keep != nil {
		used = keep.router.limiters()
	}
	for l := range rt.router.limiters() {
		if !used[l] {
			l.close()
		}
	}
}

// upstream is the named upstream of rt; nil when rt is nil or has none.
func (rt *liveConfig) upstream(name string) *upstream {
	if rt == nil {
		return nil
	}
	return rt.ups[name]
}

// build makes a liveConfig from cfg, reusing old's balancers (and so their
// target state) where compatible. Nothing is started; nothing of old is
// changed, so a failure leaves the running gateway untouched.
func (g *Gateway) build(cfg *config.Config, old *liveConfig) (*liveConfig, error) {
	rt := &liveConfig{cfg: cfg, ups: map[string]*upstream{}}
	for _, name := range sortedKeys(cfg.Upstreams) {
		uc := cfg.Upstreams[name]
		u := &upstream{name: name, cfg: uc, m: g.metrics}
		g.metrics.upstream(name, uc)
		for _, s := range uc.Retry.Statuses {
			u.statuses[s] = true
		}
		u.budget.init(uc.Retry.Budget, uc.Retry.MinPerSecond)
		if uc.TLS != nil {
			tr, err := upstreamTransport(cfg, uc.TLS)
			if err != nil {
				return nil, fmt.Errorf("upstreams.%s.%w", name, err)
			}
			u.tls = tr
		}
		o := balanceOptions(uc)
		o.Clock = g.opts.Clock
		if ou := old.upstream(name); ou != nil && ou.cfg.Strategy == uc.Strategy {
			// The same strategy keeps its balancer and so everything its
			// targets learned; new settings are checked here and handed
			// to it by ApplyConfig (build changes nothing live).
			if !sameBalancer(ou.cfg, uc) {
				if err := balance.CheckOptions(uc.Strategy, o); err != nil {
					return nil, fmt.Errorf("upstreams.%s: %w", name, err)
				}
				u.reconfigure = true
			}
			u.bal = ou.bal
		}
		if u.bal == nil {
			b, err := balance.New(uc.Strategy, o)
			if err != nil {
				return nil, fmt.Errorf("upstreams.%s: %w", name, err)
			}
			u.bal = b
		}
		u.usesKey = u.bal.UsesKey() // compute a request's key only for strategies that use it
		u.keyLower = strings.ToLower(uc.Key.Name)
		u.readsLoad = uc.Strategy == probe.Name
		rt.ups[name] = u
		rt.order = append(rt.order, u)
	}
	var oldRouter *router
	if old != nil {
		oldRouter = old.router
	}
	var err error
	if rt.router, _, err = newRouter(cfg.Routes, rt.ups, oldRouter, g); err != nil {
		return nil, err
	}
	return rt, nil
}

// apply sets u's targets: balancer update (state of staying targets kept),
// target map, health checks.
func (g *Gateway) apply(u *upstream, ts []config.Target) error {
	if err := u.bal.Update(balanceTargets(ts)); err != nil {
		return err
	}
	m := make(map[string]*target, len(ts))
	old := u.targets.Load()
	for _, t := range ts {
		if old != nil && (*old)[t.Addr] != nil {
			m[t.Addr] = (*old)[t.Addr]
			continue
		}
		m[t.Addr] = &target{addr: t.Addr, pool: g.pool(t.Addr), m: g.metrics.target(u.name, t.Addr)}
	}
	u.targets.Store(&m)
	g.startChecks(u)
	return nil
}

// startChecks points u's active health checks at its current targets. A
// running checker with the same check keeps going (targets that stay
// keep their probe loops, see health.Checker.Set); a changed check, or
// none, replaces it. New targets start from the balancer's verdicts. A
// gateway shutting down starts none (g.mu is held, as Shutdown holds it
// to stop them).
func (g *Gateway) startChecks(u *upstream) {
	var c *health.Checker
	if a := u.cfg.Health.Active; a != nil && !g.draining.Load() {
		var ts []health.Target
		for _, e := range u.bal.Endpoints() {
			ts = append(ts, health.Target{Addr: e.Target.Addr, Healthy: e.Healthy})
		}
		cfg := health.Config{Path: a.Path, Interval: a.Interval.D(), Timeout: a.Timeout.D(),
			HealthyThreshold: a.HealthyThreshold, UnhealthyThreshold: a.UnhealthyThreshold}
		client := g.healthClient
		if u.tls != nil {
			cfg.Scheme = "https"
		}
		if old := u.checker.Load(); old != nil && old.Config() == cfg && (u.tls == nil || old.Client().Transport == u.tls) {
			old.Set(ts)
			return
		}
		if u.tls != nil {
			client = &http.Client{Transport: u.tls}
		}
		c = health.Start(cfg, ts, healthLog{g: g, up: u, th: cfg}, client, func(addr string, ok bool) {
			r := "ok"
			if !ok {
				r = "fail"
			}
			g.metrics.checks.WithLabelValues(u.name, addr, r).Inc()
		})
	}
	if old := u.checker.Swap(c); old != nil {
		go old.Stop()
	}
}

// pool returns the gateway-wide connection pool for addr, so pooled
// connections survive reloads.
func (g *Gateway) pool(addr string) *pool {
	g.poolMu.Lock()
	defer g.poolMu.Unlock()
	if p := g.pools[addr]; p != nil {
		return p
	}
	t := g.cfg().Timeouts
	p := &pool{addr: addr, max: 1024}
	p.setTimeouts(t.Dial.D(), t.UpstreamIdle.D())
	g.pools[addr] = p
	return p
}

// budget caps retries at a share of requests over the last ten seconds
// plus a floor per second, so retries cannot multiply an outage.
type budget struct {
	ratio float64
	floor int64
	slots [10]budgetSlot
}

type budgetSlot struct {
	sec  atomic.Int64
	reqs atomic.Int64
	rets atomic.Int64
}

func (b *budget) init(ratio float64, perSecond int) {
	b.ratio, b.floor = ratio, int64(perSecond)*int64(len(b.slots))
}

// slot is sec's slot, emptied when it last held an older second. It
// never moves back: a count for a second the slot has left behind goes
// to the newer second rather than wiping it.
func (b *budget) slot(sec int64) *budgetSlot {
	s := &b.slots[sec%int64(len(b.slots))]
	if old := s.sec.Load(); old < sec && s.sec.CompareAndSwap(old, sec) {
		s.reqs.Store(0)
		s.rets.Store(0)
	}
	return s
}

// request counts one request.
func (b *budget) request(sec int64) { b.slot(sec).reqs.Add(1) }

// retry takes one retry from the budget if there is one left.
func (b *budget) retry(sec int64) bool {
	var reqs, rets int64
	for i := range b.slots {
		s := &b.slots[i]
		if sec-s.sec.Load() < int64(len(b.slots)) {
			reqs += s.reqs.Load()
			rets += s.rets.Load()
		}
	}
	if float64(rets) >= b.ratio*float64(reqs)+float64(b.floor) {
		return false
	}
	b.slot(sec).rets.Add(1)
	return true
}

// refund gives back a retry taken at sec that was not made.
func (b *budget) refund(sec int64) { b.slot(sec).rets.Add(-1) }
