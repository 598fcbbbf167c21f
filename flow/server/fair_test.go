package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// fairGoal is one run of issue 37's fair-shares scenario: tenant A's
// tasks created, then tenant B's, one type, workers each holding one task
// at a time and setting it success, over two servers sharing the
// database.
type fairGoal struct {
	bShare   float64       // B's part of the holds up to B's last
	gap      int64         // A's finished tasks beyond B's when B's last finished
	rate     float64       // tasks finished a second until then
	finished int64         // tasks finished until then
	elapsed  time.Duration // from the first hold to then
}

// runFairGoal runs the scenario on dsn (tables under a fresh prefix)
// until B's last task finished, or, with stopAt > 0, until stopAt tasks
// finished (a type that is not fair may not reach B for a long while).
func runFairGoal(t *testing.T, dsn string, fair bool, nA, nB, workers int, stopAt int64) fairGoal {
	p := storetest.Prefix()
	if !strings.HasPrefix(dsn, "sqlite://") {
		dropTables(t, dsn, p)
	}
	cfg := Config{DB: dsn, TablePrefix: p, MaxWait: time.Second}
	srvs := []*Server{start(t, cfg), start(t, cfg)}
	tt := flow.TaskType{TaskType: "tenant", ScheduleLimit: 1, MaxProcessingMS: 60000, MaxRetryNum: 1, RetryIntervalMS: 10, MaxRetryIntervalMS: 10, Fair: fair}
	register(t, srvs[0], tt)
	batch := func(key string, n int) {
		for from := 0; from < n; from += flow.MaxBatch {
			nts := make([]flow.NewTask, min(flow.MaxBatch, n-from))
			for i := range nts {
				nts[i] = flow.NewTask{TaskType: "tenant", TaskStage: "run", FairnessKey: key}
			}
			create(t, srvs[0], nts...)
		}
	}
	batch("A", nA)
	batch("B", nB)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seq, heldB, lastBSeq, doneA, doneB, gap atomic.Int64
	var start time.Time
	var end, finished atomic.Int64 // when the run's end was reached (ns since start), tasks finished by then
	var once sync.Once
	stop := func() {
		once.Do(func() {
			end.Store(int64(time.Since(start)))
			a, b := doneA.Load(), doneB.Load()
			gap.Store(a - b)
			finished.Store(a + b)
			cancel()
		})
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start = time.Now()
	for w := range workers {
		srv := srvs[w%len(srvs)]
		c, err := client.New([]string{"http://" + srv.Addr()}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("w%d", w)
			for ctx.Err() == nil {
				h, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "tenant", WorkerID: id, Limit: 1, WaitMS: 500})
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				for _, x := range h {
					n := seq.Add(1)
					if x.FairnessKey == "B" {
						if heldB.Add(1) == int64(nB) {
							lastBSeq.Store(n)
						}
					}
					if err := c.SetTask(ctx, flow.SetTaskRequest{TaskID: x.TaskID, Lease: x.Lease, Status: flow.StatusSuccess}); err != nil {
						if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
							errs <- err
						}
						return
					}
					var fin int64
					if x.FairnessKey == "B" {
						fin = doneB.Add(1)
						if fin == int64(nB) && stopAt == 0 {
							stop()
						}
					} else {
						doneA.Add(1)
					}
					if stopAt > 0 && doneA.Load()+doneB.Load() >= stopAt {
						stop()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	g := fairGoal{gap: gap.Load(), elapsed: time.Duration(end.Load()), finished: finished.Load()}
	if lb := lastBSeq.Load(); lb > 0 {
		g.bShare = float64(nB) / float64(lb)
	}
	g.rate = float64(g.finished) / g.elapsed.Seconds()
	return g
}

// Issue 37's goal for fair shares: tenant A with many pending tasks and
// tenant B with 100 created after them, equal weights, one type, 8
// workers (holding one task at a time, on two servers): B's tasks are at
// least 45 % of the holds while both have due tasks, and B's last task
// finishes before A has finished 200 more than B. The test creates 2,000
// of A's tasks; the goal's 50,000, on each database, with the rate beside
// the same type unfair (what fairness costs when used):
//
//	CI=true FAIR_GOAL_A=50000 go test ./flow/server -run TestFairGoal -v -count=1
func TestFairGoal(t *testing.T) {
	nA := 2000
	if v := os.Getenv("FAIR_GOAL_A"); v != "" {
		var err error
		if nA, err = strconv.Atoi(v); err != nil || nA < 1 {
			t.Fatalf("FAIR_GOAL_A=%q: want a positive count", v)
		}
	}
	const nB, workers = 100, 8
	for _, db := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string {
			return "sqlite://" + filepath.Join(t.TempDir(), "f.db") + "?synchronous=normal"
		}},
		{"postgres", func(t *testing.T) string { return testenv.Postgres(t) }},
		{"mysql", func(t *testing.T) string { return "mysql://" + testenv.MySQL(t) }},
	} {
		t.Run(db.name, func(t *testing.T) {
			g := runFairGoal(t, db.dsn(t), true, nA, nB, workers, 0)
			t.Logf("%s, A %d, B %d, %d workers: B %.1f %% of the holds up to its last; A finished %d more than B by then; %d tasks in %v, %.0f tasks/s",
				db.name, nA, nB, workers, 100*g.bShare, g.gap, g.finished, g.elapsed.Round(time.Millisecond), g.rate)
			if g.bShare < 0.45 {
				t.Errorf("B had %.1f %% of the holds while both had due tasks, want at least 45 %%", 100*g.bShare)
			}
			if g.gap >= 200 {
				t.Errorf("A finished %d more than B by B's last, want under 200", g.gap)
			}
			if os.Getenv("FAIR_GOAL_A") != "" {
				u := runFairGoal(t, db.dsn(t), false, nA, nB, workers, g.finished)
				t.Logf("%s, the type not fair: %d tasks in %v, %.0f tasks/s (fair: %.2fx of it)",
					db.name, u.finished, u.elapsed.Round(time.Millisecond), u.rate, g.rate/u.rate)
			}
		})
	}
}
