// Package discovery finds a gateway upstream's targets at run time: from
// DNS (A/AAAA or SRV records, re-resolved every refresh), from a watched
// file, or from etcd, where each provider registers itself under a key
// prefix with a lease and its start time.
//
// A Provider sends the whole current list on every change; the gateway
// applies it through the same path as an admin PUT, so targets that stay
// keep their state, new ones warm up (from their StartedAt when the source
// gives one) and vanished ones drain. A source that fails keeps its last
// good list. Another source is a type with the three methods of Provider.
package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// Target is one discovered server.
type Target struct {
	// URL is http://host:port.
	URL string `json:"url"`
	// Weight is its share (0 takes it out of rotation).
	Weight int `json:"weight"`
	// MaxConcurrency caps its requests in flight (0: unlimited).
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Warmup is its warm-up window (0: the discovery block's).
	Warmup time.Duration `json:"warmup,omitempty"`
	// Disabled keeps it listed but unused.
	Disabled bool `json:"disabled,omitempty"`
	// StartedAt is when it started, when the source knows: warm-up counts
	// from there.
	StartedAt time.Time `json:"started_at,omitzero"`
}

// Provider is a source of targets.
type Provider interface {
	// Source names the kind of source (dns, file, etcd); the admin API
	// shows it as each target's source.
	Source() string
	// Lookup asks the source once.
	Lookup(ctx context.Context) ([]Target, error)
	// Watch calls update with the whole list, sorted by URL, as soon as
	// the source answers and again on every change, until ctx ends. A
	// failing source is logged and retried; update is not called, so the
	// last good list stays.
	Watch(ctx context.Context, update func([]Target))
}

// New builds the provider of a validated discovery block.
func New(d *config.Discovery, log *slog.Logger) (Provider, error) {
	if log == nil {
		log = slog.Default()
	}
	switch {
	case d.DNS != nil:
		return NewDNS(*d.DNS, log)
	case d.File != nil:
		return NewFile(d.File.Path, log), nil
	case d.Etcd != nil:
		return NewEtcd(*d.Etcd, log)
	}
	return nil, errors.New("discovery: no source configured")
}

// Check looks up, once, every DNS source that says require: true and
// every file source, for `fulcrum gateway --check`: a name that does not
// resolve, a file that is missing or does not parse, is an error.
func Check(ctx context.Context, cfg *config.Config) error {
	var errs []error
	for _, name := range sortedNames(cfg.Upstreams) {
		u := cfg.Upstreams[name]
		if u.Discovery != nil && u.Discovery.File != nil {
			if _, err := NewFile(u.Discovery.File.Path, slog.Default()).Lookup(ctx); err != nil {
				hint := ""
				if errors.Is(err, fs.ErrNotExist) {
					hint = " (a relative path is read from the config file's folder)"
				}
				errs = append(errs, fmt.Errorf("upstreams.%s.discovery.file.path: %w%s", name, err, hint))
			}
			continue
		}
		if u.Discovery == nil || u.Discovery.DNS == nil || !u.Discovery.DNS.Require {
			continue
		}
		p, err := NewDNS(*u.Discovery.DNS, slog.Default())
		if err == nil {
			_, err = p.Lookup(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("upstreams.%s.discovery.dns (require: true): %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// ConfigTargets turns a discovered list into validated config targets: a
// window-less target gets warmup, and a list with a bad or repeated URL
// is refused whole.
func ConfigTargets(ts []Target, warmup time.Duration) ([]config.Target, error) {
	out := make([]config.Target, 0, len(ts))
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		addr, err := config.TargetAddr(t.URL)
		if err != nil {
			return nil, fmt.Errorf("discovery: targets[%d].url: %w", i, err)
		}
		if seen[addr] {
			return nil, fmt.Errorf("discovery: targets[%d].url: %s appears twice", i, t.URL)
		}
		seen[addr] = true
		if t.Weight < 0 || t.MaxConcurrency < 0 || t.Warmup < 0 {
			return nil, fmt.Errorf("discovery: targets[%d] (%s): weight, max_concurrency and warmup may not be negative", i, t.URL)
		}
		w := t.Weight
		ct := config.Target{URL: t.URL, Weight: &w, Warmup: config.Duration(t.Warmup), MaxConcurrency: t.MaxConcurrency,
			Disabled: t.Disabled, StartedAt: config.Time{Time: t.StartedAt}, Addr: addr}
		if ct.Warmup == 0 {
			ct.Warmup = config.Duration(warmup)
		}
		out = append(out, ct)
	}
	return out, nil
}

// sortTargets orders a list by URL so equal sets compare equal.
func sortTargets(ts []Target) {
	slices.SortFunc(ts, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.URL, b.URL), cmp.Compare(a.Weight, b.Weight), a.StartedAt.Compare(b.StartedAt))
	})
}

func sameTargets(a, b []Target) bool {
	return slices.EqualFunc(a, b, func(x, y Target) bool {
		return x.URL == y.URL && x.Weight == y.Weight && x.MaxConcurrency == y.MaxConcurrency &&
			x.Warmup == y.Warmup && x.Disabled == y.Disabled && x.StartedAt.Equal(y.StartedAt)
	})
}

// sender calls update only when the list changed since the last call.
type sender struct {
	update func([]Target)
	last   []Target
	sent   bool
}

func (s *sender) send(ts []Target) {
	sortTargets(ts)
	if s.sent && sameTargets(s.last, ts) {
		return
	}
	s.last, s.sent = ts, true
	s.update(slices.Clone(ts))
}

func sortedNames[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// outage logs a source's failures once when they start and once when the
// source answers again, whatever the number of retries between: a source
// down for an hour is two lines, not one per retry. Not safe for
// concurrent use.
type outage struct {
	log   *slog.Logger
	msg   string // "discovery: etcd"
	attrs []any  // what names the source: endpoints, name, path
	down  bool
	since time.Time
	fails int
}

// fail notes a failed try; only the first of an outage is logged (Warn).
func (o *outage) fail(err error) {
	o.fails++
	if o.down {
		o.log.Debug(o.msg+": still failing; keeping the last good targets", append(o.attrs, "err", err)...)
		return
	}
	o.down, o.since = true, time.Now()
	o.log.Warn(o.msg+": source unavailable; keeping the last good targets until it answers", append(o.attrs, "err", err)...)
}

// ok notes an answer; the first after an outage is logged (Info).
func (o *outage) ok() {
	if !o.down {
		return
	}
	o.log.Info(o.msg+": source answers again", append(o.attrs, "down_for", time.Since(o.since).Round(time.Millisecond), "failed_tries", o.fails)...)
	o.down, o.fails = false, 0
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
