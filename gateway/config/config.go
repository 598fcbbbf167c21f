package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Config is the whole gateway configuration.
type Config struct {
	// Listen is the proxy's address (default 127.0.0.1:8080).
	Listen string `yaml:"listen"`
	// TLS, when set, serves HTTPS (HTTP/1.1 and HTTP/2 by ALPN).
	TLS *TLS `yaml:"tls"`
	// H2C accepts unencrypted HTTP/2 (prior knowledge) beside HTTP/1.1.
	H2C bool `yaml:"h2c"`
	// Admin is the admin API's listener.
	Admin Admin `yaml:"admin"`
	// AccessLog configures the structured access log.
	AccessLog AccessLog `yaml:"access_log"`
	// Timeouts bound each phase of a request.
	Timeouts Timeouts `yaml:"timeouts"`
	// MaxBodySize limits a request body (default 10MiB; 0 after parsing
	// never happens: use a large value to lift it).
	MaxBodySize Size `yaml:"max_body_size"`
	// MaxHeaderSize limits a request's head (default 16KiB).
	MaxHeaderSize Size `yaml:"max_header_size"`
	// ShutdownGrace is how long SIGTERM waits for in-flight requests
	// (default 10s).
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// Upstreams are the named groups of targets.
	Upstreams map[string]*Upstream `yaml:"upstreams"`
	// Routes map requests to upstreams; the first match wins.
	Routes []Route `yaml:"routes"`
}

// TLS names the certificate and key files.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Admin is the admin listener.
type Admin struct {
	// Listen is the admin address (default 127.0.0.1:9901; "off" disables).
	Listen string `yaml:"listen"`
	// Token, when set, is required as "Authorization: Bearer <token>". It
	// must be set when Listen is not a loopback address.
	Token string `yaml:"token"`
}

// AccessLog configures the access log.
type AccessLog struct {
	// Enabled turns the access log on (default true).
	Enabled *bool `yaml:"enabled"`
	// Format is "text" (default) or "json".
	Format string `yaml:"format"`
	// Path is a file to append to; "" or "stdout" means standard output,
	// "stderr" standard error.
	Path string `yaml:"path"`
}

// On reports whether the access log is enabled.
func (a AccessLog) On() bool { return a.Enabled == nil || *a.Enabled }

// Timeouts bound the phases of a request.
type Timeouts struct {
	// Dial bounds connecting to a target (default 2s).
	Dial Duration `yaml:"dial"`
	// ResponseHeader bounds waiting for a target's response head after
	// the request was sent (default 30s).
	ResponseHeader Duration `yaml:"response_header"`
	// Idle closes a client keep-alive connection idle this long
	// (default 60s).
	Idle Duration `yaml:"idle"`
	// ReadHeader bounds reading a client's request head (default 10s).
	ReadHeader Duration `yaml:"read_header"`
	// UpstreamIdle closes a pooled target connection idle this long
	// (default 90s).
	UpstreamIdle Duration `yaml:"upstream_idle"`
}

// Upstream is a named group of targets with a strategy.
type Upstream struct {
	// Strategy is a balance strategy name (default round_robin).
	Strategy string `yaml:"strategy"`
	// HashKey is what the hash strategies hash: client_ip (default),
	// header:NAME, cookie:NAME, query:NAME or path.
	HashKey string `yaml:"hash_key"`
	// Targets are the upstream's servers.
	Targets []Target `yaml:"targets"`
	// Discovery finds the targets at run time instead (see discovery.go).
	Discovery *Discovery `yaml:"discovery"`
	// TLS makes the upstream's targets https:// ones (see upstream_tls.go).
	TLS *UpstreamTLS `yaml:"tls"`
	// Health configures active checks and passive ejection.
	Health Health `yaml:"health"`
	// Retry configures retries to other targets.
	Retry Retry `yaml:"retry"`
	// Queue configures waiting when every target is at max_concurrency.
	Queue Queue `yaml:"queue"`
	// Warmup selects the warm-up formula: linear (default; Dubbo's ramp,
	// "seed" is accepted as its old name) or envoy (Envoy's slow start).
	Warmup string `yaml:"warmup"`
	// StrategySettings are the strategy's own settings (bounded_hash's
	// load_bound, capacity's initial_limit, ...), decoded and checked by
	// the strategy: see docs/gateway.md.
	StrategySettings yaml.Node `yaml:"strategy_settings"`

	// Key is HashKey parsed.
	Key HashKey `yaml:"-"`
}

// Target is one server of an upstream.
type Target struct {
	// URL is the target, http://host:port (a path is not allowed).
	URL string `yaml:"url"`
	// Weight is the target's share (default 1; 0 takes it out of rotation).
	Weight *int `yaml:"weight"`
	// Warmup ramps a new or recovered target's weight over this window.
	Warmup Duration `yaml:"warmup"`
	// MaxConcurrency caps requests in flight to it (0: unlimited).
	MaxConcurrency int `yaml:"max_concurrency"`
	// Disabled keeps the target configured but unused.
	Disabled bool `yaml:"disabled"`
	// StartedAt is when the server started (RFC 3339), as a registry
	// reports it: warm-up counts from there rather than from first sight.
	StartedAt Time `yaml:"started_at"`

	// Addr is URL's host:port.
	Addr string `yaml:"-"`
}

// W returns the weight with its default applied.
func (t Target) W() int {
	if t.Weight == nil {
		return 1
	}
	return *t.Weight
}

// Health groups the health checks.
type Health struct {
	Active  *Active  `yaml:"active"`
	Passive *Passive `yaml:"passive"`
}

// Active is the active health check: GET Path every Interval.
type Active struct {
	Path               string   `yaml:"path"`                // default /healthz
	Interval           Duration `yaml:"interval"`            // default 5s
	Timeout            Duration `yaml:"timeout"`             // default 2s
	HealthyThreshold   int      `yaml:"healthy_threshold"`   // default 2
	UnhealthyThreshold int      `yaml:"unhealthy_threshold"` // default 3
}

// Passive is ejection on consecutive failures.
type Passive struct {
	MaxFailures       int      `yaml:"max_failures"`        // default 5
	Window            Duration `yaml:"window"`              // default 10s
	EjectFor          Duration `yaml:"eject_for"`           // default 30s
	MaxEjectFor       Duration `yaml:"max_eject_for"`       // default 10 x eject_for
	MaxEjectedPercent int      `yaml:"max_ejected_percent"` // default 50
}

// Retry configures retries.
type Retry struct {
	// Attempts is the number of tries in all, the first included
	// (default 2; 1 turns retries off).
	Attempts int `yaml:"attempts"`
	// On lists what is retried: connect_error (always implied), timeout,
	// and HTTP status codes (default [connect_error, 502, 503, 504]).
	On []string `yaml:"on"`
	// BufferBody is the largest request body kept so a request with a
	// body can be retried after a status (default 64KiB).
	BufferBody Size `yaml:"buffer_body"`
	// Budget caps retries to this share of requests (default 0.2) ...
	Budget float64 `yaml:"budget"`
	// ... plus this many per second (default 10).
	MinPerSecond int `yaml:"min_per_second"`

	// Statuses and Timeout are On parsed.
	Statuses []int `yaml:"-"`
	Timeout  bool  `yaml:"-"`
}

// Queue configures waiting for capacity.
type Queue struct {
	// MaxWait is how long a request may wait for a free target when all
	// are at max_concurrency (default 0: refuse at once with 503).
	MaxWait Duration `yaml:"max_wait"`
}

// Route maps matching requests to an upstream.
type Route struct {
	Match    Match  `yaml:"match"`
	Upstream string `yaml:"upstream"`
}

// Match selects requests; empty fields match everything.
type Match struct {
	// Host matches the Host header without port ("" any; "*.example.com"
	// any subdomain).
	Host string `yaml:"host"`
	// PathPrefix matches the path's start (default /).
	PathPrefix string `yaml:"path_prefix"`
}

// HashKey is where a request's hash key comes from.
type HashKey struct {
	Kind string // client_ip, header, cookie, query, path
	Name string // for header, cookie and query
}

// String returns the configuration form.
func (k HashKey) String() string {
	if k.Name != "" {
		return k.Kind + ":" + k.Name
	}
	return k.Kind
}

// Duration is a time.Duration written as "1.5s", "200ms".
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeErr(n, "want a duration like 2s, got a %s", kindName(n.Kind))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return typeErr(n, "%q is not a duration (like 500ms, 2s, 1m)", n.Value)
	}
	if v < 0 {
		return typeErr(n, "duration %q is negative", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Size is a byte count written as 1048576, "64KiB", "10MiB", "1MB".
type Size int64

// UnmarshalYAML parses a size.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeErr(n, "want a size like 64KiB, got a %s", kindName(n.Kind))
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return typeErr(n, "%v", err)
	}
	*s = Size(v)
	return nil
}

// ParseSize parses "123", "64KiB", "10MiB", "1GiB", "1KB", "2MB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suf)), u.m
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (like 65536, 64KiB, 10MiB)", s)
	}
	return v * mult, nil
}

// typeErr is a *yaml.TypeError so decoding goes on and every problem is
// reported together.
func typeErr(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: ", n.Line, n.Column) + fmt.Sprintf(format, args...)}}
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	default:
		return "value"
	}
}

// FieldError is one problem with one field.
type FieldError struct {
	Path string // upstreams.api.targets[0].url
	Line int    // 0 when unknown
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// Error is a refused configuration: every problem found.
type Error struct {
	Problems []*FieldError
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "config: " + e.Problems[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Load reads and parses a file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates a configuration. The error, when not nil,
// is an *Error listing every problem.
func Parse(data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, decodeError(&yaml.Node{}, err) // syntax: "line N: ..."
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, decodeError(&root, err)
	}
	v := validator{root: &root}
	v.config(&c)
	if len(v.errs) > 0 {
		return nil, &Error{Problems: v.errs}
	}
	return &c, nil
}

// decodeError turns the YAML library's errors ("line 7: field x not found
// in type config.Target") into field errors naming the path at that line.
func decodeError(root *yaml.Node, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := &Error{}
	for _, s := range msgs {
		fe := &FieldError{Path: "(document)", Msg: s}
		var line, col int
		if _, e := fmt.Sscanf(s, "line %d:", &line); e == nil {
			fe.Line = line
			fe.Msg = strings.TrimSpace(s[strings.Index(s, ":")+1:])
			if _, e := fmt.Sscanf(fe.Msg, "column %d:", &col); e == nil {
				fe.Msg = strings.TrimSpace(fe.Msg[strings.Index(fe.Msg, ":")+1:])
			}
			key := ""
			if rest, ok := strings.CutPrefix(fe.Msg, "field "); ok {
				key, _, _ = strings.Cut(rest, " ")
			}
			// A type error has no column: the value it quotes finds the
			// field on a line that holds several ({url: ..., weight: x}).
			val := ""
			if m := badValue.FindStringSubmatch(fe.Msg); m != nil {
				val = m[1]
			}
			if p := pathAt(root, line, col, key, val); p != "" {
				fe.Path = p
			}
			fe.Msg = strings.Replace(fe.Msg, "in type config.", "in ", 1)
		}
		out.Problems = append(out.Problems, fe)
	}
	return out
}

var badValue = regexp.MustCompile("cannot unmarshal !!\\w+ `(.*)` into")

// pathAt finds the field a decoding error is about: the mapping key named
// key on line, the value at line:col, the scalar val on line, or else the
// first key on line.
func pathAt(n *yaml.Node, line, col int, key, val string) string {
	exact, loose := "", ""
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				if k.Line == line && key != "" && k.Value == key {
					exact = p
				}
				if v.Line == line && (v.Column == col || (val != "" && v.Kind == yaml.ScalarNode && v.Value == val && exact == "")) {
					exact = p
				}
				if k.Line == line && loose == "" {
					loose = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Line == line && c.Column == col {
					exact = p
				}
				walk(c, p)
			}
		}
	}
	walk(n, "")
	if exact != "" {
		return exact
	}
	return loose
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// lookup finds the node at a path of keys and indexes.
func lookup(root *yaml.Node, keys ...any) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return nil
			}
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				return nil
			}
			n = next
		case int:
			if n.Kind != yaml.SequenceNode || k >= len(n.Content) {
				return nil
			}
			n = n.Content[k]
		}
	}
	return n
}

type validator struct {
	root *yaml.Node
	errs []*FieldError
}

// fail records a problem at a path; the line is the field's, or its
// nearest present parent's.
func (v *validator) fail(keys []any, format string, args ...any) {
	var path strings.Builder
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			if path.Len() > 0 {
				path.WriteByte('.')
			}
			path.WriteString(k)
		case int:
			fmt.Fprintf(&path, "[%d]", k)
		}
	}
	line := 0
	for i := len(keys); i >= 0 && line == 0; i-- {
		if n := lookup(v.root, keys[:i]...); n != nil {
			line = n.Line
		}
	}
	v.errs = append(v.errs, &FieldError{Path: path.String(), Line: line, Msg: fmt.Sprintf(format, args...)})
}

func p(keys ...any) []any { return keys }

func (v *validator) config(c *Config) {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		v.fail(p("listen"), "%q is not host:port", c.Listen)
	}
	if c.TLS != nil && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
		v.fail(p("tls"), "cert_file and key_file are both required")
	}
	if c.Admin.Listen == "" {
		c.Admin.Listen = "127.0.0.1:9901"
	}
	if c.Admin.Listen != "off" {
		host, _, err := net.SplitHostPort(c.Admin.Listen)
		if err != nil {
			v.fail(p("admin", "listen"), "%q is not host:port (or off)", c.Admin.Listen)
		} else if !IsLoopback(host) && c.Admin.Token == "" {
			v.fail(p("admin", "token"), "required because admin.listen %q is not a loopback address", c.Admin.Listen)
		}
	}
	switch c.AccessLog.Format {
	case "":
		c.AccessLog.Format = "text"
	case "text", "json":
	default:
		v.fail(p("access_log", "format"), "%q is not text or json", c.AccessLog.Format)
	}
	t := &c.Timeouts
	def(&t.Dial, 2*time.Second)
	def(&t.ResponseHeader, 30*time.Second)
	def(&t.Idle, 60*time.Second)
	def(&t.ReadHeader, 10*time.Second)
	def(&t.UpstreamIdle, 90*time.Second)
	def(&c.ShutdownGrace, 10*time.Second)
	if c.MaxBodySize == 0 {
		c.MaxBodySize = 10 << 20
	}
	if c.MaxHeaderSize == 0 {
		c.MaxHeaderSize = 16 << 10
	}
	if c.MaxHeaderSize < 1024 || c.MaxHeaderSize > 1<<20 {
		v.fail(p("max_header_size"), "%d is outside 1KiB..1MiB", c.MaxHeaderSize)
	}
	if len(c.Upstreams) == 0 {
		v.fail(p("upstreams"), "at least one upstream is required")
	}
	names := make([]string, 0, len(c.Upstreams))
	for name := range c.Upstreams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		u := c.Upstreams[name]
		if u == nil {
			v.fail(p("upstreams", name), "empty upstream")
			c.Upstreams[name] = &Upstream{}
			continue
		}
		v.upstream(name, u)
	}
	if len(c.Routes) == 0 && len(c.Upstreams) == 1 {
		// One upstream and no routes: everything goes there.
		c.Routes = []Route{{Match: Match{PathPrefix: "/"}, Upstream: names[0]}}
	}
	if len(c.Routes) == 0 && len(c.Upstreams) > 1 {
		v.fail(p("routes"), "required when there is more than one upstream")
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Upstream == "" {
			v.fail(p("routes", i, "upstream"), "required")
		} else if _, ok := c.Upstreams[r.Upstream]; !ok {
			v.fail(p("routes", i, "upstream"), "no upstream named %q (have %v)", r.Upstream, names)
		}
		if r.Match.PathPrefix == "" {
			r.Match.PathPrefix = "/"
		}
		if !strings.HasPrefix(r.Match.PathPrefix, "/") {
			v.fail(p("routes", i, "match", "path_prefix"), "%q must start with /", r.Match.PathPrefix)
		}
		if h := r.Match.Host; strings.ContainsAny(h, "/: ") || (strings.Contains(h, "*") && !strings.HasPrefix(h, "*.")) {
			v.fail(p("routes", i, "match", "host"), "%q is not a host name (a leading *. is allowed)", h)
		}
	}
}

func def(d *Duration, v time.Duration) {
	if *d == 0 {
		*d = Duration(v)
	}
}

func (v *validator) upstream(name string, u *Upstream) {
	at := func(keys ...any) []any { return append([]any{"upstreams", name}, keys...) }
	if name == "" || strings.ContainsAny(name, "/ ") {
		v.fail(at(), "upstream name %q must be non-empty without / or spaces", name)
	}
	if u.Strategy == "" {
		u.Strategy = "round_robin"
	}
	if !balance.Known(u.Strategy) {
		v.fail(at("strategy"), "unknown strategy %q (known: %s)", u.Strategy, strings.Join(balance.Names(), ", "))
	} else {
		v.strategySettings(u, at)
	}
	if u.HashKey == "" {
		u.HashKey = "client_ip"
	}
	k, err := ParseHashKey(u.HashKey)
	if err != nil {
		v.fail(at("hash_key"), "%v", err)
	}
	u.Key = k
	switch u.Warmup {
	case "", "seed": // seed: the old name of linear
		u.Warmup = "linear"
	case "linear", "envoy":
	default:
		v.fail(at("warmup"), "%q is not linear or envoy", u.Warmup)
	}
	if u.Discovery != nil {
		v.discovery(u, at)
	} else {
		v.targets(u, at)
	}
	v.upstreamTLS(u, at)
	if a := u.Health.Active; a != nil {
		if a.Path == "" {
			a.Path = "/healthz"
		}
		if !strings.HasPrefix(a.Path, "/") {
			v.fail(at("health", "active", "path"), "%q must start with /", a.Path)
		}
		def(&a.Interval, 5*time.Second)
		def(&a.Timeout, 2*time.Second)
		if a.HealthyThreshold == 0 {
			a.HealthyThreshold = 2
		}
		if a.UnhealthyThreshold == 0 {
			a.UnhealthyThreshold = 3
		}
		if a.HealthyThreshold < 0 {
			v.fail(at("health", "active", "healthy_threshold"), "%d is negative", a.HealthyThreshold)
		}
		if a.UnhealthyThreshold < 0 {
			v.fail(at("health", "active", "unhealthy_threshold"), "%d is negative", a.UnhealthyThreshold)
		}
	}
	if ps := u.Health.Passive; ps != nil {
		if ps.MaxFailures == 0 {
			ps.MaxFailures = 5
		}
		if ps.MaxFailures < 0 {
			v.fail(at("health", "passive", "max_failures"), "%d is negative", ps.MaxFailures)
		}
		def(&ps.Window, 10*time.Second)
		def(&ps.EjectFor, 30*time.Second)
		def(&ps.MaxEjectFor, 10*ps.EjectFor.D())
		if ps.MaxEjectFor < ps.EjectFor {
			v.fail(at("health", "passive", "max_eject_for"), "%v is below eject_for %v", ps.MaxEjectFor.D(), ps.EjectFor.D())
		}
		if ps.MaxEjectedPercent == 0 {
			ps.MaxEjectedPercent = 50
		}
		if ps.MaxEjectedPercent < 0 || ps.MaxEjectedPercent > 100 {
			v.fail(at("health", "passive", "max_ejected_percent"), "%d is outside 1..100", ps.MaxEjectedPercent)
		}
	}
	r := &u.Retry
	if r.Attempts == 0 {
		r.Attempts = 2
	}
	if r.Attempts < 1 || r.Attempts > 10 {
		v.fail(at("retry", "attempts"), "%d is outside 1..10", r.Attempts)
	}
	if r.On == nil {
		r.On = []string{"connect_error", "502", "503", "504"}
	}
	for i, s := range r.On {
		switch s {
		case "connect_error":
		case "timeout":
			r.Timeout = true
		default:
			code, err := strconv.Atoi(s)
			if err != nil || code < 500 || code > 599 {
				v.fail(at("retry", "on", i), "%q is not connect_error, timeout or a 5xx status", s)
				continue
			}
			if !slices.Contains(r.Statuses, code) {
				r.Statuses = append(r.Statuses, code)
			}
		}
	}
	if r.BufferBody == 0 {
		r.BufferBody = 64 << 10
	}
	if r.Budget == 0 {
		r.Budget = 0.2
	}
	if r.Budget < 0 || r.Budget > 1 {
		v.fail(at("retry", "budget"), "%v is outside 0..1", r.Budget)
	}
	if r.MinPerSecond == 0 {
		r.MinPerSecond = 10
	}
	if r.MinPerSecond < 0 {
		v.fail(at("retry", "min_per_second"), "%d is negative", r.MinPerSecond)
	}
}

func (v *validator) targets(u *Upstream, at func(keys ...any) []any) {
	if len(u.Targets) == 0 {
		v.fail(at("targets"), "at least one target is required")
	}
	seen := map[string]int{}
	for i := range u.Targets {
		t := &u.Targets[i]
		addr, err := TargetAddr(t.URL)
		if err != nil {
			v.fail(at("targets", i, "url"), "%v", err)
		} else if j, dup := seen[addr]; dup {
			v.fail(at("targets", i, "url"), "%q repeats targets[%d]", t.URL, j)
		} else {
			seen[addr] = i
		}
		t.Addr = addr
		if t.W() < 0 {
			v.fail(at("targets", i, "weight"), "%d is negative", t.W())
		}
		if t.MaxConcurrency < 0 {
			v.fail(at("targets", i, "max_concurrency"), "%d is negative", t.MaxConcurrency)
		}
	}
}

// ParseHashKey parses client_ip, header:NAME, cookie:NAME, query:NAME, path.
func ParseHashKey(s string) (HashKey, error) {
	kind, name, hasName := strings.Cut(s, ":")
	switch kind {
	case "client_ip", "path":
		if hasName {
			return HashKey{}, fmt.Errorf("%q: %s takes no name", s, kind)
		}
		return HashKey{Kind: kind}, nil
	case "header", "cookie", "query":
		if name == "" {
			return HashKey{}, fmt.Errorf("%q: %s needs a name, as in %s:NAME", s, kind, kind)
		}
		if strings.ContainsAny(name, " \t\r\n:;=") {
			return HashKey{}, fmt.Errorf("%q: bad %s name", s, kind)
		}
		return HashKey{Kind: kind, Name: name}, nil
	}
	return HashKey{}, fmt.Errorf("%q is not client_ip, header:NAME, cookie:NAME, query:NAME or path", s)
}

// TargetAddr checks a target URL (http://host:port) and returns host:port.
func TargetAddr(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("required (like http://127.0.0.1:9001)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("%q has no host", raw)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("%q: only scheme, host and port are allowed", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: bad port", raw)
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// IsLoopback reports whether a listen host is a loopback address or
// localhost.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
