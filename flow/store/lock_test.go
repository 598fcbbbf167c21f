package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/redislock"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func redisLocker(t testing.TB) store.Locker {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { c.Close() })
	return redislock.New(c, 0)
}

// Fair shares with the Redis lock: the claim of several keys without
// SKIP LOCKED (its status guard instead).
func TestRedisLockFair(t *testing.T) {
	t.Parallel()
	for name, dsn := range map[string]func(testing.TB) string{
		"postgres": func(t testing.TB) string { return testenv.Postgres(t) },
		"mysql":    func(t testing.TB) string { return "mysql://" + testenv.MySQL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.FairByWeight(t, factory(dsn), store.Options{HoldLock: redisLocker(t)})
		})
	}
}

// Asyncflow's design: a Redis lock around the claim instead of SKIP LOCKED.
// Same stress as the suite: three stores, eight holders each.
func TestRedisLockNoDoubleClaim(t *testing.T) {
	t.Parallel()
	for name, dsn := range map[string]func(testing.TB) string{
		"postgres": func(t testing.TB) string { return testenv.Postgres(t) },
		"mysql":    func(t testing.TB) string { return "mysql://" + testenv.MySQL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.StressHold(t, factory(dsn), store.Options{HoldLock: redisLocker(t)}, 3, 8, 400)
		})
	}
}

// BenchmarkClaim compares the claim with SKIP LOCKED against Asyncflow's
// redsync lock: `workers` goroutines hold batches of 10 and set them
// success, on PostgreSQL and MariaDB. One op is one task finished.
//
//	go test ./flow/store -run '^$' -bench Claim -benchtime 20000x
func BenchmarkClaim(b *testing.B) {
	dbs := []struct {
		name string
		dsn  func(testing.TB) string
	}{
		{"postgres", func(t testing.TB) string { return testenv.Postgres(t) }},
		{"mysql", func(t testing.TB) string { return "mysql://" + testenv.MySQL(t) }},
	}
	for _, db := range dbs {
		for _, mode := range []string{"skip_locked", "redis"} {
			for _, workers := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/workers=%d", db.name, mode, workers), func(b *testing.B) {
					opts := store.Options{}
					if mode == "redis" {
						opts.HoldLock = redisLocker(b)
					}
					benchClaim(b, factory(db.dsn), opts, workers, 10)
				})
			}
		}
	}
}

// BenchmarkClaimBatch100 is the PostgreSQL claim with batches of 100 (hold
// limit and set batch): commits, not rows, are what cost.
func BenchmarkClaimBatch100(b *testing.B) {
	benchClaim(b, factory(func(t testing.TB) string { return testenv.Postgres(t) }), store.Options{}, 8, 100)
}

func benchClaim(b *testing.B, f storetest.Factory, opts store.Options, workers, batch int) {
	ctx := context.Background()
	s := f.Open(b, storetest.Prefix(), opts)
	tt := flow.TaskType{TaskType: "bench", ScheduleLimit: batch, MaxProcessingMS: 600000, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
	if err := s.RegisterType(ctx, tt, time.Now()); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	for done := 0; done < b.N; done += 1000 {
		n := min(1000, b.N-done)
		recs := make([]flow.Record, n)
		for i, id := range flow.NewTaskIDs(now, n) {
			recs[i] = flow.NewRecord(id, flow.NewTask{TaskType: "bench"}, tt, now)
		}
		if err := s.CreateTasks(ctx, recs); err != nil {
			b.Fatal(err)
		}
	}
	var finished atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for finished.Load() < int64(b.N) {
				t := time.Now().UTC()
				got, err := s.Hold(ctx, store.HoldParams{TaskType: "bench", WorkerID: "w", Limit: batch, Lease: flow.NewLease(), Now: t, LeaseExpiry: t.Add(time.Hour)})
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					if finished.Load() >= int64(b.N) {
						return
					}
					continue // the rest is held by others
				}
				reqs := make([]flow.SetTaskRequest, len(got))
				for i, r := range got {
					reqs[i] = flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess}
				}
				if _, err := s.SetTasks(ctx, reqs, time.Now().UTC()); err != nil {
					b.Error(err)
					return
				}
				finished.Add(int64(len(got)))
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}
