package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/redislock"
)

// Server is a running flow server.
type Server struct {
	cfg     Config
	st      store.Store
	log     *slog.Logger
	wake    *waker
	m       *metrics
	types   *typeCache
	ln      net.Listener
	http    *http.Server
	rdb     *redis.Client
	stop    chan struct{} // closed by Close: long polls return, loops end
	loops   sync.WaitGroup
	closing sync.Once
	closed  error

	inflight atomic.Int64 // API requests being served (MaxInFlight)
	bodyMem  atomic.Int64 // bytes reserved by bodies being read (MaxBodyMemory)
}

// Start opens (and migrates) the database, starts listening and starts the
// background loops. Close stops it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, wake: newWaker(), stop: make(chan struct{})}
	opts := store.Options{TablePrefix: cfg.TablePrefix, OnDue: s.wake.signal, Logger: cfg.Logger}
	if cfg.LockMode == LockRedis {
		s.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			s.rdb.Close()
			return nil, fmt.Errorf("flow server: --lock redis: no Redis at %s (give its address with --redis, or leave --lock at skip_locked, which needs none): %w", cfg.RedisAddr, err)
		}
		opts.HoldLock = redislock.New(s.rdb, 0)
	}
	st, err := store.Open(ctx, cfg.DB, opts)
	if err != nil {
		s.closeRedis()
		return nil, fmt.Errorf("flow server: %w", err)
	}
	s.st = st
	s.types = &typeCache{st: st, ttl: cfg.TypeCacheTTL, m: map[string]typeEntry{}}
	s.m = newMetrics(st)
	if types, err := st.ListTypes(ctx); err == nil { // else the first scrape makes them
		for _, tt := range types {
			s.m.taskType(tt.TaskType)
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		st.Close()
		s.closeRedis()
		return nil, fmt.Errorf("flow server: listen %s: %w", cfg.Listen, err)
	}
	s.ln = ln
	s.http = &http.Server{
		Handler:           s.withConsole(s.routes()),
		ReadHeaderTimeout: cfg.ReadTimeout, // the body's own clock starts in guard
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("flow server: serve", "err", err)
		}
	}()
	s.every(cfg.RescueInterval, s.rescue)
	if cfg.Retention > 0 {
		s.every(cfg.PruneInterval, s.prune)
	}
	s.every(cfg.CronInterval, s.fireCron)
	s.every(cfg.CountFoldInterval, s.foldCounts)
	s.log.Info("flow server listening", "addr", s.Addr(), "db", st.Dialect(), "lock", cfg.LockMode)
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is "http://" + Addr().
func (s *Server) URL() string { return "http://" + s.Addr() }

// Store is the server's store, for tests and tools in the same process.
func (s *Server) Store() store.Store { return s.st }

// Close stops accepting requests, answers waiting holds with what they have
// (nothing), lets requests in flight finish (up to 30 s), stops the loops
// and closes the database.
func (s *Server) Close() error {
	s.closing.Do(func() {
		close(s.stop)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := s.http.Shutdown(ctx)
		s.loops.Wait()
		s.closed = errors.Join(err, s.st.Close())
		s.closeRedis()
	})
	return s.closed
}

func (s *Server) closeRedis() {
	if s.rdb != nil {
		s.rdb.Close()
	}
}

// every runs fn every d until Close.
func (s *Server) every(d time.Duration, fn func(context.Context)) {
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-s.stop; cancel() }()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				fn(ctx)
			}
		}
	}()
}

func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// rescue returns tasks with expired leases to pending, a batch at a time.
func (s *Server) rescue(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := s.st.RescueExpired(ctx, now(), 500)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("flow server: rescue expired leases", "err", err)
			}
			return
		}
		s.m.rescued.Add(float64(n))
		if n < 500 {
			return
		}
	}
}

// fireCron creates the due ticks' tasks of every periodic type. Every
// server runs it; the store makes each tick fire once (FireCron).
func (s *Server) fireCron(ctx context.Context) {
	types, err := s.st.ListTypes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("flow server: periodic types", "err", err)
		}
		return
	}
	for _, tt := range types {
		if tt.Cron == "" {
			continue
		}
		sch, err := flow.ParseCron(tt.Cron)
		if err != nil { // stored by a newer server, say
			s.log.Warn("flow server: periodic type's cron", "task_type", tt.TaskType, "cron", tt.Cron, "err", err)
			continue
		}
		now := s.cfg.Clock().UTC().Truncate(time.Microsecond)
		n, err := s.st.FireCron(ctx, tt.TaskType, now, sch.Next, func(tick time.Time) flow.Record {
			rec := flow.NewRecord(flow.NewTaskIDs(now, 1)[0], flow.NewTask{TaskType: tt.TaskType, TaskStage: tt.CronStage, TaskContext: tt.CronContext}, tt, now)
			rec.OrderTime = tick // due at its tick, ahead of ticks after it
			return rec
		})
		s.m.created.WithLabelValues(tt.TaskType).Add(float64(n))
		if err != nil && ctx.Err() == nil {
			s.log.Warn("flow server: firing periodic type", "task_type", tt.TaskType, "err", err)
		}
	}
}

// foldCounts folds the task counts' committed changes into their totals
// (Store.FoldCounts), so that stats, the funnel and the metrics sum a few
// rows. Every server runs it; one folds at a time.
func (s *Server) foldCounts(ctx context.Context) {
	if _, err := s.st.FoldCounts(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("flow server: fold task counts", "err", err)
	}
}

// prune deletes finished tasks older than the retention, a batch at a time.
func (s *Server) prune(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := s.st.PruneEnded(ctx, now().Add(-s.cfg.Retention), 1000)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("flow server: prune finished tasks", "err", err)
			}
			return
		}
		s.m.pruned.Add(float64(n))
		if n < 1000 {
			return
		}
	}
}

// typeCache keeps task type configs for TypeCacheTTL: hold and create read
// them on every call.
type typeCache struct {
	st  store.Store
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]typeEntry
}

type typeEntry struct {
	tt flow.TaskType
	at time.Time
}

func (c *typeCache) get(ctx context.Context, name string) (flow.TaskType, error) {
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.tt, nil
	}
	tt, err := c.st.GetType(ctx, name)
	if err != nil {
		return tt, err
	}
	c.put(tt)
	return tt, nil
}

func (c *typeCache) put(tt flow.TaskType) {
	c.mu.Lock()
	c.m[tt.TaskType] = typeEntry{tt: tt, at: time.Now()}
	c.mu.Unlock()
}
