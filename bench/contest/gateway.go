package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildFulcrum builds the fulcrum binary from the main module (the parent
// of the bench module) into dir.
func buildFulcrum(dir string) (string, error) {
	root, err := mainModuleDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fulcrum")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/fulcrum")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fulcrum: %v: %s", err, tail(string(b), 600))
	}
	return out, nil
}

// mainModuleDir finds the fulcrum module's root: the nearest parent of the
// working directory whose go.mod declares it.
func mainModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/fulcrum-lb/fulcrum\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no github.com/fulcrum-lb/fulcrum go.mod above the working directory")
		}
		dir = parent
	}
}

// gatewayContender runs `fulcrum gateway` with the strategy. configured
// sets max_concurrency to each provider's first-stage permits; v's
// settings, queue and health, when not empty, are more fields of the
// upstream's strategy_settings, queue and health, and its retry replaces
// the retry fields.
func gatewayContender(strategy string, configured bool, v variant) starter {
	settings, queue, health := v.settings, v.queue, v.health
	retry := "attempts: 2, on: [connect_error, 503]"
	if v.retry != "" {
		retry = v.retry
	}
	return func(ctx context.Context, env *runEnv) (string, func(), error) {
		if env.fulcrum == "" {
			return "", nil, fmt.Errorf("no fulcrum binary (see the build error above)")
		}
		dir, err := os.MkdirTemp(env.dir, "fulcrum-")
		if err != nil {
			return "", nil, err
		}
		port, err := freePort()
		if err != nil {
			return "", nil, err
		}
		var b strings.Builder
		// No access log: the peers run with theirs off (nginx's
		// access_log off; HAProxy logs nothing without a log line).
		// No admin API, but with -v (each of a fleet's gateways on a
		// port of its own): its /upstreams is what the trace reads.
		admin := "\"off\""
		adminPort := 0
		if env.verbose {
			if adminPort, err = freePort(); err != nil {
				return "", nil, err
			}
			admin = fmt.Sprintf("127.0.0.1:%d", adminPort)
		}
		fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nadmin: {listen: %s}\naccess_log: {enabled: false}\nupstreams:\n  contest:\n    strategy: %s\n", port, admin, strategy)
		if settings != "" {
			fmt.Fprintf(&b, "    strategy_settings: {%s}\n", settings)
		}
		b.WriteString("    targets:\n")
		for i, u := range env.urls {
			mc := 0
			if configured {
				// A static limit, divided between the fleet's gateways.
				mc = env.perGateway(env.sc.Providers[i].Stages[0].Permits)
			}
			if mc > 0 {
				fmt.Fprintf(&b, "      - {url: %q, weight: 1, max_concurrency: %d}\n", u, mc)
			} else {
				fmt.Fprintf(&b, "      - {url: %q, weight: 1}\n", u)
			}
		}
		// The queue waits up to 5 s unless the contender's queue fields
		// set max_wait themselves.
		q := "max_wait: 5s"
		switch {
		case strings.Contains(queue, "max_wait"):
			q = queue
		case queue != "":
			q += ", " + queue
		}
		fmt.Fprintf(&b, "    queue: {%s}\n    retry: {%s}\n", q, retry)
		if health != "" {
			fmt.Fprintf(&b, "    health: {%s}\n", health)
		}
		b.WriteString("routes:\n  - {match: {path_prefix: /}, upstream: contest}\n")
		path := filepath.Join(dir, "gateway.yaml")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return "", nil, err
		}
		url, stop, err := startProcess(env, dir, port, env.fulcrum, []string{"gateway", "--config", path}, nil)
		if err != nil || adminPort == 0 {
			return url, stop, err
		}
		done, traced := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(traced)
			traceLimits(env, adminLimits(fmt.Sprintf("http://127.0.0.1:%d/upstreams", adminPort), len(env.urls)), &Timeline{}, done)
		}()
		return url, func() { close(done); <-traced; stop() }, nil
	}
}

// adminLimits samples a gateway's per-target permits and picks in flight
// from its admin API for traceLimits (-v); a sample that fails reads as
// -1s.
func adminLimits(url string, n int) func() (lim, in []int64) {
	client := &http.Client{Timeout: time.Second}
	return func() (lim, in []int64) {
		lim, in = make([]int64, n), make([]int64, n)
		for i := range n {
			lim[i], in[i] = -1, -1
		}
		res, err := client.Get(url)
		if err != nil {
			return lim, in
		}
		defer res.Body.Close()
		var v struct {
			Upstreams []struct {
				Targets []struct {
					Permits  int64 `json:"permits"`
					InFlight int64 `json:"in_flight"`
				} `json:"targets"`
			} `json:"upstreams"`
		}
		if json.NewDecoder(res.Body).Decode(&v) != nil || len(v.Upstreams) == 0 {
			return lim, in
		}
		for i, t := range v.Upstreams[0].Targets {
			if i < n {
				lim[i], in[i] = t.Permits, t.InFlight
			}
		}
		return lim, in
	}
}

// contenders lists every contender, Fulcrum's first.
func contenders() []contender {
	var cs []contender
	for _, s := range []struct {
		name, strategy string
		configured     bool
	}{
		{"fulcrum capacity (learned)", "capacity", false},
		{"fulcrum capacity (configured)", "capacity", true},
		{"fulcrum probe", "probe", false},
		{"fulcrum p2c", "p2c", false},
		{"fulcrum least_active", "least_active", false},
		{"fulcrum shortest_response", "shortest_response", false},
		{"fulcrum round_robin", "round_robin", false},
		{"fulcrum random", "random", false},
	} {
		cs = append(cs, contender{Name: s.name, Kind: "fulcrum", start: gatewayContender(s.strategy, s.configured, variant{})})
	}
	cs = append(cs,
		contender{Name: "library capacity (learned)", Kind: "library", Learns: true, start: libraryContender("capacity", learned)},
		contender{Name: "library capacity (configured)", Kind: "library", start: libraryContender("capacity", configured)},
		// Probe learns no limits: it ranks targets by their own reports.
		contender{Name: "library probe", Kind: "library", start: libraryContender("probe", learned)},
		contender{Name: "oracle: library capacity (stage permits)", Kind: "oracle", start: libraryContender("capacity", oracle)},
	)
	cs = append(cs, peerLibraries()...)
	cs = append(cs,
		contender{Name: "nginx round robin", Kind: "peer", Needs: "nginx", start: nginxContender("")},
		contender{Name: "nginx least_conn", Kind: "peer", Needs: "nginx", start: nginxContender("least_conn;")},
		contender{Name: "nginx random two least_conn", Kind: "peer", Needs: "nginx", start: nginxContender("random two least_conn;")},
		contender{Name: "haproxy roundrobin", Kind: "peer", Needs: "haproxy", start: haproxyContender("roundrobin")},
		contender{Name: "haproxy leastconn", Kind: "peer", Needs: "haproxy", start: haproxyContender("leastconn")},
		contender{Name: "caddy least_conn", Kind: "peer", Needs: "caddy", start: caddyContender("least_conn")},
		contender{Name: "caddy random_choose 2", Kind: "peer", Needs: "caddy", start: caddyContender("random_choose 2")},
	)
	return cs
}
