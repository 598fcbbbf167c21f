package sink

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

// Sink types.
const (
	TypeStdout   = "stdout"
	TypeRabbitMQ = "rabbitmq"
	TypeNATS     = "nats"
)

// Defaults filled in by Validate.
const (
	DefaultBuffer       = 10_000
	DefaultFlushTimeout = 5 * time.Second
)

// Config says where payloads go. It sits under `sink:` in the supervisor's
// YAML; Validate checks it and fills defaults.
type Config struct {
	// Type is stdout (default), rabbitmq or nats.
	Type string `yaml:"type"`
	// URL of the broker: amqp://user:pass@host:5672/vhost or nats://host:4222.
	URL string `yaml:"url"`
	// Exchange (rabbitmq) to publish to; empty means the default exchange,
	// which routes by queue name, so RoutingKey must then name a queue.
	Exchange string `yaml:"exchange"`
	// RoutingKey (rabbitmq) of every message; with Queue and the default
	// exchange it defaults to the queue's name.
	RoutingKey string `yaml:"routing_key"`
	// Queue (rabbitmq): a durable queue the sink declares at start (and
	// binds to Exchange with RoutingKey), so that what it publishes has
	// somewhere to go. Without it the sink only checks that the exchange,
	// or with the default exchange the queue RoutingKey names, exists.
	Queue string `yaml:"queue"`
	// Subject (nats) to publish on; no wildcards.
	Subject string `yaml:"subject"`
	// JetStream (nats): publish through JetStream and wait for its ack; a
	// stream must capture Subject.
	JetStream bool `yaml:"jetstream"`
	// Buffer is how many payloads may wait for the broker (default 10000);
	// past it new payloads are dropped and counted.
	Buffer int `yaml:"buffer"`
	// FlushTimeout bounds how long Close keeps delivering what is buffered
	// (default 5s).
	FlushTimeout time.Duration `yaml:"flush_timeout"`
}

// Validate checks c and fills defaults. The error, when not nil, is a
// *confyaml.Error listing every problem, each on its field's path
// ("sink.url"), so the supervisor's config can place it on its line.
func (c *Config) Validate() error {
	var problems []*confyaml.FieldError
	bad := func(field, format string, args ...any) {
		problems = append(problems, &confyaml.FieldError{Path: "sink." + field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Type == "" {
		c.Type = TypeStdout
	}
	if c.Buffer < 0 {
		bad("buffer", "%d is negative", c.Buffer)
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.FlushTimeout < 0 {
		bad("flush_timeout", "%v is negative", c.FlushTimeout)
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	// Fields of another sink type are refused: they are almost always a typo
	// or a half-finished edit, and silently ignoring them hides it.
	only := func(field, val, typ string) {
		if val != "" {
			bad(field, "only used by type %s, not %s", typ, c.Type)
		}
	}
	checkURL := func(schemes ...string) {
		if msg := urlProblem(c.URL, schemes...); msg != "" {
			bad("url", "%s", msg)
		}
	}
	switch c.Type {
	case TypeStdout:
		only("url", c.URL, "rabbitmq or nats")
		only("exchange", c.Exchange, TypeRabbitMQ)
		only("routing_key", c.RoutingKey, TypeRabbitMQ)
		only("queue", c.Queue, TypeRabbitMQ)
		only("subject", c.Subject, TypeNATS)
	case TypeRabbitMQ:
		checkURL("amqp", "amqps")
		if c.Exchange == "" && c.RoutingKey == "" {
			c.RoutingKey = c.Queue
		}
		switch {
		case c.Exchange == "" && c.RoutingKey == "":
			bad("routing_key", "required when sink.exchange is empty (the default exchange routes by queue name; or set sink.queue)")
		case c.Exchange == "" && c.Queue != "" && c.RoutingKey != c.Queue:
			bad("routing_key", "%q would not reach sink.queue %q through the default exchange, which routes by queue name", c.RoutingKey, c.Queue)
		}
		only("subject", c.Subject, TypeNATS)
	case TypeNATS:
		checkURL("nats", "tls", "ws", "wss")
		switch {
		case c.Subject == "":
			bad("subject", "required for type nats")
		case strings.ContainsAny(c.Subject, "*> \t") || strings.HasPrefix(c.Subject, ".") ||
			strings.HasSuffix(c.Subject, ".") || strings.Contains(c.Subject, ".."):
			bad("subject", "%q is not a publishable subject (no wildcards, spaces or empty tokens)", c.Subject)
		}
		only("exchange", c.Exchange, TypeRabbitMQ)
		only("routing_key", c.RoutingKey, TypeRabbitMQ)
		only("queue", c.Queue, TypeRabbitMQ)
	default:
		bad("type", "unknown %q (want stdout, rabbitmq or nats)", c.Type)
	}
	if c.JetStream && c.Type != TypeNATS {
		bad("jetstream", "only used by type nats, not %s", c.Type)
	}
	if len(problems) == 0 {
		return nil
	}
	return &confyaml.Error{Problems: problems}
}

// urlProblem says what is wrong with a broker URL; "" when nothing is.
func urlProblem(raw string, schemes ...string) string {
	if raw == "" {
		return "required"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err.Error()
	}
	if !slices.Contains(schemes, u.Scheme) {
		return fmt.Sprintf("scheme %q not supported (want %s)", u.Scheme, strings.Join(schemes, ", "))
	}
	if u.Host == "" {
		return fmt.Sprintf("%q has no host", redact(u))
	}
	return ""
}

// redact hides a password so errors and logs can show the URL.
func redact(u *url.URL) string {
	return u.Redacted()
}
