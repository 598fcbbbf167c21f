package redislock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Locker takes one redsync mutex per key.
type Locker struct {
	rs     *redsync.Redsync
	expiry time.Duration
}

// New returns a Locker on client. expiry bounds how long a crashed holder
// blocks others (default 8s; a hold takes milliseconds).
func New(client redis.UniversalClient, expiry time.Duration) *Locker {
	if expiry <= 0 {
		expiry = 8 * time.Second
	}
	return &Locker{rs: redsync.New(goredis.NewPool(client)), expiry: expiry}
}

// Lock blocks until it holds key or ctx ends. Waiters retry every 1-3 ms:
// redsync's default (50-250 ms) would leave workers idle far longer than a
// claim takes.
func (l *Locker) Lock(ctx context.Context, key string) (func(), error) {
	m := l.rs.NewMutex("fulcrum:flow:"+key,
		redsync.WithExpiry(l.expiry),
		redsync.WithTries(1<<20), // bounded by ctx instead
		redsync.WithRetryDelayFunc(func(int) time.Duration { return time.Millisecond + rand.N(2*time.Millisecond) }),
	)
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("redis lock %s: %w", key, err)
	}
	return func() { m.UnlockContext(context.Background()) }, nil
}
