package config

import (
	"fmt"
	"net"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

// Discovery finds an upstream's targets at run time, in place of a static
// targets list: exactly one of dns, file or etcd (package
// gateway/discovery runs them).
type Discovery struct {
	DNS  *DNSDiscovery  `yaml:"dns"`
	File *FileDiscovery `yaml:"file"`
	Etcd *EtcdDiscovery `yaml:"etcd"`
	// Provider names a source written in Go and given to the gateway
	// (gateway.Options.Providers).
	Provider string `yaml:"provider"`
	// Warmup is the warm-up window of each discovered target that does not
	// give its own (default 0: none). It counts from the target's
	// started_at when the source reports one.
	Warmup Duration `yaml:"warmup"`
}

// Kind names the configured source: dns, file, etcd or provider.
func (d *Discovery) Kind() string {
	switch {
	case d.Provider != "":
		return "provider"
	case d.DNS != nil:
		return "dns"
	case d.File != nil:
		return "file"
	case d.Etcd != nil:
		return "etcd"
	}
	return ""
}

// DNSDiscovery resolves a name every Refresh.
type DNSDiscovery struct {
	// Name is the name to resolve (api.internal, _http._tcp.api.internal).
	Name string `yaml:"name"`
	// Type is A (A and AAAA records, the port from Port; the default) or
	// SRV (port and weight from each record).
	Type string `yaml:"type"`
	// Port is the targets' port for A/AAAA (required there).
	Port int `yaml:"port"`
	// Server is the resolver, host:port (default: the first nameserver of
	// /etc/resolv.conf).
	Server string `yaml:"server"`
	// Refresh is the longest wait before the name is resolved again
	// (default 30s); records with a shorter TTL are resolved again when
	// it runs out (not more than once a second).
	Refresh Duration `yaml:"refresh"`
	// Timeout bounds one query (default 2s).
	Timeout Duration `yaml:"timeout"`
	// Require makes a name that does not resolve an error of --check.
	// Otherwise the upstream just has no targets until it resolves.
	Require bool `yaml:"require"`
	// MaxConcurrency caps each target found (0: unlimited).
	MaxConcurrency int `yaml:"max_concurrency"`

	// Scheme is the targets' scheme: https when the upstream has a tls
	// block, else http.
	Scheme string `yaml:"-"`
}

// FileDiscovery reads a list of targets from a file and watches it.
type FileDiscovery struct {
	// Path is a YAML or JSON list of targets (url, weight,
	// max_concurrency, warmup, disabled, started_at), bare or under
	// "targets:". A relative path is relative to the config file's
	// folder.
	Path string `yaml:"path"`
}

// EtcdDiscovery watches a key prefix where providers register themselves.
type EtcdDiscovery struct {
	// Endpoints are the etcd client URLs (default [http://127.0.0.1:2379]).
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the key prefix, one key per provider below it
	// (/fulcrum/upstreams/api/).
	Prefix string `yaml:"prefix"`
	// DialTimeout bounds connecting to etcd (default 5s).
	DialTimeout Duration `yaml:"dial_timeout"`
	// Username and Password, when etcd has authentication on.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// Time is a point in time written in RFC 3339 (2026-11-23T21:00:00Z).
type Time struct{ time.Time }

// UnmarshalYAML parses an RFC 3339 time.
func (t *Time) UnmarshalYAML(n *yaml.Node) error {
	// confyaml reports these errors at the field's path and line.
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a time like 2026-11-23T21:00:00Z, got %s", confyaml.Describe(n))
	}
	v, err := time.Parse(time.RFC3339Nano, n.Value)
	if err != nil {
		return fmt.Errorf("%s is not an RFC 3339 time (like 2026-11-23T21:00:00Z)", confyaml.Describe(n))
	}
	t.Time = v
	return nil
}

// MarshalYAML writes RFC 3339.
func (t Time) MarshalYAML() (any, error) { return t.Format(time.RFC3339Nano), nil }

// discovery checks an upstream's discovery block and applies its defaults.
// A provider's name is checked against the gateway's providers when the
// gateway starts or reloads.
func (v *validator) discovery(u *Upstream, at func(keys ...any) []any) {
	d := u.Discovery
	if len(u.Targets) > 0 {
		v.fail(at("discovery"), "targets and discovery exclude each other: give one")
	}
	n := 0
	for _, set := range []bool{d.DNS != nil, d.File != nil, d.Etcd != nil, d.Provider != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		v.fail(at("discovery"), "give exactly one of dns, file, etcd or provider (have %d)", n)
	}
	if s := d.DNS; s != nil {
		at := func(keys ...any) []any { return at(append([]any{"discovery", "dns"}, keys...)...) }
		if s.Name == "" || strings.ContainsAny(s.Name, " /:") {
			v.fail(at("name"), "%q is not a DNS name", s.Name)
		}
		switch strings.ToUpper(s.Type) {
		case "", "A":
			s.Type = "A"
			if s.Port < 1 || s.Port > 65535 {
				v.fail(at("port"), "%d is not a port 1..65535 (required for type A)", s.Port)
			}
		case "SRV":
			s.Type = "SRV"
			if s.Port != 0 {
				v.fail(at("port"), "SRV records carry their own ports; leave port out")
			}
		default:
			v.fail(at("type"), "%q is not A or SRV", s.Type)
		}
		if s.Server != "" {
			if _, _, err := net.SplitHostPort(s.Server); err != nil {
				v.fail(at("server"), "%q is not host:port", s.Server)
			}
		}
		def(&s.Refresh, 30*time.Second)
		def(&s.Timeout, 2*time.Second)
		if s.Refresh.D() < 100*time.Millisecond {
			v.fail(at("refresh"), "%v is below 100ms", s.Refresh.D())
		}
		if s.MaxConcurrency < 0 {
			v.fail(at("max_concurrency"), "%d is negative", s.MaxConcurrency)
		}
	}
	if s := d.File; s != nil && s.Path == "" {
		v.fail(at("discovery", "file", "path"), "required")
	}
	if s := d.Etcd; s != nil {
		at := func(keys ...any) []any { return at(append([]any{"discovery", "etcd"}, keys...)...) }
		if len(s.Endpoints) == 0 {
			s.Endpoints = []string{"http://127.0.0.1:2379"}
		}
		for i, e := range s.Endpoints {
			if e == "" || strings.ContainsAny(e, " ") {
				v.fail(at("endpoints", i), "%q is not an etcd endpoint (like http://127.0.0.1:2379)", e)
			}
		}
		if s.Prefix == "" {
			v.fail(at("prefix"), "required (like /fulcrum/upstreams/api/)")
		}
		def(&s.DialTimeout, 5*time.Second)
	}
}
