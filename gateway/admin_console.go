package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fulcrum-lb/fulcrum/console"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// This file is what the web console (docs/console.md) adds to the admin
// listener: the console's pages at /ui/ (no token: they hold no data), a
// detailed view of the targets, and per-target actions. The actions go
// through SetTargets' path (g.apply), so a changed target keeps its state.

// ConsoleTargetView is TargetView plus what the console draws.
type ConsoleTargetView struct {
	TargetView
	// Addr is host:port, the key the per-target actions take.
	Addr string `json:"addr"`
	// EjectedForMS is the ejection time left.
	EjectedForMS int64 `json:"ejected_for_ms,omitempty"`
	// WarmupProgress is effective_weight / weight while warming (the
	// balancer does not expose the warm-up's start), 1 otherwise.
	WarmupProgress float64 `json:"warmup_progress"`
}

// ConsoleUpstreamView is GET /console/upstreams' view of an upstream.
type ConsoleUpstreamView struct {
	Name     string              `json:"name"`
	Strategy string              `json:"strategy"`
	HashKey  string              `json:"hash_key,omitempty"`
	Targets  []ConsoleTargetView `json:"targets"`
}

// ConsoleUpstreams is Upstreams with each target's address, ejection
// time left and warm-up progress.
func (g *Gateway) ConsoleUpstreams() []ConsoleUpstreamView {
	now := time.Now()
	out := []ConsoleUpstreamView{}
	for _, u := range g.upstreams() {
		v := ConsoleUpstreamView{Name: u.name, Strategy: u.cfg.Strategy, HashKey: u.hashKey(), Targets: []ConsoleTargetView{}}
		source := u.source()
		for _, e := range u.bal.Endpoints() {
			tv := ConsoleTargetView{TargetView: u.targetView(e, source), Addr: e.Target.Addr, WarmupProgress: 1}
			if e.Ejected {
				tv.EjectedForMS = max(0, e.EjectedUntil.Sub(now).Milliseconds())
			}
			if e.Warming && e.Target.Weight > 0 {
				tv.WarmupProgress = min(1, float64(e.EffectiveWeight)/float64(e.Target.Weight))
			}
			v.Targets = append(v.Targets, tv)
		}
		out = append(out, v)
	}
	return out
}

// TargetChange is the body of POST /upstreams/{name}/targets/{addr}: each
// field given is applied; Drain removes the target (it gets no new
// requests and its in-flight ones finish, as with a PUT that leaves it out).
type TargetChange struct {
	Disabled *bool `json:"disabled,omitempty"`
	Weight   *int  `json:"weight,omitempty"`
	Drain    bool  `json:"drain,omitempty"`
}

// ErrNoTarget is returned (wrapped) for a target address an upstream does
// not have.
var ErrNoTarget = errors.New("gateway: no such target")

// ChangeTarget applies c to one target of an upstream, keeping the state
// of every target that stays: SetTargets with one target changed.
func (g *Gateway) ChangeTarget(name, addr string, c TargetChange) error {
	if c.Weight != nil && *c.Weight < 0 {
		return fmt.Errorf("weight: %d is negative", *c.Weight)
	}
	if c.Drain && (c.Weight != nil || c.Disabled != nil) {
		return errors.New("drain: give drain alone (it removes the target)")
	}
	if !c.Drain && c.Weight == nil && c.Disabled == nil {
		return errors.New("body: nothing to change (give disabled, weight or drain)")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.rt.Load().ups[name]
	if u == nil {
		return fmt.Errorf("%w %q", ErrNoUpstream, name)
	}
	var ts []config.Target
	found := false
	for _, e := range u.bal.Endpoints() {
		t := e.Target
		w := t.Weight
		ct := config.Target{URL: u.scheme() + t.Addr, Addr: t.Addr, Weight: &w, Warmup: config.Duration(t.Warmup),
			MaxConcurrency: t.MaxConcurrency, Disabled: t.Disabled, StartedAt: config.Time{Time: t.StartedAt}}
		if t.Addr == addr {
			found = true
			if c.Drain {
				continue
			}
			if c.Disabled != nil {
				ct.Disabled = *c.Disabled
			}
			if c.Weight != nil {
				*ct.Weight = *c.Weight
			}
		}
		ts = append(ts, ct)
	}
	if !found {
		return fmt.Errorf("%w %q in upstream %q", ErrNoTarget, addr, name)
	}
	if len(ts) == 0 {
		return fmt.Errorf("drain: %s is the upstream's last target", addr)
	}
	// The admin API's set, as a PUT makes it: a reload that keeps the
	// file's targets keeps this change too (g.apply alone left the old
	// set, which such a reload brought back).
	return g.applySet(u, &targetSet{source: sourceAdmin, targets: ts})
}

// consoleRoutes adds the console's pages at /ui/ (withToken lets them
// through without the token) and its API additions to the admin mux.
func (g *Gateway) consoleRoutes(mux *http.ServeMux) {
	mux.Handle("/ui/", console.Handler("gateway"))
	mux.Handle("/ui", console.Handler("gateway"))
	mux.HandleFunc("GET /console/upstreams", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"upstreams": g.ConsoleUpstreams()})
	})
	mux.HandleFunc("POST /upstreams/{name}/targets/{addr}", g.postTargetChange)
}

// isConsolePage reports whether a mux pattern is the console's pages.
func isConsolePage(pattern string) bool { return pattern == "/ui/" || pattern == "/ui" }

func (g *Gateway) postTargetChange(w http.ResponseWriter, r *http.Request) {
	var c TargetChange
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeJSON(w, 400, map[string]string{"error": "body: " + err.Error()})
		return
	}
	name, addr := r.PathValue("name"), r.PathValue("addr")
	if err := g.ChangeTarget(name, addr, c); err != nil {
		code := 400
		if errors.Is(err, ErrNoUpstream) || errors.Is(err, ErrNoTarget) {
			code = 404
		}
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	for _, v := range g.ConsoleUpstreams() {
		if v.Name == name {
			writeJSON(w, 200, v)
		}
	}
}
