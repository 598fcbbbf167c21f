package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/balance"
	_ "github.com/fulcrum-lb/fulcrum/balance/capacity" // the strategy "capacity", registered on import
	_ "github.com/fulcrum-lb/fulcrum/balance/probe"    // the strategy "probe", registered on import
	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
	"github.com/fulcrum-lb/fulcrum/internal/loopback"
)

// Config is the whole gateway configuration.
type Config struct {
	// Listen is the proxy's address (default 127.0.0.1:8080).
	Listen string `yaml:"listen"`
	// TLS, when set, serves HTTPS (HTTP/1.1 and HTTP/2 by ALPN).
	TLS *TLS `yaml:"tls"`
	// H2C accepts unencrypted HTTP/2 (prior knowledge) beside HTTP/1.1.
	H2C bool `yaml:"h2c"`
	// EventLoop serves cleartext HTTP/1.1 on one epoll event loop per
	// core (Linux; default true). false: a goroutine per connection
	// everywhere. Read at start: changing it takes a restart.
	EventLoop *bool `yaml:"event_loop"`
	// EventLoopPack puts connections on as few event loops as the
	// gateway's CPU use needs, spreading them over more as it grows
	// (default true); false spreads them evenly over every loop.
	// Reloadable.
	EventLoopPack *bool `yaml:"event_loop_pack"`
	// HTTP2Server picks the server for HTTP/2 over TLS: "own" (default;
	// gateway/internal/h2srv) or "net/http" (x/net/http2's, through
	// net/http). Read at start: changing it takes a restart.
	HTTP2Server string `yaml:"http2_server"`
	// Admin is the admin API's listener.
	Admin Admin `yaml:"admin"`
	// AccessLog configures the structured access log.
	AccessLog AccessLog `yaml:"access_log"`
	// Timeouts bound each phase of a request.
	Timeouts Timeouts `yaml:"timeouts"`
	// Buffering decouples a target from a slow client: see Buffering.
	Buffering Buffering `yaml:"buffering"`
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

// EventLoopOn is EventLoop with its default (on).
func (c *Config) EventLoopOn() bool { return c.EventLoop == nil || *c.EventLoop }

// EventLoopPackOn is EventLoopPack with its default (on).
func (c *Config) EventLoopPackOn() bool { return c.EventLoopPack == nil || *c.EventLoopPack }

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
	// Send closes a client connection that accepts no byte of a response
	// for this long (default 60s; nginx's send_timeout, HAProxy's
	// timeout client).
	Send Duration `yaml:"send"`
}

// Buffering is how a target's response reaches a slow client, after
// nginx's proxy_buffering: the response is read from the target into
// memory, then a temporary file, and the target's connection and permit
// go back as soon as the target is done; the client then reads at its
// own pace, bounded by timeouts.send. A response larger than both limits
// relays the rest at the client's pace, holding the target, as nginx
// does past proxy_max_temp_file_size.
type Buffering struct {
	// Memory is how much of one response is held in memory (default
	// 64KiB).
	Memory Size `yaml:"memory"`
	// MaxTempFile is how much more goes to a temporary file (default
	// 1GiB; 0: no file).
	MaxTempFile *Size `yaml:"max_temp_file"`
	// TempDir holds the temporary files (default: the system's, $TMPDIR).
	TempDir string `yaml:"temp_dir"`
	// StreamPaths are path prefixes whose responses are relayed as they
	// come, unbuffered (long polls, streamed downloads). A response with
	// Content-Type text/event-stream or X-Accel-Buffering: no streams
	// anywhere.
	StreamPaths []string `yaml:"stream_paths"`
}

// TempFileLimit is MaxTempFile with its default applied.
func (b Buffering) TempFileLimit() int64 {
	if b.MaxTempFile == nil {
		return 1 << 30
	}
	return int64(*b.MaxTempFile)
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
	// settingsPath names StrategySettings in errors.
	settingsPath string
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
	// and HTTP status codes, 5xx or 429 (default [connect_error, 502,
	// 503, 504]). A 503 or 429 listed is also a refusal: the capacity
	// strategy learns from it.
	On []string `yaml:"on"`
	// BufferBody is the largest request body kept so a request with a
	// body can be retried after a status (default 64KiB).
	BufferBody Size `yaml:"buffer_body"`
	// Budget caps retries to this share of requests (default 0.2) ...
	Budget float64 `yaml:"budget"`
	// ... plus this many per second (default 10).
	MinPerSecond int `yaml:"min_per_second"`

	// Requeues is how many refusals (a 503 or 429 listed in On) may
	// send a request back to the queue without spending an attempt,
	// on an upstream that queues (queue.max_wait) and retries
	// (attempts above 1). A refusal says the target did not run the
	// request; in a fleet of gateways it is often another gateway's
	// load, and answering it after one retry hands the client an
	// error that a permit freed a moment later would have served
	// (Finagle requeues a server's nacks the same way). Bounded by
	// max_wait and the budget like any retry. Nil: DefaultRequeues;
	// 0: a refusal spends an attempt like any failure.
	Requeues *int `yaml:"requeues"`

	// TryTimeout bounds how long every attempt but the last waits for
	// the response head before the request is retried on another target
	// (Envoy's per_try_timeout): a duration, or "auto" for 10 times the
	// target's mean latency, at least 100ms. The last attempt waits for
	// timeouts.response_header. Needs timeout in On. Default: off.
	TryTimeout string `yaml:"try_timeout"`

	// Statuses and Timeout are On parsed; TryAfter and TryAuto are
	// TryTimeout parsed; MaxRequeues is Requeues or its default.
	Statuses    []int         `yaml:"-"`
	Timeout     bool          `yaml:"-"`
	TryAfter    time.Duration `yaml:"-"`
	TryAuto     bool          `yaml:"-"`
	MaxRequeues int           `yaml:"-"`
}

// DefaultRequeues is retry.requeues when unset. Measured on
// bench/contest's fast503 with three gateways sharing three providers
// (attempts 2): the learner's errors 113-171 with a refusal spending an
// attempt, 21-25 with three requeues.
const DefaultRequeues = 3

// Queue configures waiting for capacity.
type Queue struct {
	// MaxWait is how long a request may wait for a free target when all
	// are at max_concurrency (default 0: refuse at once with 503).
	MaxWait Duration `yaml:"max_wait"`
	// LIFOAfter makes the queue adaptive LIFO: once the longest waiter
	// has waited this long, a freed permit goes to the newest waiter (see
	// balance.Options.LIFOAfter); 0 is first come, first served. Unset
	// where max_wait is set, it is half the patience the queue's waiters
	// have shown (balance.LIFOPatience). Read it through LIFO.
	LIFOAfter *Duration `yaml:"lifo_after"`
}

// LIFO is queue.lifo_after, or its default when unset: balance.LIFOPatience
// where requests wait. A fixed 100 ms was the default before; on
// bench/contest's spike (open loop, a 1 s client timeout) it turned the
// queue newest first within 100 ms of the spike and its oldest requests
// timed out (221 errors against the oracle's 2); under sustained open
// loop overload first come, first served serves clients that are gone
// (3,519 successes against 9,012). The waiters' patience sets the switch
// for both (docs/gateway.md, queue.lifo_after).
func (q Queue) LIFO() time.Duration {
	if q.LIFOAfter != nil {
		return q.LIFOAfter.D()
	}
	if q.MaxWait.D() > 0 {
		return balance.LIFOPatience
	}
	return 0
}

// Route maps matching requests to an upstream.
type Route struct {
	Match    Match  `yaml:"match"`
	Upstream string `yaml:"upstream"`
	// Split sends the route's requests to several upstreams by weight
	// instead of Upstream (a canary, a blue/green switch).
	Split []SplitSide `yaml:"split"`
	// SplitKey keeps one client on one side: client_ip, header:NAME or
	// cookie:NAME. Without it each request draws.
	SplitKey string `yaml:"split_key"`
	// RateLimit caps the requests per key that the route lets through.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// StripPrefix removes the matched path prefix (or path) before the
	// request goes on, keeping at least "/".
	StripPrefix bool `yaml:"strip_prefix"`
	// RewritePrefix replaces the matched path prefix (or path) with this.
	RewritePrefix string `yaml:"rewrite_prefix"`
	// Redirect answers the request itself with a redirect.
	Redirect *Redirect `yaml:"redirect"`
	// RequestHeaders change the request's headers on the way to the target.
	RequestHeaders HeaderOps `yaml:"request_headers"`
	// ResponseHeaders change the response's headers on the way back.
	ResponseHeaders HeaderOps `yaml:"response_headers"`
}

// Redirect is a route's own answer: Status (301, 302 default, 303, 307
// or 308) to Location, where {host}, {path} and {uri} (path and query)
// stand for the request's.
type Redirect struct {
	Status   int    `yaml:"status" json:"status,omitempty"`
	Location string `yaml:"location" json:"location,omitempty"`
}

// HeaderOps change headers: Remove first, then Set (replacing any
// value), then Add (beside any value).
type HeaderOps struct {
	Set    map[string]string `yaml:"set" json:"set,omitempty"`
	Add    map[string]string `yaml:"add" json:"add,omitempty"`
	Remove []string          `yaml:"remove" json:"remove,omitempty"`
}

// SplitSide is one side of a weighted split.
type SplitSide struct {
	Upstream string `yaml:"upstream"`
	// Weight is the side's share against the others' (0 takes it out).
	Weight int `yaml:"weight"`
	// Ramp raises the side's weight from 0 to Weight over this window,
	// from when the side first appeared (a reload keeps the clock).
	Ramp Duration `yaml:"ramp"`
}

// RateLimit is a token bucket per key (nginx's limit_req, Envoy's local
// rate limit): Burst requests at once, refilled at PerSecond. A request
// over it is answered 429 with Retry-After.
type RateLimit struct {
	// Key is what a bucket belongs to: client_ip (default) or header:NAME
	// (a missing header is the empty key).
	Key string `yaml:"key" json:"key,omitempty"`
	// PerSecond is the refill rate (required; fractions allowed).
	PerSecond float64 `yaml:"per_second" json:"per_second,omitempty"`
	// Burst is the bucket's size (default: PerSecond rounded up, at least 1).
	Burst int `yaml:"burst" json:"burst,omitempty"`
	// MaxKeys bounds the buckets kept (default 100000): past it the least
	// recently seen key is dropped (and counted); it starts full again.
	MaxKeys int `yaml:"max_keys" json:"max_keys,omitempty"`
	// Shared ("redis://host:port/db") shares the buckets across gateways
	// through Redis; empty keeps them in this gateway.
	Shared string `yaml:"shared" json:"shared,omitempty"`
	// Gateways is how many gateways share the limit: while Redis is
	// unreachable each one allows PerSecond/Gateways (and Burst/Gateways,
	// at least 1) on its own (default 1).
	Gateways int `yaml:"gateways" json:"gateways,omitempty"`

	// KeyParsed is Key parsed.
	KeyParsed HashKey `yaml:"-" json:"-"`
}

// Match selects requests; empty fields match everything, and a request
// must match every field that is set.
type Match struct {
	// Host matches the Host header without port ("" any; "*.example.com"
	// any subdomain).
	Host string `yaml:"host" json:"host,omitempty"`
	// PathPrefix matches the path's start (default /, unless Path is set).
	PathPrefix string `yaml:"path_prefix" json:"path_prefix,omitempty"`
	// Path matches the whole path exactly (without the query).
	Path string `yaml:"path" json:"path,omitempty"`
	// Methods lists the request methods that match (upper case).
	Methods []string `yaml:"methods" json:"methods,omitempty"`
	// Headers maps a header name to its exact value, or "*" for present.
	Headers map[string]string `yaml:"headers" json:"headers,omitempty"`
	// Query maps a query parameter to its exact value as sent (not
	// decoded), or "*" for present.
	Query map[string]string `yaml:"query" json:"query,omitempty"`
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

// Duration is a length of time written with a unit ("1.5s", "200ms"),
// never negative. (The one type of every Fulcrum config; the name stays
// here so code outside the module can use it.)
type Duration = confyaml.Duration

// Size is a byte count written as 1048576, "64KiB", "10MiB", "1MB".
type Size = confyaml.Size

// FieldError is one problem with one field: its path
// (upstreams.api.targets[0].url), its line (0 when the file does not set
// it) and what is wrong. Error reads "line 7: upstreams.api...: ...".
type FieldError = confyaml.FieldError

// Error is a refused configuration: every problem found.
type Error = confyaml.Error

// Load reads and parses a file. Relative paths in it (a discovery file,
// TLS files, the access log) are relative to the file's folder, so the
// config means the same whatever directory the gateway starts in.
func Load(path string) (*Config, error) { return LoadWith(path, nil) }

// LoadWith is Load with override applied to the decoded file before it
// is validated: command-line flags that take precedence over the file
// (`fulcrum gateway --listen`), checked as if the file said them.
func LoadWith(path string, override func(*Config)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dir := filepath.Dir(path)
	c, err := parse(data, func(c *Config) {
		c.ResolvePaths(dir)
		if override != nil {
			override(c)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ResolvePaths makes every relative file path of c relative to dir: the
// discovery files, the TLS files (served and upstream) and an access log
// file. Load calls it with the config file's folder.
func (c *Config) ResolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if c.TLS != nil {
		abs(&c.TLS.CertFile)
		abs(&c.TLS.KeyFile)
	}
	if p := c.AccessLog.Path; p != "stdout" && p != "stderr" {
		abs(&c.AccessLog.Path)
	}
	for _, u := range c.Upstreams {
		if u == nil {
			continue
		}
		if u.Discovery != nil && u.Discovery.File != nil {
			abs(&u.Discovery.File.Path)
		}
		if t := u.TLS; t != nil {
			abs(&t.CAFile)
			abs(&t.CertFile)
			abs(&t.KeyFile)
		}
	}
}

// Parse decodes and validates a configuration. The error, when not nil,
// is an *Error listing every problem: every decoding problem (unknown
// fields, with the nearest known name; durations without a unit; values of
// the wrong kind), or, when the file decodes, every validation problem.
// Relative paths stay relative to the working directory (Load resolves
// them against the file's folder).
func Parse(data []byte) (*Config, error) { return parse(data, nil) }

func parse(data []byte, adjust func(*Config)) (*Config, error) {
	var c Config
	doc, err := confyaml.Decode(data, &c)
	if err != nil {
		return nil, err
	}
	if adjust != nil {
		adjust(&c)
	}
	v := validator{doc: doc}
	v.config(&c)
	if len(v.errs) > 0 {
		confyaml.SortProblems(v.errs) // checked in field order; listed in file order
		return nil, &Error{Problems: v.errs}
	}
	return &c, nil
}

type validator struct {
	doc  *confyaml.Doc
	errs []*FieldError
}

// fail records a problem at a path of keys and indexes; the line is the
// field's, or its nearest present parent's.
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
	v.errs = append(v.errs, v.doc.Errorf(path.String(), format, args...))
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
	switch c.HTTP2Server {
	case "":
		c.HTTP2Server = "own"
	case "own", "net/http":
	default:
		v.fail(p("http2_server"), "%q is not own or net/http", c.HTTP2Server)
	}
	if c.Admin.Listen == "" {
		c.Admin.Listen = "127.0.0.1:9901"
	}
	if c.Admin.Listen != "off" {
		host, _, err := net.SplitHostPort(c.Admin.Listen)
		if err != nil {
			v.fail(p("admin", "listen"), "%q is not host:port (or off)", c.Admin.Listen)
		} else if !loopback.Is(host) && c.Admin.Token == "" {
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
	def(&t.Send, 60*time.Second)
	if c.Buffering.Memory == 0 {
		c.Buffering.Memory = 64 << 10
	}
	if c.Buffering.Memory < 4<<10 || c.Buffering.Memory > 64<<20 {
		v.fail(p("buffering", "memory"), "%d is outside 4KiB..64MiB", c.Buffering.Memory)
	}
	if c.Buffering.TempDir != "" {
		if fi, err := os.Stat(c.Buffering.TempDir); err != nil || !fi.IsDir() {
			v.fail(p("buffering", "temp_dir"), "%q is not a directory", c.Buffering.TempDir)
		}
	}
	for i, sp := range c.Buffering.StreamPaths {
		if !strings.HasPrefix(sp, "/") {
			v.fail(p("buffering", "stream_paths", i), "%q must start with /", sp)
		}
	}
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
		switch {
		case r.Upstream != "" && len(r.Split) > 0:
			v.fail(p("routes", i, "split"), "set upstream or split, not both")
		case len(r.Split) > 0:
			total := 0
			seen := map[string]bool{}
			for j, sd := range r.Split {
				if _, ok := c.Upstreams[sd.Upstream]; !ok {
					v.fail(p("routes", i, "split", j, "upstream"), "no upstream named %q (have %v)", sd.Upstream, names)
				}
				if seen[sd.Upstream] {
					v.fail(p("routes", i, "split", j, "upstream"), "%q appears twice in the split", sd.Upstream)
				}
				seen[sd.Upstream] = true
				if sd.Weight < 0 || sd.Weight > 1000000 {
					v.fail(p("routes", i, "split", j, "weight"), "%d is outside 0..1000000", sd.Weight)
				}
				if sd.Ramp < 0 {
					v.fail(p("routes", i, "split", j, "ramp"), "%v is negative", sd.Ramp.D())
				}
				total += sd.Weight
			}
			if total == 0 {
				v.fail(p("routes", i, "split"), "every weight is 0: nothing would be served")
			}
			if r.SplitKey != "" {
				if k, err := ParseHashKey(r.SplitKey); err != nil {
					v.fail(p("routes", i, "split_key"), "%v", err)
				} else if k.Kind != "client_ip" && k.Kind != "header" && k.Kind != "cookie" {
					v.fail(p("routes", i, "split_key"), "%q: a split key is client_ip, header:NAME or cookie:NAME", r.SplitKey)
				}
			}
		case r.Upstream == "" && r.Redirect != nil:
		case r.Upstream == "":
			v.fail(p("routes", i, "upstream"), "required (or a split, or a redirect)")
		default:
			if _, ok := c.Upstreams[r.Upstream]; !ok {
				v.fail(p("routes", i, "upstream"), "no upstream named %q (have %v)", r.Upstream, names)
			}
			if r.SplitKey != "" {
				v.fail(p("routes", i, "split_key"), "only with a split")
			}
		}
		m := &r.Match
		switch {
		case m.Path != "" && m.PathPrefix != "":
			v.fail(p("routes", i, "match", "path"), "set path or path_prefix, not both")
		case m.Path != "":
			if !strings.HasPrefix(m.Path, "/") || strings.ContainsAny(m.Path, "?# ") {
				v.fail(p("routes", i, "match", "path"), "%q must start with / and hold no query, fragment or space", m.Path)
			}
		case m.PathPrefix == "":
			m.PathPrefix = "/"
		}
		if m.PathPrefix != "" && !strings.HasPrefix(m.PathPrefix, "/") {
			v.fail(p("routes", i, "match", "path_prefix"), "%q must start with /", m.PathPrefix)
		}
		if rl := r.RateLimit; rl != nil {
			v.rateLimit(p("routes", i, "rate_limit"), rl)
		}
		if r.StripPrefix && r.RewritePrefix != "" {
			v.fail(p("routes", i, "rewrite_prefix"), "set strip_prefix or rewrite_prefix, not both")
		}
		if r.RewritePrefix != "" && (!strings.HasPrefix(r.RewritePrefix, "/") || strings.ContainsAny(r.RewritePrefix, "?# \t\r\n")) {
			v.fail(p("routes", i, "rewrite_prefix"), "%q must start with / and hold no query, fragment or space", r.RewritePrefix)
		}
		if rd := r.Redirect; rd != nil {
			switch rd.Status {
			case 0:
				rd.Status = 302
			case 301, 302, 303, 307, 308:
			default:
				v.fail(p("routes", i, "redirect", "status"), "%d is not a redirect (301, 302, 303, 307 or 308)", rd.Status)
			}
			if rd.Location == "" || strings.ContainsAny(rd.Location, " \t\r\n") {
				v.fail(p("routes", i, "redirect", "location"), "%q: a URL is required, without spaces or line breaks", rd.Location)
			}
			if r.Upstream != "" || len(r.Split) > 0 {
				v.fail(p("routes", i, "redirect"), "a redirect route names no upstream or split")
			}
		}
		v.headerOps(p("routes", i, "request_headers"), &r.RequestHeaders)
		v.headerOps(p("routes", i, "response_headers"), &r.ResponseHeaders)
		for j, meth := range m.Methods {
			if meth == "" || !isToken(meth) {
				v.fail(p("routes", i, "match", "methods", j), "%q is not a method", meth)
			}
			m.Methods[j] = strings.ToUpper(meth)
		}
		for _, name := range sortedKeys(m.Headers) {
			if !isToken(name) {
				v.fail(p("routes", i, "match", "headers", name), "%q is not a header name", name)
			}
		}
		for _, name := range sortedKeys(m.Query) {
			if name == "" || strings.ContainsAny(name, "&=#") {
				v.fail(p("routes", i, "match", "query", name), "%q is not a query parameter name", name)
			}
		}
		if h := r.Match.Host; strings.ContainsAny(h, "/: ") || (strings.Contains(h, "*") && !strings.HasPrefix(h, "*.")) {
			v.fail(p("routes", i, "match", "host"), "%q is not a host name (a leading *. is allowed)", h)
		}
	}
}

func (v *validator) rateLimit(at []any, rl *RateLimit) {
	field := func(name string) []any { return append(append([]any{}, at...), name) }
	if rl.Key == "" {
		rl.Key = "client_ip"
	}
	k, err := ParseHashKey(rl.Key)
	switch {
	case err != nil:
		v.fail(field("key"), "%v", err)
	case k.Kind != "client_ip" && k.Kind != "header":
		v.fail(field("key"), "%q: a rate limit's key is client_ip or header:NAME", rl.Key)
	}
	rl.KeyParsed = k
	if !(rl.PerSecond > 0) || rl.PerSecond > 1e9 {
		v.fail(field("per_second"), "%v must be above 0 (and at most 1e9)", rl.PerSecond)
	}
	if rl.Burst == 0 {
		rl.Burst = max(1, int(math.Ceil(rl.PerSecond)))
	}
	if rl.Burst < 0 || rl.Burst > 1e9 {
		v.fail(field("burst"), "%d is outside 1..1e9", rl.Burst)
	}
	if rl.MaxKeys == 0 {
		rl.MaxKeys = 100000
	}
	if rl.MaxKeys < 0 {
		v.fail(field("max_keys"), "%d is negative", rl.MaxKeys)
	}
	if rl.Gateways == 0 {
		rl.Gateways = 1
	}
	if rl.Gateways < 0 {
		v.fail(field("gateways"), "%d is negative", rl.Gateways)
	}
	if rl.Shared != "" {
		if u, err := url.Parse(rl.Shared); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			v.fail(field("shared"), "%q is not a redis:// URL", rl.Shared)
		}
	}
}

// headerOps checks header changes: names are tokens, values hold no line
// breaks, and the headers the gateway frames itself are not for changing.
func (v *validator) headerOps(at []any, h *HeaderOps) {
	field := func(keys ...any) []any { return append(append([]any{}, at...), keys...) }
	name := func(keys []any, n string) {
		switch {
		case !isToken(n):
			v.fail(keys, "%q is not a header name", n)
		case reservedHeader(n):
			v.fail(keys, "%q is framing the gateway writes itself; it cannot be changed", n)
		}
	}
	for _, op := range []struct {
		key string
		m   map[string]string
	}{{"set", h.Set}, {"add", h.Add}} {
		for _, n := range sortedKeys(op.m) {
			name(field(op.key, n), n)
			if strings.ContainsAny(op.m[n], "\r\n\x00") {
				v.fail(field(op.key, n), "the value holds a line break or NUL")
			}
		}
	}
	for j, n := range h.Remove {
		name(field("remove", j), n)
	}
}

// reservedHeader: hop-by-hop fields and the message's framing.
func reservedHeader(n string) bool {
	switch strings.ToLower(n) {
	case "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
		"content-length", "host":
		return true
	}
	return false
}

// isToken reports whether s is an RFC 9110 token (a method or a header
// name).
func isToken(s string) bool {
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
	u.settingsPath = "upstreams." + name + ".strategy_settings"
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
	if w, ok := balance.WarmupFormula(u.Warmup); ok {
		u.Warmup = w
	} else {
		v.fail(at("warmup"), "%q is not %s", u.Warmup, strings.Join(balance.WarmupFormulas, " or "))
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
		if ps.MaxFailures == 0 { // a passive block turns ejection on
			ps.MaxFailures = balance.DefaultMaxFailures
		}
		if ps.MaxFailures < 0 {
			v.fail(at("health", "passive", "max_failures"), "%d is negative", ps.MaxFailures)
		}
		// The defaults are balance's, so the file and the library agree.
		d := balance.Passive{Window: ps.Window.D(), EjectFor: ps.EjectFor.D(), MaxEjectFor: ps.MaxEjectFor.D(),
			MaxEjectedPercent: ps.MaxEjectedPercent}.WithDefaults()
		ps.Window, ps.EjectFor, ps.MaxEjectFor, ps.MaxEjectedPercent = Duration(d.Window), Duration(d.EjectFor), Duration(d.MaxEjectFor), d.MaxEjectedPercent
		if ps.MaxEjectFor < ps.EjectFor {
			v.fail(at("health", "passive", "max_eject_for"), "%v is below eject_for %v", ps.MaxEjectFor.D(), ps.EjectFor.D())
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
	r.MaxRequeues = DefaultRequeues
	if r.Requeues != nil {
		r.MaxRequeues = *r.Requeues
	}
	if r.MaxRequeues < 0 || r.MaxRequeues > 10 {
		v.fail(at("retry", "requeues"), "%d is outside 0..10", r.MaxRequeues)
	}
	for i, s := range r.On {
		switch s {
		case "connect_error":
		case "timeout":
			r.Timeout = true
		default:
			code, err := strconv.Atoi(s)
			if err != nil || (code < 500 || code > 599) && code != http.StatusTooManyRequests {
				v.fail(at("retry", "on", i), "%q is not connect_error, timeout, 429 or a 5xx status", s)
				continue
			}
			if !slices.Contains(r.Statuses, code) {
				r.Statuses = append(r.Statuses, code)
			}
		}
	}
	switch r.TryTimeout {
	case "":
	case "auto":
		r.TryAuto = true
	default:
		d, err := time.ParseDuration(r.TryTimeout)
		if err != nil || d <= 0 {
			v.fail(at("retry", "try_timeout"), "%q is not auto or a positive duration with a unit, like 500ms", r.TryTimeout)
		}
		r.TryAfter = d
	}
	if r.TryTimeout != "" && !r.Timeout {
		v.fail(at("retry", "try_timeout"), "needs timeout in retry.on: an attempt that times out is retried only then")
	}
	if r.TryTimeout != "" && r.Attempts == 1 {
		v.fail(at("retry", "try_timeout"), "has no effect with attempts 1: it bounds every attempt but the last")
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
	switch q := u.Queue; {
	case q.LIFOAfter == nil || *q.LIFOAfter == 0:
	case q.MaxWait == 0:
		v.fail(at("queue", "lifo_after"), "has no effect without queue.max_wait (nothing waits)")
	case *q.LIFOAfter >= q.MaxWait:
		v.fail(at("queue", "lifo_after"), "%v is not below queue.max_wait (%v): no waiter would ever be served newest first", q.LIFOAfter.D(), q.MaxWait.D())
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
