package sink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		c       Config
		wantErr string // substring; empty means valid
	}{
		{"empty is stdout", Config{}, ""},
		{"rabbitmq default exchange", Config{Type: "rabbitmq", URL: "amqp://guest:guest@127.0.0.1:5672/", RoutingKey: "q"}, ""},
		{"rabbitmq exchange without key", Config{Type: "rabbitmq", URL: "amqps://h/", Exchange: "x"}, ""},
		{"nats core", Config{Type: "nats", URL: "nats://127.0.0.1:4222", Subject: "rooms.payloads"}, ""},
		{"nats jetstream", Config{Type: "nats", URL: "nats://127.0.0.1:4222", Subject: "a", JetStream: true}, ""},
		{"unknown type", Config{Type: "kafka"}, "sink.type"},
		{"rabbitmq no url", Config{Type: "rabbitmq", RoutingKey: "q"}, "sink.url: required"},
		{"rabbitmq wrong scheme", Config{Type: "rabbitmq", URL: "http://h/", RoutingKey: "q"}, "sink.url: scheme"},
		{"rabbitmq no host", Config{Type: "rabbitmq", URL: "amqp://", RoutingKey: "q"}, "sink.url"},
		{"rabbitmq bad url", Config{Type: "rabbitmq", URL: "amqp://[::1", RoutingKey: "q"}, "sink.url"},
		{"rabbitmq nothing to route by", Config{Type: "rabbitmq", URL: "amqp://h/"}, "sink.routing_key"},
		{"rabbitmq with subject", Config{Type: "rabbitmq", URL: "amqp://h/", RoutingKey: "q", Subject: "s"}, "sink.subject"},
		{"rabbitmq with jetstream", Config{Type: "rabbitmq", URL: "amqp://h/", RoutingKey: "q", JetStream: true}, "sink.jetstream"},
		{"nats no subject", Config{Type: "nats", URL: "nats://h:4222"}, "sink.subject: required"},
		{"nats wildcard", Config{Type: "nats", URL: "nats://h:4222", Subject: "rooms.*"}, "sink.subject"},
		{"nats tail wildcard", Config{Type: "nats", URL: "nats://h:4222", Subject: "rooms.>"}, "sink.subject"},
		{"nats empty token", Config{Type: "nats", URL: "nats://h:4222", Subject: "a..b"}, "sink.subject"},
		{"nats with exchange", Config{Type: "nats", URL: "nats://h:4222", Subject: "a", Exchange: "x"}, "sink.exchange"},
		{"nats amqp url", Config{Type: "nats", URL: "amqp://h/", Subject: "a"}, "sink.url: scheme"},
		{"stdout with url", Config{Type: "stdout", URL: "nats://h"}, "sink.url"},
		{"negative buffer", Config{Buffer: -1}, "sink.buffer"},
		{"negative flush timeout", Config{FlushTimeout: -time.Second}, "sink.flush_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if c.Buffer != DefaultBuffer || c.FlushTimeout != DefaultFlushTimeout || c.Type == "" {
					t.Fatalf("defaults not filled: %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestValidateRedactsPassword(t *testing.T) {
	c := Config{Type: "rabbitmq", URL: "amqp://guest:s3cret@/", RoutingKey: "q"}
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Validate = %v, want an error without the password", err)
	}
}

// Every problem comes back at once, each a field error on its own path,
// not only the first as text.
func TestValidateListsEveryProblemOnItsPath(t *testing.T) {
	c := Config{Type: "nats", URL: "amqp://h/", Exchange: "x", Buffer: -1, JetStream: true}
	err := c.Validate()
	var list *confyaml.Error
	if !errors.As(err, &list) {
		t.Fatalf("Validate = %v (%T), want a *confyaml.Error", err, err)
	}
	var paths []string
	for _, p := range list.Problems {
		paths = append(paths, p.Path)
	}
	if got, want := strings.Join(paths, " "), "sink.buffer sink.url sink.subject sink.exchange"; got != want {
		t.Fatalf("paths %q, want %q (%v)", got, want, err)
	}
	if p := list.Problems[1]; !strings.HasPrefix(p.Msg, `scheme "amqp" not supported`) {
		t.Fatalf("sink.url: %q", p.Msg)
	}
}
