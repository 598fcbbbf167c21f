package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// Registration is a provider's key under an etcd prefix, kept alive by a
// lease. Close deletes it at once (a clean stop); if the process dies
// instead, the key disappears when the lease lapses, ttl later.
type Registration struct {
	// Key is the registered key: the prefix and the target's host:port.
	Key string

	cancel context.CancelFunc
	done   chan struct{}
	cli    *clientv3.Client
	leases chan clientv3.LeaseID
}

// Register puts t under prefix with a lease of ttl (at least 2s; etcd
// rounds shorter ones up) and keeps the lease alive until Close; ctx
// bounds only the first registration, and when it fails (ctx ended, say)
// nothing is left registered. A StartedAt left zero is set to now:
// give the process's own start time so a restart is seen as one. If etcd
// loses the lease (it was down longer than ttl), the key is put again
// under a new lease, with the same start time. If the process dies, or
// cli is closed, the key disappears when the lease lapses.
func Register(ctx context.Context, cli *clientv3.Client, prefix string, t Target, ttl time.Duration, log *slog.Logger) (*Registration, error) {
	if log == nil {
		log = slog.Default()
	}
	addr, err := config.TargetAddr(t.URL)
	if err != nil {
		return nil, fmt.Errorf("discovery: register: url: %w", err)
	}
	if t.Weight < 0 || t.MaxConcurrency < 0 {
		return nil, fmt.Errorf("discovery: register: weight %d, max_concurrency %d: may not be negative", t.Weight, t.MaxConcurrency)
	}
	if t.StartedAt.IsZero() {
		t.StartedAt = time.Now()
	}
	w := t.Weight
	value, err := json.Marshal(registration{URL: t.URL, Weight: &w, MaxConcurrency: t.MaxConcurrency, StartedAt: t.StartedAt.UTC()})
	if err != nil {
		return nil, err
	}
	secs := int64(max(ttl, 2*time.Second) / time.Second)
	r := &Registration{Key: prefix + addr, cli: cli, done: make(chan struct{}), leases: make(chan clientv3.LeaseID, 1)}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	keepalive, err := r.put(ctx, kctx, string(value), secs)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("discovery: register %s: %w", r.Key, err)
	}
	go func() {
		defer close(r.done)
		for {
			for range keepalive {
			}
			if kctx.Err() != nil || cli.Ctx().Err() != nil {
				return // closed, or the client was
			}
			// The lease is gone (etcd lost it, or was unreachable past
			// ttl): register again, retrying until it works or ctx ends.
			for {
				log.Warn("discovery: register: lease lost; registering again", "key", r.Key)
				if keepalive, err = r.put(kctx, kctx, string(value), secs); err == nil {
					break
				}
				if !sleep(kctx, time.Second) || cli.Ctx().Err() != nil {
					return
				}
			}
		}
	}()
	return r, nil
}

// put grants a lease and puts the key under it within ctx, and keeps the
// lease alive until keep ends.
func (r *Registration) put(ctx, keep context.Context, value string, secs int64) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	g, err := r.cli.Grant(ctx, secs)
	if err != nil {
		return nil, err
	}
	if _, err := r.cli.Put(ctx, r.Key, value, clientv3.WithLease(g.ID)); err != nil {
		// The put may have been applied and its answer lost (ctx ended
		// meanwhile): revoke the lease, which deletes the key with it, so
		// no key is left that nobody keeps alive or deregisters.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = r.cli.Revoke(rctx, g.ID)
		cancel()
		return nil, err
	}
	select {
	case <-r.leases:
	default:
	}
	r.leases <- g.ID
	return r.cli.KeepAlive(keep, g.ID)
}

// Close stops keeping the lease alive and revokes it, which deletes the
// key at once.
func (r *Registration) Close() error {
	r.cancel()
	<-r.done
	var id clientv3.LeaseID
	select {
	case id = <-r.leases:
	default:
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.cli.Revoke(ctx, id); err != nil {
		return fmt.Errorf("discovery: deregister %s: %w", r.Key, err)
	}
	return nil
}

// Done is closed once the registration stopped being kept alive.
func (r *Registration) Done() <-chan struct{} { return r.done }
