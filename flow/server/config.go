package server

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/internal/loopback"
)

// Lock modes for Config.LockMode.
const (
	LockSkipLocked = "skip_locked" // row locks in the database (default)
	LockRedis      = "redis"       // Asyncflow's redsync lock around each hold
)

// Config configures a flow server. Zero fields take the defaults in their
// comments.
type Config struct {
	// Listen is the address to serve on; "127.0.0.1:0" picks a free port.
	// Default "127.0.0.1:7070".
	Listen string
	// DB names the database: "sqlite://PATH" (default
	// "sqlite://fulcrum-flow.db"), "postgres://..." or
	// "mysql://user:pass@tcp(host:port)/db".
	DB string
	// TablePrefix starts the names of the tables; default "flow_".
	TablePrefix string
	// LockMode is "skip_locked" (default) or "redis".
	LockMode string
	// RedisAddr is the Redis server for LockMode "redis"; default
	// "127.0.0.1:6379".
	RedisAddr string
	// RescueInterval is how often expired leases are looked for; default 1s.
	RescueInterval time.Duration
	// Retention is how long finished tasks (success, failed, cancelled) are
	// kept after their last change; default 168h (7 days). Negative keeps
	// them forever.
	Retention time.Duration
	// PruneInterval is how often finished tasks past Retention are deleted;
	// default 1m.
	PruneInterval time.Duration
	// CountFoldInterval is how often the task counts' changes are folded
	// into their totals (PostgreSQL, MySQL; see Store.FoldCounts), which
	// bounds what a stats, funnel or metrics read sums; default 1s.
	CountFoldInterval time.Duration
	// MaxWait caps a hold's wait_ms; default 30s.
	MaxWait time.Duration
	// PollInterval is how often a waiting hold looks again without a signal
	// (tasks made due by a server it cannot hear: MySQL, SQLite shared by
	// processes); default 1s.
	PollInterval time.Duration
	// TypeCacheTTL is how long a task type's config is cached; a change made
	// through another server is seen after at most this long. Default 1s.
	TypeCacheTTL time.Duration
	// MaxBodyBytes caps a request body; a body declared larger is refused
	// before it is read (413). Default flow.MaxRequestBytes (about 5.9 MiB:
	// a full batch of 1000 items with full contexts and error texts fits).
	MaxBodyBytes int64
	// MaxBodyMemory caps the request bodies being read and decoded at once,
	// in bytes: each request reserves its Content-Length (MaxBodyBytes when
	// it has none) before reading; one that does not fit is answered 503
	// with Retry-After. Default 4 x MaxBodyBytes (decoding a body takes
	// about three times its size again).
	MaxBodyMemory int64
	// MaxInFlight caps the API requests served at once, waiting holds
	// included; past it a request is answered 503 with Retry-After.
	// Default 1024.
	MaxInFlight int
	// ReadTimeout bounds reading a request's header and, separately, its
	// body: a client that trickles is cut off. Default 10s.
	ReadTimeout time.Duration
	// Token, when set, is required on every endpoint but /healthz as
	// "Authorization: Bearer TOKEN". A server listening on an address that
	// is not loopback refuses to start without one.
	Token string
	// CronInterval is how often periodic types' due ticks are fired;
	// default 1s.
	CronInterval time.Duration
	// Clock is the time periodic types are fired by and registered at;
	// default time.Now. Tests run it fast.
	Clock func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.DB == "" {
		c.DB = "sqlite://fulcrum-flow.db"
	}
	if c.TablePrefix == "" {
		c.TablePrefix = "flow_"
	}
	if c.LockMode == "" {
		c.LockMode = LockSkipLocked
	}
	if c.RedisAddr == "" {
		c.RedisAddr = "127.0.0.1:6379"
	}
	def(&c.RescueInterval, time.Second)
	def(&c.Retention, 7*24*time.Hour)
	def(&c.PruneInterval, time.Minute)
	def(&c.CountFoldInterval, time.Second)
	def(&c.MaxWait, 30*time.Second)
	def(&c.PollInterval, time.Second)
	def(&c.TypeCacheTTL, time.Second)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = flow.MaxRequestBytes
	}
	if c.MaxBodyMemory == 0 {
		c.MaxBodyMemory = 4 * c.MaxBodyBytes
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
	}
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.CronInterval, time.Second)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch c.LockMode {
	case LockSkipLocked, LockRedis:
	default:
		return fmt.Errorf("flow server: lock mode %q: want %s or %s", c.LockMode, LockSkipLocked, LockRedis)
	}
	if !strings.HasPrefix(c.DB, "sqlite://") && !strings.HasPrefix(c.DB, "postgres://") &&
		!strings.HasPrefix(c.DB, "postgresql://") && !strings.HasPrefix(c.DB, "mysql://") {
		return fmt.Errorf("flow server: db %q: want sqlite://PATH, postgres://... or mysql://...%s", c.DB, store.Suggest(c.DB))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"rescue interval", c.RescueInterval}, {"prune interval", c.PruneInterval}, {"count fold interval", c.CountFoldInterval}, {"max wait", c.MaxWait},
		{"poll interval", c.PollInterval}, {"type cache ttl", c.TypeCacheTTL}, {"cron interval", c.CronInterval}} {
		if d.v < 0 {
			return fmt.Errorf("flow server: %s %v is negative", d.name, d.v)
		}
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("flow server: max body bytes %d is negative", c.MaxBodyBytes)
	}
	if c.MaxBodyMemory < c.MaxBodyBytes {
		return fmt.Errorf("flow server: max body memory %d is below max body bytes %d", c.MaxBodyMemory, c.MaxBodyBytes)
	}
	if c.MaxInFlight < 0 {
		return fmt.Errorf("flow server: max in flight %d is negative", c.MaxInFlight)
	}
	if c.ReadTimeout < 0 {
		return fmt.Errorf("flow server: read timeout %v is negative", c.ReadTimeout)
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("flow server: listen %q: %w", c.Listen, err)
	}
	if c.Token == "" && !loopback.Is(host) {
		return fmt.Errorf("flow server: listen %q is not a loopback address: a token is required (--token or FULCRUM_FLOW_TOKEN)", c.Listen)
	}
	return nil
}
