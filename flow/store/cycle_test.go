package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/cputime"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// BenchmarkCycle is the store's share of the end-to-end figure: two
// goroutines create tasks in batches while `workers` goroutines hold
// batches and set them success, all at once (as River's benchmark inserts
// and works at once). One op is one task created, held and finished; the
// timer covers all three.
//
//	go test ./flow/store -run '^$' -bench Cycle -benchtime 20000x
func BenchmarkCycle(b *testing.B) {
	dbs := []struct {
		name   string
		dsn    func(testing.TB) string
		server string // the database's process name, for its CPU time
	}{
		{"postgres", func(t testing.TB) string { return testenv.Postgres(t) }, "postgres"},
		{"mysql", func(t testing.TB) string { return "mysql://" + testenv.MySQL(t) }, "mariadbd"},
		{"sqlite", func(t testing.TB) string { return "sqlite://" + filepath.Join(t.TempDir(), "flow.db") }, ""},
	}
	for _, db := range dbs {
		for _, batch := range []int{10, 100} {
			b.Run(fmt.Sprintf("%s/batch=%d", db.name, batch), func(b *testing.B) {
				benchCycle(b, factory(db.dsn), db.server, 2, 8, batch, nil)
			})
		}
	}
}

// BenchmarkCycleKeyed is BenchmarkCycle with every task keyed: 1,000
// sequence keys and 100 rate keys, round robin, so each claim checks
// both keys of each task it takes and the check after it runs. What the
// keys cost when used, beside BenchmarkCycle's figure.
//
//	go test ./flow/store -run '^$' -bench CycleKeyed -benchtime 20000x
func BenchmarkCycleKeyed(b *testing.B) {
	keyed := func(i int, nt *flow.NewTask) {
		nt.SequenceKey, nt.RateKey = fmt.Sprintf("order-%d", i%1000), fmt.Sprintf("api-%d", i%100)
	}
	for _, db := range []struct {
		name   string
		dsn    func(testing.TB) string
		server string
	}{
		{"postgres", func(t testing.TB) string { return testenv.Postgres(t) }, "postgres"},
		{"mysql", func(t testing.TB) string { return "mysql://" + testenv.MySQL(t) }, "mariadbd"},
		{"sqlite", func(t testing.TB) string { return "sqlite://" + filepath.Join(t.TempDir(), "flow.db") }, ""},
	} {
		b.Run(db.name+"/batch=100", func(b *testing.B) { benchCycle(b, factory(db.dsn), db.server, 2, 8, 100, keyed) })
	}
}

// benchCycle runs the cycle; key, when not nil, sets the keys of the
// i-th task created.
func benchCycle(b *testing.B, f storetest.Factory, server string, producers, workers, batch int, key func(i int, nt *flow.NewTask)) {
	ctx := context.Background()
	s := f.Open(b, storetest.Prefix(), store.Options{})
	tt := flow.TaskType{TaskType: "bench", ScheduleLimit: batch, MaxProcessingMS: 600000, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
	if err := s.RegisterType(ctx, tt, time.Now()); err != nil {
		b.Fatal(err)
	}
	var finished, empty atomic.Int64
	var wg sync.WaitGroup
	// Each created batch wakes one idle worker (as OnDue wakes a long
	// poll) instead of workers polling the database.
	wake := make(chan struct{}, 1024)
	b.ResetTimer()
	dbCPU, dbOK := cputime.Of(server) // before selfCPU: reading /proc costs
	start, goCPU := time.Now(), cputime.Self()
	var next atomic.Int64 // tasks handed to producers
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(int64(batch))) - batch
				n := min(batch, b.N-from)
				if n <= 0 {
					return
				}
				now := time.Now().UTC()
				recs := make([]flow.Record, n)
				for i, id := range flow.NewTaskIDs(now, n) {
					nt := flow.NewTask{TaskType: "bench", TaskStage: "run"}
					if key != nil {
						key(from+i, &nt)
					}
					recs[i] = flow.NewRecord(id, nt, tt, now)
				}
				if err := s.CreateTasks(ctx, recs); err != nil {
					b.Error(err)
					return
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for finished.Load() < int64(b.N) && !b.Failed() {
				t := time.Now().UTC()
				got, err := s.Hold(ctx, store.HoldParams{TaskType: "bench", WorkerID: "w", Limit: batch, Lease: flow.NewLease(), Now: t, LeaseExpiry: t.Add(time.Hour)})
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					empty.Add(1)
					select { // the producer is behind, or others hold the rest
					case <-wake:
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				reqs := make([]flow.SetTaskRequest, len(got))
				for i, r := range got {
					reqs[i] = flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess}
				}
				errs, err := s.SetTasks(ctx, reqs, time.Now().UTC())
				if err != nil {
					b.Error(err)
					return
				}
				for i, e := range errs {
					if e != nil {
						b.Errorf("set %s: %v", reqs[i].TaskID, e)
						return
					}
				}
				finished.Add(int64(len(got)))
			}
		}()
	}
	wg.Wait()
	elapsed, goUsed := time.Since(start), cputime.Self()-goCPU
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(empty.Load())*100/float64(b.N), "empty-holds/100tasks")
	b.ReportMetric(float64(goUsed.Microseconds())/float64(b.N), "go-cpu-us/task")
	if d, ok := cputime.Of(server); ok && dbOK {
		b.ReportMetric(float64((d-dbCPU).Microseconds())/float64(b.N), "db-cpu-us/task")
	}
	if finished.Load() != int64(b.N) {
		b.Fatalf("finished %d of %d", finished.Load(), b.N)
	}
}
