package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// ErrNoUpstream is returned (wrapped) for an upstream name that does not
// exist.
var ErrNoUpstream = errors.New("gateway: no such upstream")

// SetTargets replaces an upstream's targets. Targets that stay keep their
// state (in-flight, statistics, warm-up, health); new ones warm up;
// removed ones get no new requests while their in-flight ones finish. The
// change survives a reload that leaves the upstream's targets in the file
// as they were; on a discovery upstream it lasts until the provider's next
// change.
func (g *Gateway) SetTargets(name string, ts []config.Target) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.rt.Load().ups[name]
	if u == nil {
		return fmt.Errorf("%w %q", ErrNoUpstream, name)
	}
	if err := checkTargets(ts); err != nil {
		return fmt.Errorf("targets%w", err)
	}
	if err := checkSchemes(u, ts); err != nil {
		return fmt.Errorf("targets%w", err)
	}
	return g.applySet(u, &targetSet{source: sourceAdmin, targets: ts})
}

// UpstreamView is the admin API's view of an upstream.
type UpstreamView struct {
	Name     string       `json:"name"`
	Strategy string       `json:"strategy"`
	HashKey  string       `json:"hash_key,omitempty"`
	Targets  []TargetView `json:"targets"`
}

// TargetView is the admin API's view of a target.
type TargetView struct {
	URL             string     `json:"url"`
	Weight          int        `json:"weight"`
	EffectiveWeight int        `json:"effective_weight"`
	Warmup          string     `json:"warmup,omitempty"`
	Warming         bool       `json:"warming"`
	MaxConcurrency  int        `json:"max_concurrency"`
	Disabled        bool       `json:"disabled"`
	Healthy         bool       `json:"healthy"`
	Ejected         bool       `json:"ejected"`
	EjectedUntil    *time.Time `json:"ejected_until,omitempty"`
	InFlight        int64      `json:"in_flight"`
	// Permits is the in-flight limit in force (0: unlimited) and
	// PermitsSource where it comes from: "configured" (max_concurrency),
	// "learned" (a strategy such as capacity set it) or "" when
	// unlimited.
	Permits       int64   `json:"permits"`
	PermitsSource string  `json:"permits_source,omitempty"`
	LatencyAvgMS  float64 `json:"latency_avg_ms"`
	Requests      uint64  `json:"requests"`
	Failures      uint64  `json:"failures"`
	// Source is where the target came from: config, admin, dns, file or
	// etcd.
	Source string `json:"source"`
	// StartedAt is the start time its source reported; warm-up counts
	// from it.
	StartedAt *time.Time `json:"started_at,omitempty"`
}

// Upstreams returns the live view of every upstream, sorted by name.
func (g *Gateway) Upstreams() []UpstreamView {
	var out []UpstreamView
	for _, u := range g.upstreams() {
		v := UpstreamView{Name: u.name, Strategy: u.cfg.Strategy, HashKey: u.hashKey(), Targets: []TargetView{}}
		source := u.source()
		for _, e := range u.bal.Endpoints() {
			v.Targets = append(v.Targets, u.targetView(e, source))
		}
		out = append(out, v)
	}
	return out
}

// hashKey is the hash key shown for u: only a strategy that uses one
// has one.
func (u *upstream) hashKey() string {
	if u.usesKey {
		return u.cfg.HashKey
	}
	return ""
}

// scheme is the scheme of u's target URLs.
func (u *upstream) scheme() string {
	if u.tls != nil {
		return "https://"
	}
	return "http://"
}

// targetView maps a target's balancer stats onto the admin API's view;
// source is u.source(), read once per upstream.
func (u *upstream) targetView(e balance.EndpointStats, source string) TargetView {
	t := e.Target
	tv := TargetView{Source: source,
		URL: u.scheme() + t.Addr, Weight: t.Weight, EffectiveWeight: e.EffectiveWeight,
		Warming: e.Warming, MaxConcurrency: t.MaxConcurrency, Disabled: t.Disabled,
		Healthy: e.Healthy, Ejected: e.Ejected, InFlight: e.InFlight,
		LatencyAvgMS: float64(e.AvgLatency.Microseconds()) / 1000, Requests: e.Requests, Failures: e.Failures,
	}
	tv.Permits = e.Limit
	switch {
	case e.Limit > 0 && t.MaxConcurrency > 0:
		tv.PermitsSource = "configured"
	case e.Limit > 0:
		tv.PermitsSource = "learned"
	}
	if t.Warmup > 0 {
		tv.Warmup = t.Warmup.String()
	}
	if !t.StartedAt.IsZero() {
		tv.StartedAt = &t.StartedAt
	}
	if e.Ejected {
		until := e.EjectedUntil
		tv.EjectedUntil = &until
	}
	return tv
}

func (g *Gateway) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /upstreams", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"upstreams": g.Upstreams()})
	})
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"routes": g.Routes()})
	})
	mux.HandleFunc("GET /upstreams/{name}", func(w http.ResponseWriter, r *http.Request) {
		for _, v := range g.Upstreams() {
			if v.Name == r.PathValue("name") {
				writeJSON(w, 200, v)
				return
			}
		}
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("no upstream %q", r.PathValue("name"))})
	})
	mux.HandleFunc("PUT /upstreams/{name}/targets", func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		if err != nil {
			writeJSON(w, 400, map[string]string{"error": "reading body: " + err.Error()})
			return
		}
		ts, err := config.ParseTargets(data)
		if err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		if err := g.SetTargets(r.PathValue("name"), ts); err != nil {
			code := 400
			if errors.Is(err, ErrNoUpstream) {
				code = 404
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		for _, v := range g.Upstreams() {
			if v.Name == r.PathValue("name") {
				writeJSON(w, 200, v)
			}
		}
	})
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		if err := g.Reload(); err != nil {
			g.log.Error("reload refused; running config unchanged", "err", err)
			writeJSON(w, 400, map[string]string{"error": err.Error(), "status": "running config unchanged"})
			return
		}
		writeJSON(w, 200, map[string]string{"status": "reloaded"})
	})
	mux.HandleFunc("GET /{$}", adminIndex(mux)) // an index of the endpoints (admin_index.go)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{}))
	// Profiles, for finding where the proxy's time goes (docs/benchmarks.md).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() {
			writeJSON(w, 503, map[string]string{"status": "draining"})
			return
		}
		writeJSON(w, 200, map[string]string{"status": "ok"})
	})
	g.consoleRoutes(mux) // admin_console.go
	return withToken(g.cfg().Admin.Token, mux)
}

// withToken asks every request but the console's pages (they hold no
// data) for the admin token, when one is set. The token cannot change
// without a restart (a reload refuses an admin change).
func withToken(token string, mux *http.ServeMux) http.Handler {
	if token == "" {
		return mux
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); !isConsolePage(pattern) &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fulcrum-admin"`)
			writeJSON(w, 401, map[string]string{"error": "admin token required (Authorization: Bearer <token>)"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
