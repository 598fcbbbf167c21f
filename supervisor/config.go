package supervisor

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
	"github.com/fulcrum-lb/fulcrum/internal/loopback"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
)

// Config is the supervisor's configuration (supervisor.yaml). Durations are
// Go durations ("30s", "30m"). DefaultConfig holds the defaults; a YAML file
// only needs the fields it changes.
type Config struct {
	// Listen is the address of the worker endpoint (/ws) and the admin API.
	Listen string `yaml:"listen"`
	// Token authenticates workers and admin calls (Authorization: Bearer, or
	// ?token=); every endpoint but /healthz requires it. Required unless
	// Listen is a loopback address (then, if empty, nothing is checked).
	Token string `yaml:"token"`
	// Warmup: after start, accept workers and assign nothing for this long.
	Warmup time.Duration `yaml:"warmup"`
	// WorkerTimeout: a worker silent this long is dead.
	WorkerTimeout time.Duration `yaml:"worker_timeout"`
	// TaskTimeout: a task with no sign of life on a worker this long is
	// vacated on that worker and given to another.
	TaskTimeout time.Duration `yaml:"task_timeout"`
	// Tick is the resolution of every timeout and poll.
	Tick time.Duration `yaml:"tick"`
	// QueryInterval: how often the task source is queried after warm-up.
	QueryInterval time.Duration `yaml:"query_interval"`
	// QueryRetry: how soon a failed query is retried (at most QueryInterval).
	QueryRetry time.Duration `yaml:"query_retry"`
	// Redundancy is k, the number of distinct workers holding each task.
	Redundancy int `yaml:"redundancy"`
	// MaxMessageBytes bounds one worker message.
	MaxMessageBytes int64 `yaml:"max_message_bytes"`
	// SendQueue is how many messages may wait to be written to one worker;
	// a worker that falls further behind is disconnected (it reconnects and
	// gets its whole assignment again).
	SendQueue int `yaml:"send_queue"`
	// MaxLoadCeiling caps the max_load a worker may claim: a report above it
	// counts as this much, so one bad report cannot make a worker look
	// like the place for everything.
	MaxLoadCeiling int `yaml:"max_load_ceiling"`

	Source    source.Config   `yaml:"source"`
	Sink      sink.Config     `yaml:"sink"`
	Dedup     DedupConfig     `yaml:"dedup"`
	Rebalance RebalanceConfig `yaml:"rebalance"`
	HA        HAConfig        `yaml:"ha"`
}

// HAConfig makes several supervisors share one database: one
// leads, by a lease row with a term; the others stand by and tell workers
// where the leader is. Admin task changes are stored there too. Empty
// Database: the supervisor runs alone.
type HAConfig struct {
	// Database is a PostgreSQL or MySQL/MariaDB URL
	// (postgres://user@host:5432/db, mysql://user:pass@host:3306/db).
	Database string `yaml:"database"`
	// Name of the lease: supervisors of one fleet share it; several fleets
	// may share a database under different names.
	Name string `yaml:"name"`
	// Advertise is this supervisor's worker URL as workers reach it
	// (ws://host:7300/ws): what a standby tells a worker about the leader.
	Advertise string `yaml:"advertise"`
	// Lease: a leader that has not renewed for this long is replaced. The
	// leader renews every third of it and trusts itself for less than it.
	Lease time.Duration `yaml:"lease"`
}

// DedupConfig bounds payload deduplication.
type DedupConfig struct {
	// Window: a payload key is remembered this long after its first sighting.
	Window time.Duration `yaml:"window"`
	// MaxEntries: at most this many keys are remembered (oldest go first).
	MaxEntries int `yaml:"max_entries"`
	// Path: a file (two, path and path.old) that keeps the window across a
	// restart of a single supervisor, so payloads its workers replay are
	// not published again. With ha.database the window is kept in the
	// database instead. Empty: kept in memory only.
	Path string `yaml:"path"`
}

// RebalanceConfig tunes POST /rebalance.
type RebalanceConfig struct {
	// Threshold: a worker is balanced within this fraction of its fair share
	// (0.1 = ±10 %).
	Threshold float64 `yaml:"threshold"`
}

// DefaultConfig returns the defaults (30 s timings, as the supervisor was
// first specified).
func DefaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:7300",
		Warmup:          30 * time.Second,
		WorkerTimeout:   30 * time.Second,
		TaskTimeout:     30 * time.Second,
		Tick:            time.Second,
		QueryInterval:   30 * time.Minute,
		QueryRetry:      10 * time.Second,
		Redundancy:      2,
		MaxMessageBytes: 1 << 20,
		SendQueue:       256,
		MaxLoadCeiling:  maxMaxLoad,
		Sink:            sink.Config{Type: sink.TypeStdout},
		Dedup:           DedupConfig{Window: 5 * time.Minute, MaxEntries: 1_000_000},
		Rebalance:       RebalanceConfig{Threshold: 0.1},
		HA:              HAConfig{Name: "default", Lease: 10 * time.Second},
	}
}

// ConfigError is a refused configuration: every problem found, each a
// *ConfigFieldError. It is the error type of every Fulcrum config
// (internal/confyaml's), so the supervisor's read like the gateway's.
type ConfigError = confyaml.Error

// ConfigFieldError is one problem: the field's dotted path, its line when
// the config was read from a file (0 otherwise), and why. It reads
// "line 3: redundancy: 0 is not between 1 and 64".
type ConfigFieldError = confyaml.FieldError

// LoadConfig reads and validates a YAML config file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("supervisor config: %w", err)
	}
	c, err := ParseConfigWith(data, func(c *Config) { c.ResolvePaths(filepath.Dir(path)) })
	if err != nil {
		return Config{}, fmt.Errorf("supervisor config %s: %w", path, err)
	}
	return c, nil
}

// ResolvePaths makes a file source's relative path relative to dir, the
// config file's folder: a path in a file is read as its author wrote it,
// not against whatever directory the process was started from.
func (c *Config) ResolvePaths(dir string) {
	if c.Dedup.Path != "" && !filepath.IsAbs(c.Dedup.Path) {
		c.Dedup.Path = filepath.Join(dir, c.Dedup.Path)
	}
	if c.Source.Type == "file" && c.Source.Path != "" && !filepath.IsAbs(c.Source.Path) {
		c.Source.Path = filepath.Join(dir, c.Source.Path)
	}
}

// ParseConfig decodes YAML over DefaultConfig and validates it. Unknown
// fields are refused; errors name the field and its line.
func ParseConfig(data []byte) (Config, error) {
	return ParseConfigWith(data, nil)
}

// ParseConfigWith is ParseConfig with a hook that adjusts the decoded config
// before validation (the command fills the token from the environment).
// Decoding problems (unknown fields, durations without a unit, values of
// the wrong kind) come back together as a *confyaml.Error.
func ParseConfigWith(data []byte, adjust func(*Config)) (Config, error) {
	c := DefaultConfig()
	doc, err := confyaml.Decode(data, &c) // an empty file: the defaults
	if err != nil {
		return Config{}, err
	}
	if adjust != nil {
		adjust(&c)
	}
	if err := c.Validate(); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				p.Line = doc.Line(p.Path)
				if p.Path == "token" && p.Line == 0 {
					// A token missing from the file is required by listen.
					p.Line = doc.Line("listen")
				}
			}
			confyaml.SortProblems(ce.Problems)
		}
		return Config{}, err
	}
	return c, nil
}

// Validate checks every field and fills the defaults of the source and
// sink. The error, when not nil, is a *ConfigError listing every problem,
// the source's and the sink's included, each on its field's path.
func (c *Config) Validate() error {
	var problems []*ConfigFieldError
	bad := func(field, format string, args ...any) {
		problems = append(problems, &ConfigFieldError{Path: field, Msg: fmt.Sprintf(format, args...)})
	}
	host, _, err := net.SplitHostPort(c.Listen)
	switch {
	case err != nil:
		bad("listen", "%q is not host:port", c.Listen)
	case c.Token == "" && !loopback.Is(host):
		bad("token", "required because listen %q is not a loopback address (workers and admin calls authenticate with it): set token in the file or FULCRUM_TOKEN", c.Listen)
	}
	tickOK := c.Tick >= time.Millisecond
	if !tickOK {
		bad("tick", "%v is below 1ms", c.Tick)
	}
	if c.Warmup < 0 {
		bad("warmup", "%v is negative", c.Warmup)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"worker_timeout", c.WorkerTimeout}, {"task_timeout", c.TaskTimeout}, {"query_interval", c.QueryInterval}, {"query_retry", c.QueryRetry}} {
		if tickOK && d.v < c.Tick { // against a bad tick, a comparison would only add noise
			bad(d.name, "%v is shorter than tick (%v)", d.v, c.Tick)
		}
	}
	if c.Redundancy < 1 || c.Redundancy > 64 {
		bad("redundancy", "%d is not between 1 and 64", c.Redundancy)
	}
	if c.MaxMessageBytes < 1024 {
		bad("max_message_bytes", "%d is below 1024", c.MaxMessageBytes)
	}
	if c.SendQueue < 1 {
		bad("send_queue", "%d is below 1", c.SendQueue)
	}
	if c.MaxLoadCeiling < 1 || c.MaxLoadCeiling > maxMaxLoad {
		bad("max_load_ceiling", "%d is not between 1 and %d", c.MaxLoadCeiling, maxMaxLoad)
	}
	if c.HA.Database != "" {
		if u, err := url.Parse(c.HA.Database); err != nil || !slices.Contains([]string{"postgres", "postgresql", "mysql", "mariadb"}, u.Scheme) || u.Host == "" {
			bad("ha.database", "want a postgres:// or mysql:// URL with a host")
		}
		if c.HA.Name == "" {
			bad("ha.name", "empty")
		}
		if c.HA.Advertise == "" {
			bad("ha.advertise", "required with ha.database (the URL workers reach this supervisor's /ws at)")
		} else if u, err := url.Parse(c.HA.Advertise); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			bad("ha.advertise", "%q is not a ws:// or wss:// URL", c.HA.Advertise)
		}
		if tickOK && c.HA.Lease < 5*c.Tick {
			// The leader trusts itself until two ticks before the lease
			// ends and renews every third of it.
			bad("ha.lease", "%v is shorter than five ticks (%v)", c.HA.Lease, 5*c.Tick)
		}
	}
	if c.Dedup.Window <= 0 {
		bad("dedup.window", "%v must be positive", c.Dedup.Window)
	}
	if c.Dedup.MaxEntries < 1 {
		bad("dedup.max_entries", "%d must be positive", c.Dedup.MaxEntries)
	}
	if c.Dedup.Path != "" && c.HA.Database != "" {
		bad("dedup.path", "not used with ha.database: the fleet's window is kept in the database, where the next leader reads it")
	}
	if t := c.Rebalance.Threshold; !(t >= 0 && t <= 1) {
		bad("rebalance.threshold", "%v is not between 0 and 1", t)
	}
	// The source and the sink list every problem on its own path.
	for _, v := range []struct {
		name     string
		validate func() error
	}{{"source", c.Source.Validate}, {"sink", c.Sink.Validate}} {
		err := v.validate()
		var list *ConfigError
		switch {
		case err == nil:
		case errors.As(err, &list):
			problems = append(problems, list.Problems...)
		default: // not theirs to return; placed on the section
			problems = append(problems, &ConfigFieldError{Path: v.name, Msg: err.Error()})
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &ConfigError{Problems: problems}
}

// Timings returns the lifecycle durations.
func (c *Config) Timings() Timings {
	return Timings{Warmup: c.Warmup, WorkerTimeout: c.WorkerTimeout, TaskTimeout: c.TaskTimeout,
		Tick: c.Tick, QueryInterval: c.QueryInterval, QueryRetry: c.QueryRetry}
}
