package gateway

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery"
)

// An upstream's targets come from one source at a time: the config file,
// the admin API or a discovery provider. Every change, whatever its
// source, goes through applySet and so through the balancer's Update:
// targets that stay keep their state, new ones warm up, gone ones drain.

// Sources of a target set, as GET /upstreams shows them.
const (
	sourceConfig = "config"
	sourceAdmin  = "admin"
)

// targetSet is an upstream's live target list and where it came from.
type targetSet struct {
	source  string
	targets []config.Target
}

// applySet makes set u's targets; g.mu must be held.
func (g *Gateway) applySet(u *upstream, set *targetSet) error {
	if err := g.apply(u, set.targets); err != nil {
		return err
	}
	u.set.Store(set)
	return nil
}

// source is where u's targets came from.
func (u *upstream) source() string {
	if s := u.set.Load(); s != nil {
		return s.source
	}
	return sourceConfig
}

// reloadSet is the target set an upstream starts with after a reload,
// given the one it replaces (nil when new):
//   - static targets: the file's, unless they did not change and the admin
//     API had replaced them, in which case the admin's set stays;
//   - discovery: the last set it had (the provider's next answer replaces
//     it), or none for a new upstream until its provider answers.
//
// A kept set must still fit the upstream's scheme (a tls block added or
// removed): otherwise it is dropped.
func reloadSet(u, old *upstream) *targetSet {
	var kept *targetSet
	if old != nil {
		if s := old.set.Load(); s != nil && checkSchemes(u, s.targets) == nil {
			kept = s
		}
	}
	if u.cfg.Discovery != nil {
		if kept != nil {
			return kept
		}
		return &targetSet{source: u.cfg.Discovery.Kind()}
	}
	if kept != nil && kept.source == sourceAdmin && old.cfg.Discovery == nil && reflect.DeepEqual(old.cfg.Targets, u.cfg.Targets) {
		return kept
	}
	return &targetSet{source: sourceConfig, targets: u.cfg.Targets}
}

// watchers runs the discovery providers, one per upstream that has a
// discovery block. Its map is guarded by Gateway.mu.
type watchers struct {
	m  map[string]*watcher
	wg sync.WaitGroup
}

type watcher struct {
	cfg    *config.Discovery
	cancel context.CancelFunc
	first  chan struct{} // closed at the provider's first answer
}

// firstAnswerWait bounds how long New waits for new providers' first
// answers, so an upstream starts with targets when its source is quick.
const firstAnswerWait = 5 * time.Second

// syncWatchers starts a provider for every upstream of rt with a
// discovery block, keeps those whose block did not change, and stops the
// rest; g.mu must be held. It returns the first-answer channels of the
// providers it started.
func (g *Gateway) syncWatchers(rt *liveConfig, ps map[string]discovery.Provider) []chan struct{} {
	if g.disc.m == nil {
		g.disc.m = map[string]*watcher{}
	}
	var started []chan struct{}
	for name, w := range g.disc.m {
		if u := rt.ups[name]; u == nil || u.cfg.Discovery == nil || !reflect.DeepEqual(u.cfg.Discovery, w.cfg) {
			w.cancel()
			delete(g.disc.m, name)
		}
	}
	for _, u := range rt.order {
		if u.cfg.Discovery == nil || g.disc.m[u.name] != nil {
			continue
		}
		g.startWatcher(u.name, u.cfg.Discovery, ps[u.name])
		started = append(started, g.disc.m[u.name].first)
	}
	return started
}

// startWatcher runs p for the named upstream; g.mu must be held.
func (g *Gateway) startWatcher(name string, d *config.Discovery, p discovery.Provider) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cfg: d, cancel: cancel, first: make(chan struct{})}
	g.disc.m[name] = w
	g.disc.wg.Add(1)
	go func() {
		defer g.disc.wg.Done()
		var once sync.Once
		p.Watch(ctx, func(ts []discovery.Target) {
			defer once.Do(func() { close(w.first) })
			g.discovered(name, w, p.Source(), ts)
		})
	}()
}

// discovered applies a provider's list, unless the provider was replaced
// or stopped meanwhile. A list the gateway cannot use is refused whole and
// the last one stays.
func (g *Gateway) discovered(name string, w *watcher, source string, ts []discovery.Target) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.disc.m[name] != w {
		return
	}
	u := g.rt.Load().ups[name]
	if u == nil {
		return
	}
	cts, err := discovery.ConfigTargets(ts, u.cfg.Discovery.Warmup.D())
	if err == nil {
		err = checkSchemes(u, cts)
	}
	if err == nil {
		err = g.applySet(u, &targetSet{source: source, targets: cts})
	}
	if err != nil {
		g.metrics.discovery.WithLabelValues(name, source, "refused").Inc()
		g.log.Error("discovery: targets refused; keeping the last ones", "upstream", name, "source", source, "err", err)
		return
	}
	g.metrics.discovery.WithLabelValues(name, source, "applied").Inc()
	g.log.Info("discovery: targets applied", "upstream", name, "source", source, "targets", len(cts))
}

// awaitFirst waits, at most firstAnswerWait in all, for the providers'
// first answers.
func awaitFirst(chs []chan struct{}) {
	deadline := time.NewTimer(firstAnswerWait)
	defer deadline.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

// stopWatchers stops every provider and waits for them to return.
func (g *Gateway) stopWatchers() {
	g.mu.Lock()
	for name, w := range g.disc.m {
		w.cancel()
		delete(g.disc.m, name)
	}
	g.mu.Unlock()
	g.disc.wg.Wait()
}

// providers builds the discovery provider of every upstream of cfg with
// a discovery block, before anything is changed: a config whose provider
// cannot be built (a provider the gateway was not given, a DNS source
// with no server) is refused whole, never half applied.
func (g *Gateway) providers(cfg *config.Config) (map[string]discovery.Provider, error) {
	ps := map[string]discovery.Provider{}
	for _, name := range sortedKeys(cfg.Upstreams) {
		d := cfg.Upstreams[name].Discovery
		switch {
		case d == nil:
			continue
		case d.Provider != "":
			p := g.opts.Providers[d.Provider]
			if p == nil {
				return nil, fmt.Errorf("upstreams.%s.discovery.provider: no provider %q among the gateway's (have %v)", name, d.Provider, sortedKeys(g.opts.Providers))
			}
			ps[name] = p
		default:
			p, err := discovery.New(d, g.log)
			if err != nil {
				return nil, fmt.Errorf("upstreams.%s.discovery: %w", name, err)
			}
			ps[name] = p
		}
	}
	return ps, nil
}
