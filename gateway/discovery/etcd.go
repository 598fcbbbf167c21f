package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// Etcd watches a key prefix. Each key below it is one provider, its value
// a JSON object {"url", "weight", "max_concurrency", "started_at"} written
// by Register (or `fulcrum register`) under a lease, so the key disappears
// when the provider stops keeping it alive. A value that does not parse is
// logged and left out; the others stand.
type Etcd struct {
	cfg config.EtcdDiscovery
	log *slog.Logger
	// probe: how often a watch checks that etcd answers. A watch on a
	// cluster that went away neither ends nor errs (the client retries
	// quietly), so without it an outage would go unnoticed and unlogged.
	probe time.Duration
}

// etcdProbe is how often a watching source checks that etcd answers.
const etcdProbe = 2 * time.Second

// NewEtcd builds an etcd source; it connects in Lookup and Watch.
func NewEtcd(c config.EtcdDiscovery, log *slog.Logger) (*Etcd, error) {
	if c.Prefix == "" {
		return nil, fmt.Errorf("discovery: etcd: empty prefix")
	}
	return &Etcd{cfg: c, log: log, probe: etcdProbe}, nil
}

// Source is "etcd".
func (e *Etcd) Source() string { return "etcd" }

// NewEtcdClient connects to etcd with a block's settings and a silent
// client logger.
func NewEtcdClient(c config.EtcdDiscovery) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: c.DialTimeout.D(),
		Username: c.Username, Password: c.Password, Logger: zap.NewNop()})
}

// Lookup reads the prefix once.
func (e *Etcd) Lookup(ctx context.Context) ([]Target, error) {
	cli, err := NewEtcdClient(e.cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery: etcd: %w", err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, e.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("discovery: etcd: get %s: %w", e.cfg.Prefix, err)
	}
	m := map[string]Target{}
	for _, kv := range resp.Kvs {
		e.put(m, string(kv.Key), kv.Value)
	}
	return list(m), nil
}

// Watch reads the prefix, then follows its changes from that revision;
// when the watch breaks (etcd compacted past it, the connection was lost
// for good) it reads the prefix again.
func (e *Etcd) Watch(ctx context.Context, update func([]Target)) {
	s := sender{update: update}
	out := &outage{log: e.log, msg: "discovery: etcd", attrs: []any{"endpoints", e.cfg.Endpoints, "prefix", e.cfg.Prefix}}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if e.watchOnce(ctx, &s, out) {
			backoff = 100 * time.Millisecond
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// watchOnce is one client's read-then-watch; true when it got as far as
// watching.
func (e *Etcd) watchOnce(ctx context.Context, s *sender, out *outage) bool {
	cli, err := NewEtcdClient(e.cfg)
	if err != nil {
		out.fail(fmt.Errorf("connect: %w", err))
		return false
	}
	defer cli.Close()
	gctx, cancelGet := context.WithTimeout(ctx, e.timeout())
	resp, err := cli.Get(gctx, e.cfg.Prefix, clientv3.WithPrefix())
	cancelGet()
	if err != nil {
		if ctx.Err() == nil {
			out.fail(fmt.Errorf("read %s: %w", e.cfg.Prefix, err))
		}
		return false
	}
	out.ok()
	m := map[string]Target{}
	for _, kv := range resp.Kvs {
		e.put(m, string(kv.Key), kv.Value)
	}
	s.send(list(m))
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The probe ends the watch when etcd stops answering: the outage is
	// logged, and the prefix is read again (with backoff) until it
	// answers, which also catches changes made meanwhile.
	probeErr := make(chan error, 1)
	go func() {
		t := time.NewTicker(e.probe)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(wctx, e.timeout())
			_, err := cli.Get(pctx, e.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			pcancel()
			if err != nil && wctx.Err() == nil {
				probeErr <- err
				cancel()
				return
			}
		}
	}()
	defer func() {
		select {
		case err := <-probeErr:
			out.fail(fmt.Errorf("watch: %w", err))
		default:
		}
	}()
	for wr := range cli.Watch(wctx, e.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			e.log.Warn("discovery: etcd: watch broke; reading the prefix again", "prefix", e.cfg.Prefix, "err", err)
			return true
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				delete(m, string(ev.Kv.Key))
			} else {
				e.put(m, string(ev.Kv.Key), ev.Kv.Value)
			}
		}
		s.send(list(m))
	}
	return true
}

// timeout bounds one request to etcd: the block's dial timeout, 5 s when
// unset.
func (e *Etcd) timeout() time.Duration {
	if d := e.cfg.DialTimeout.D(); d > 0 {
		return d
	}
	return 5 * time.Second
}

// put parses one registration into m; a bad one is logged and dropped.
func (e *Etcd) put(m map[string]Target, key string, value []byte) {
	t, err := ParseRegistration(value)
	if err != nil {
		delete(m, key)
		e.log.Warn("discovery: etcd: registration ignored", "key", key, "err", err)
		return
	}
	m[key] = t
}

// registration is the JSON of a key's value.
type registration struct {
	URL            string    `json:"url"`
	Weight         *int      `json:"weight,omitempty"`
	MaxConcurrency int       `json:"max_concurrency,omitempty"`
	StartedAt      time.Time `json:"started_at,omitzero"`
}

// ParseRegistration reads a key's value: weight defaults to 1, the URL is
// checked like a config target's.
func ParseRegistration(value []byte) (Target, error) {
	var r registration
	dec := json.NewDecoder(strings.NewReader(string(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Target{}, fmt.Errorf("value is not a registration {\"url\", \"weight\", \"max_concurrency\", \"started_at\"}: %w", err)
	}
	if _, err := config.TargetAddr(r.URL); err != nil {
		return Target{}, fmt.Errorf("url: %w", err)
	}
	t := Target{URL: r.URL, Weight: 1, MaxConcurrency: r.MaxConcurrency, StartedAt: r.StartedAt}
	if r.Weight != nil {
		t.Weight = *r.Weight
	}
	if t.Weight < 0 || t.MaxConcurrency < 0 {
		return Target{}, fmt.Errorf("weight %d, max_concurrency %d: may not be negative", t.Weight, t.MaxConcurrency)
	}
	return t, nil
}

// list is m's targets; two keys naming one URL count once.
func list(m map[string]Target) []Target {
	ts := make([]Target, 0, len(m))
	for _, t := range m {
		ts = append(ts, t)
	}
	sortTargets(ts)
	return dedupe(ts)
}

var _ Provider = (*Etcd)(nil)
