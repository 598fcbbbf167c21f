package sink

import (
	"fmt"
	"net/url"
	"strings"
	"time"
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

// Validate checks c, naming the bad field as "sink.<field>", and fills
// defaults.
func (c *Config) Validate() error {
	if c.Type == "" {
		c.Type = TypeStdout
	}
	if c.Buffer < 0 {
		return fmt.Errorf("sink.buffer: %d is negative", c.Buffer)
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.FlushTimeout < 0 {
		return fmt.Errorf("sink.flush_timeout: %v is negative", c.FlushTimeout)
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	// Fields of another sink type are refused: they are almost always a typo
	// or a half-finished edit, and silently ignoring them hides it.
	only := func(field, val, typ string) error {
		if val != "" {
			return fmt.Errorf("sink.%s: only used by type %s, not %s", field, typ, c.Type)
		}
		return nil
	}
	switch c.Type {
	case TypeStdout:
		for _, f := range []struct{ name, val, typ string }{
			{"url", c.URL, "rabbitmq or nats"}, {"exchange", c.Exchange, TypeRabbitMQ},
			{"routing_key", c.RoutingKey, TypeRabbitMQ}, {"queue", c.Queue, TypeRabbitMQ}, {"subject", c.Subject, TypeNATS},
		} {
			if err := only(f.name, f.val, f.typ); err != nil {
				return err
			}
		}
	case TypeRabbitMQ:
		if err := checkURL(c.URL, "amqp", "amqps"); err != nil {
			return err
		}
		if c.Exchange == "" && c.RoutingKey == "" {
			c.RoutingKey = c.Queue
		}
		if c.Exchange == "" && c.RoutingKey == "" {
			return fmt.Errorf("sink.routing_key: required when sink.exchange is empty (the default exchange routes by queue name; or set sink.queue)")
		}
		if c.Exchange == "" && c.Queue != "" && c.RoutingKey != c.Queue {
			return fmt.Errorf("sink.routing_key: %q would not reach sink.queue %q through the default exchange, which routes by queue name", c.RoutingKey, c.Queue)
		}
		if err := only("subject", c.Subject, TypeNATS); err != nil {
			return err
		}
	case TypeNATS:
		if err := checkURL(c.URL, "nats", "tls", "ws", "wss"); err != nil {
			return err
		}
		if c.Subject == "" {
			return fmt.Errorf("sink.subject: required for type nats")
		}
		if strings.ContainsAny(c.Subject, "*> \t") || strings.HasPrefix(c.Subject, ".") ||
			strings.HasSuffix(c.Subject, ".") || strings.Contains(c.Subject, "..") {
			return fmt.Errorf("sink.subject: %q is not a publishable subject (no wildcards, spaces or empty tokens)", c.Subject)
		}
		for _, f := range []struct{ name, val string }{{"exchange", c.Exchange}, {"routing_key", c.RoutingKey}, {"queue", c.Queue}} {
			if err := only(f.name, f.val, TypeRabbitMQ); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("sink.type: unknown %q (want stdout, rabbitmq or nats)", c.Type)
	}
	if c.JetStream && c.Type != TypeNATS {
		return fmt.Errorf("sink.jetstream: only used by type nats, not %s", c.Type)
	}
	return nil
}

func checkURL(raw string, schemes ...string) error {
	if raw == "" {
		return fmt.Errorf("sink.url: required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("sink.url: %w", err)
	}
	for _, s := range schemes {
		if u.Scheme == s {
			if u.Host == "" {
				return fmt.Errorf("sink.url: %q has no host", redact(u))
			}
			return nil
		}
	}
	return fmt.Errorf("sink.url: scheme %q not supported (want %s)", u.Scheme, strings.Join(schemes, ", "))
}

// redact hides a password so errors and logs can show the URL.
func redact(u *url.URL) string {
	return u.Redacted()
}
