package gateway

import (
	"container/list"
	"context"
	"hash/maphash"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// Rate limits per route: a token bucket per key, in this gateway
// (golang.org/x/time/rate, the Go team's token bucket) or shared by a
// fleet through Redis (go-redis's redis_rate: GCRA in one Lua script, so
// one round trip per request and no race between gateways). A shared
// limit whose Redis is unreachable falls back to this gateway's share
// of it, and says so once in the log, and once when Redis is back.

// rateLimiter answers whether a request with key may pass now, and if
// not, after how long it would.
type rateLimiter struct {
	cfg config.RateLimit
	// header is the key's header name in lower case; "" keys by client IP.
	header string
	local  *localBuckets // the limit itself, or the fallback share of a shared one
	// shared, when set: Redis holds the buckets.
	shared *redis_rate.Limiter
	client *redis.Client
	limit  redis_rate.Limit
	name   string // the key prefix in Redis: one route's buckets
	down   atomic.Bool
	log    *slog.Logger
	// limited counts the requests answered 429, for GET /routes.
	limited atomic.Int64
}

func newRateLimiter(rl *config.RateLimit, routeIndex int, log *slog.Logger, dropped func()) (*rateLimiter, error) {
	l := &rateLimiter{cfg: *rl, log: log}
	if rl.KeyParsed.Kind == "header" {
		l.header = strings.ToLower(rl.KeyParsed.Name)
	}
	per, burst := rl.PerSecond, rl.Burst
	if rl.Shared != "" {
		opt, err := redis.ParseURL(rl.Shared)
		if err != nil {
			return nil, err
		}
		opt.MaxRetries = -1 // a refusal must not wait for retries: the fallback answers
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 250*time.Millisecond, 250*time.Millisecond, 250*time.Millisecond
		l.client = redis.NewClient(opt)
		l.shared = redis_rate.NewLimiter(l.client)
		// GCRA's emission interval is period/rate: a fractional rate is
		// the same interval over a longer period.
		l.limit = redis_rate.Limit{Rate: int(math.Round(per * 1000)), Burst: burst, Period: 1000 * time.Second}
		l.name = "fulcrum:rl:" + strconv.Itoa(routeIndex) + ":"
		per, burst = per/float64(rl.Gateways), max(1, burst/rl.Gateways)
	}
	l.local = newLocalBuckets(rate.Limit(per), burst, rl.MaxKeys, dropped)
	return l, nil
}

// allow reports whether key may pass now; if not, retry is how long
// until it would.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	ok, wait := l.check(key)
	if !ok {
		l.limited.Add(1)
	}
	return ok, wait
}

func (l *rateLimiter) check(key string) (bool, time.Duration) {
	if l.shared == nil {
		return l.local.allow(key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	res, err := l.shared.Allow(ctx, l.name+key, l.limit)
	cancel()
	if err != nil {
		if !l.down.Swap(true) {
			l.log.Warn("rate limit: Redis unreachable; each gateway allows its share of the limit on its own",
				"shared", l.cfg.Shared, "share_per_second", l.cfg.PerSecond/float64(l.cfg.Gateways), "err", err)
		}
		return l.local.allow(key)
	}
	if l.down.Swap(false) {
		l.log.Info("rate limit: Redis reachable again; the limit is shared", "shared", l.cfg.Shared)
	}
	return res.Allowed > 0, res.RetryAfter
}

func (l *rateLimiter) close() {
	if l.client != nil {
		_ = l.client.Close()
	}
}

// localBuckets is a token bucket per key with a bound on the keys kept:
// the least recently seen one goes first. Sharded so that concurrent
// requests of different keys seldom share a lock.
type localBuckets struct {
	per     rate.Limit
	burst   int
	seed    maphash.Seed
	dropped func()
	shards  [16]bucketShard
}

type bucketShard struct {
	mu  sync.Mutex
	max int
	m   map[string]*list.Element
	lru list.List // of *bucket, most recent first
}

type bucket struct {
	key string
	lim *rate.Limiter
}

func newLocalBuckets(per rate.Limit, burst, maxKeys int, dropped func()) *localBuckets {
	b := &localBuckets{per: per, burst: burst, seed: maphash.MakeSeed(), dropped: dropped}
	for i := range b.shards {
		b.shards[i].max = max(1, (maxKeys+len(b.shards)-1)/len(b.shards))
		b.shards[i].m = map[string]*list.Element{}
	}
	return b
}

func (b *localBuckets) allow(key string) (bool, time.Duration) {
	s := &b.shards[maphash.String(b.seed, key)%uint64(len(b.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	// The clock is read under the lock: x/time/rate takes a time older
	// than its last as a new last, and the next call then credits the
	// refill between the two twice (concurrent requests reading the clock
	// before the lock let about a quarter more through).
	now := time.Now()
	var lim *rate.Limiter
	if e := s.m[key]; e != nil {
		s.lru.MoveToFront(e)
		lim = e.Value.(*bucket).lim
	} else {
		if len(s.m) >= s.max {
			old := s.lru.Back()
			s.lru.Remove(old)
			delete(s.m, old.Value.(*bucket).key)
			b.dropped()
		}
		lim = rate.NewLimiter(b.per, b.burst)
		s.m[key] = s.lru.PushFront(&bucket{key: key, lim: lim})
	}
	if lim.AllowN(now, 1) {
		return true, 0
	}
	// The time until one token is back.
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(b.per) * float64(time.Second))
}
