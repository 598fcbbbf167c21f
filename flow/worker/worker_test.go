package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/server"
	"github.com/fulcrum-lb/fulcrum/flow/worker"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// env is one real flow server on a fresh SQLite file, and a client for it.
type env struct {
	c   *client.Client
	url string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(t.TempDir(), "flow.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	url := "http://" + s.Addr()
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &env{c: c, url: url}
}

// taskType returns a TaskType config with quick retries.
func taskType(name string) flow.TaskType {
	return flow.TaskType{TaskType: name, ScheduleLimit: 32, ScheduleIntervalMS: 100, MaxProcessingMS: 10_000,
		MaxRetryNum: 3, RetryIntervalMS: 1, MaxRetryIntervalMS: 5}
}

func (e *env) create(t *testing.T, typ, stage string, n int) []string {
	t.Helper()
	nts := make([]flow.NewTask, n)
	for i := range nts {
		nts[i] = flow.NewTask{TaskType: typ, TaskStage: stage, TaskContext: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	ids, err := e.c.CreateTasks(context.Background(), nts)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *env) counts(t *testing.T, typ string) map[string]int64 {
	t.Helper()
	st, err := e.c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range st.Types {
		if ty.TaskType == typ {
			return ty.Counts
		}
	}
	return map[string]int64{}
}

func (e *env) get(t *testing.T, id string) *flow.Task {
	t.Helper()
	tk, err := e.c.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// start runs w in the background; the returned func stops it and returns
// Run's error.
func start(t *testing.T, w *worker.Worker) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() { w.Stop(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func newWorker(t *testing.T, e *env, cfg worker.Config) *worker.Worker {
	t.Helper()
	cfg.Client = e.c
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

type path struct {
	N    int      `json:"n"`
	Path []string `json:"path"`
}

func TestStagesRunInOrderToSuccess(t *testing.T) {
	e := newEnv(t)
	w := newWorker(t, e, worker.Config{Concurrency: 4})
	w.Register(taskType("three"))
	stages := []string{"fetch", "transform", "store"}
	for i, st := range stages {
		w.Handle("three", st, func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
			var p path
			if err := tk.Decode(&p); err != nil {
				return worker.Result{}, err
			}
			p.Path = append(p.Path, tk.Stage)
			if i == len(stages)-1 {
				return worker.Done(p), nil
			}
			return worker.Next(stages[i+1], p), nil
		})
	}
	stop := start(t, w)
	if err := e.c.RegisterTask(context.Background(), taskType("three")); err != nil {
		t.Fatal(err)
	}
	ids := e.create(t, "three", "fetch", 50)
	testenv.Eventually(t, "50 successes", func() bool { return e.counts(t, "three")["success"] == 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		tk := e.get(t, id)
		var p path
		if err := json.Unmarshal(tk.TaskContext, &p); err != nil {
			t.Fatal(err)
		}
		if tk.Status != flow.StatusSuccess || !slices.Equal(p.Path, stages) || tk.CrtRetryNum != 0 {
			t.Errorf("task %s: status %d path %v retries %d; want success after %v with no retry", id, tk.Status, p.Path, tk.CrtRetryNum, stages)
		}
	}
}

func TestHandlerOutcomes(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		handler   worker.Handler
		maxRetry  int
		want      flow.Status
		wantRuns  int
		wantRetry int
		wantCtx   string
	}{
		{"done keeps context when nil", func(context.Context, *worker.Task) (worker.Result, error) { return worker.Done(nil), nil },
			3, flow.StatusSuccess, 1, 0, `{"n":0}`},
		{"done keeps a context the handler assigned", func(_ context.Context, tk *worker.Task) (worker.Result, error) {
			tk.Context = json.RawMessage(`{"m":2}`)
			return worker.Done(nil), nil
		},
			3, flow.StatusSuccess, 1, 0, `{"m":2}`},
		{"done with new context", func(context.Context, *worker.Task) (worker.Result, error) {
			return worker.Done(map[string]int{"x": 1}), nil
		},
			3, flow.StatusSuccess, 1, 0, `{"x":1}`},
		{"fail ends at once", func(context.Context, *worker.Task) (worker.Result, error) { return worker.Fail("bad input"), nil },
			3, flow.StatusFailed, 1, 0, `{"n":0}`},
		{"error retries then fails", func(context.Context, *worker.Task) (worker.Result, error) { return worker.Result{}, errBoom },
			2, flow.StatusFailed, 3, 2, `{"n":0}`},
		{"panic is an error", func(context.Context, *worker.Task) (worker.Result, error) { panic("oops") },
			1, flow.StatusFailed, 2, 1, `{"n":0}`},
		{"error twice then done", func(_ context.Context, tk *worker.Task) (worker.Result, error) {
			if tk.Attempt < 2 {
				return worker.Result{}, errBoom
			}
			return worker.Done(nil), nil
		}, 3, flow.StatusSuccess, 3, 2, `{"n":0}`},
		{"context over 4096 bytes becomes an error", func(context.Context, *worker.Task) (worker.Result, error) {
			return worker.Done(map[string]string{"big": string(make([]byte, 5000))}), nil
		}, 1, flow.StatusFailed, 2, 1, `{"n":0}`},
		{"next with no stage is an error", func(context.Context, *worker.Task) (worker.Result, error) { return worker.Next("", nil), nil },
			0, flow.StatusFailed, 1, 0, `{"n":0}`},
	}
	e := newEnv(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ := fmt.Sprintf("outcome%d", i)
			tt := taskType(typ)
			tt.MaxRetryNum = tc.maxRetry
			var runs atomic.Int64
			w := newWorker(t, e, worker.Config{Concurrency: 1})
			w.Register(tt)
			w.Handle(typ, "only", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
				runs.Add(1)
				return tc.handler(ctx, tk)
			})
			stop := start(t, w)
			if err := e.c.RegisterTask(context.Background(), tt); err != nil {
				t.Fatal(err)
			}
			id := e.create(t, typ, "only", 1)[0]
			testenv.Eventually(t, "the task to end", func() bool { s := e.get(t, id).Status; return s == flow.StatusSuccess || s == flow.StatusFailed })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			tk := e.get(t, id)
			if tk.Status != tc.want || int(runs.Load()) != tc.wantRuns || tk.CrtRetryNum != tc.wantRetry {
				t.Fatalf("status %d after %d runs with %d retries; want %d after %d runs with %d retries (log %+v)",
					tk.Status, runs.Load(), tk.CrtRetryNum, tc.want, tc.wantRuns, tc.wantRetry, tk.ScheduleLog)
			}
			if string(tk.TaskContext) != tc.wantCtx {
				t.Fatalf("context %s, want %s", tk.TaskContext, tc.wantCtx)
			}
		})
	}
}

// A stage that runs for several lease lengths keeps its task: the worker
// renews the lease, so the server never redelivers it.
// outlastLease is a stage that counts its runs and runs until the server
// has seen three renewals' worth of time past the task's first lease
// expiry: without renewals the task would be gone by then.
func outlastLease(e *env, lease time.Duration, runs *atomic.Int64) worker.Handler {
	return func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		runs.Add(1)
		first := *tk.Raw.LeaseExpiry
		for {
			cur, err := e.c.GetTask(ctx, tk.ID)
			if err != nil {
				return worker.Result{}, err
			}
			if cur.LeaseExpiry != nil && cur.LeaseExpiry.Sub(first) > 3*lease {
				return worker.Done(nil), nil
			}
			if ctx.Err() != nil {
				return worker.Result{}, context.Cause(ctx)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestLongStageKeepsLease(t *testing.T) {
	e := newEnv(t)
	tt := taskType("long")
	// The worker renews at a third of the lease, so a renewal may come up
	// to two thirds of it late (1 s here) before the task could be
	// rescued: a loaded machine delayed 600 ms leases' renewals past that.
	const lease = 1500 * time.Millisecond
	tt.MaxProcessingMS = lease.Milliseconds()
	var runs atomic.Int64
	w := newWorker(t, e, worker.Config{Concurrency: 2})
	w.Register(tt)
	w.Handle("long", "only", outlastLease(e, lease, &runs))
	stop := start(t, w)
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, "long", "only", 1)[0]
	testenv.Eventually(t, "the task to end", func() bool { return e.get(t, id).Status >= flow.StatusSuccess })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	tk := e.get(t, id)
	if tk.Status != flow.StatusSuccess || runs.Load() != 1 || tk.CrtRetryNum != 0 {
		t.Fatalf("status %d, %d runs, %d retries; want success in 1 run (log %+v)", tk.Status, runs.Load(), tk.CrtRetryNum, tk.ScheduleLog)
	}
}

// A task held after one with a far longer lease is renewed on its own
// schedule: the heartbeat, waiting for the long lease's renewal, is woken
// by a task due before it.
func TestShortLeaseHeldAfterLongOneIsRenewed(t *testing.T) {
	e := newEnv(t)
	long, short := taskType("longlease"), taskType("shortlease")
	long.MaxProcessingMS = 60_000 // renewed first after 20 s
	const lease = 1500 * time.Millisecond
	short.MaxProcessingMS = lease.Milliseconds()
	release := make(chan struct{})
	longStarted := make(chan struct{})
	var runs atomic.Int64
	w := newWorker(t, e, worker.Config{Concurrency: 2})
	w.Register(long)
	w.Register(short)
	w.Handle("longlease", "only", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		close(longStarted)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return worker.Done(nil), nil
	})
	w.Handle("shortlease", "only", outlastLease(e, lease, &runs))
	stop := start(t, w)
	for _, tt := range []flow.TaskType{long, short} {
		if err := e.c.RegisterTask(context.Background(), tt); err != nil {
			t.Fatal(err)
		}
	}
	e.create(t, "longlease", "only", 1)
	<-longStarted
	id := e.create(t, "shortlease", "only", 1)[0]
	testenv.Eventually(t, "the short-lease task to end", func() bool { return e.get(t, id).Status >= flow.StatusSuccess })
	close(release)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	tk := e.get(t, id)
	if tk.Status != flow.StatusSuccess || runs.Load() != 1 || tk.CrtRetryNum != 0 {
		t.Fatalf("status %d, %d runs, %d retries; want success in 1 run (log %+v)", tk.Status, runs.Load(), tk.CrtRetryNum, tk.ScheduleLog)
	}
}

// A task cancelled while its stage runs: the next renewal finds the lease
// stale, the handler's context ends with ErrLeaseLost, and the outcome is
// dropped (the task stays cancelled).
func TestLeaseLostCancelsHandler(t *testing.T) {
	e := newEnv(t)
	tt := taskType("lost")
	tt.MaxProcessingMS = 300
	started := make(chan string, 1)
	cause := make(chan error, 1)
	w := newWorker(t, e, worker.Config{Concurrency: 1})
	w.Register(tt)
	w.Handle("lost", "only", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		started <- tk.ID
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return worker.Done(map[string]bool{"should_not_land": true}), nil
	})
	stop := start(t, w)
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, "lost", "only", 1)[0]
	if got := <-started; got != id {
		t.Fatalf("started %s, want %s", got, id)
	}
	if err := e.c.CancelTask(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, worker.ErrLeaseLost) {
			t.Fatalf("handler context ended with %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("handler context never ended")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if tk := e.get(t, id); tk.Status != flow.StatusCancelled || string(tk.TaskContext) != `{"n":0}` {
		t.Fatalf("status %d context %s; want cancelled with the context untouched", tk.Status, tk.TaskContext)
	}
}

// On Stop the worker finishes the stage it runs and gives back the tasks it
// held but had not started: pending, same stage, no owner, no retry counted.
func TestStopGivesBackUnstarted(t *testing.T) {
	e := newEnv(t)
	tt := taskType("giveback")
	release := make(chan struct{})
	var ran sync.Map
	w := newWorker(t, e, worker.Config{Concurrency: 1, MaxBacklog: 6, HoldLimit: 6})
	w.Register(tt)
	w.Handle("giveback", "s1", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		ran.Store(tk.ID, true)
		<-release
		return worker.Next("s2", nil), nil
	})
	stop := start(t, w)
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	ids := e.create(t, "giveback", "s1", 6)
	testenv.Eventually(t, "the worker to hold all 6 and run one", func() bool {
		n := 0
		ran.Range(func(any, any) bool { n++; return true })
		return n == 1 && e.counts(t, "giveback")["processing"] == 6
	})
	w.Stop() // from here on nothing new starts
	close(release)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var moved, back int
	for _, id := range ids {
		tk := e.get(t, id)
		_, started := ran.Load(id)
		switch {
		case started && tk.Status == flow.StatusPending && tk.TaskStage == "s2":
			moved++
		case !started && tk.Status == flow.StatusPending && tk.TaskStage == "s1" && tk.CrtRetryNum == 0 && tk.Owner == "":
			back++
		default:
			t.Errorf("task %s (started %v): status %d stage %s retries %d owner %q", id, started, tk.Status, tk.TaskStage, tk.CrtRetryNum, tk.Owner)
		}
	}
	if moved != 1 || back != 5 {
		t.Fatalf("%d finished their stage and %d were given back; want 1 and 5", moved, back)
	}
}

// The worker never holds more than MaxBacklog tasks, and pulls again as
// soon as there is room.
func TestBacklogBound(t *testing.T) {
	e := newEnv(t)
	tt := taskType("backlog")
	const maxBacklog = 4
	tokens := make(chan struct{})
	w := newWorker(t, e, worker.Config{Concurrency: 2, MaxBacklog: maxBacklog})
	w.Register(tt)
	w.Handle("backlog", "only", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		<-tokens
		return worker.Done(nil), nil
	})
	stop := start(t, w)
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	const n = 20
	e.create(t, "backlog", "only", n)
	for done := 0; done < n; done++ {
		// Each step: the worker holds as many as it may (the backlog, or
		// what is left), never more; one token lets one finish.
		want := int64(min(maxBacklog, n-done))
		testenv.Eventually(t, fmt.Sprintf("%d held after %d done", want, done), func() bool {
			c := e.counts(t, "backlog")
			if c["processing"] > maxBacklog {
				t.Fatalf("worker holds %d tasks, over MaxBacklog %d", c["processing"], maxBacklog)
			}
			return c["processing"] == want && c["success"] == int64(done)
		})
		tokens <- struct{}{}
	}
	testenv.Eventually(t, "all done", func() bool { return e.counts(t, "backlog")["success"] == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  worker.Config
		want string
	}{
		{"no server", worker.Config{}, "Servers"},
		{"negative concurrency", worker.Config{Servers: []string{"x:1"}, Concurrency: -1}, "Concurrency"},
		{"negative backlog", worker.Config{Servers: []string{"x:1"}, MaxBacklog: -1}, "MaxBacklog"},
		{"negative hold limit", worker.Config{Servers: []string{"x:1"}, HoldLimit: -1}, "HoldLimit"},
		{"bad server URL", worker.Config{Servers: []string{"ftp://x"}}, "scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := worker.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %q", err, tc.want)
			}
		})
	}
	w, err := worker.New(worker.Config{Servers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no handlers") {
		t.Fatalf("Run without handlers: %v", err)
	}
}

// A stage still running when ShutdownTimeout runs out has its context
// cancelled; if it then fails, the task goes back without a retry counted.
func TestShutdownTimeoutCancelsAndGivesBack(t *testing.T) {
	e := newEnv(t)
	tt := taskType("slowstop")
	started := make(chan struct{})
	var cause atomic.Value
	w := newWorker(t, e, worker.Config{Concurrency: 1, ShutdownTimeout: 100 * time.Millisecond})
	w.Register(tt)
	w.Handle("slowstop", "only", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return worker.Result{}, ctx.Err()
	})
	stop := start(t, w)
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, "slowstop", "only", 1)[0]
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, context.Canceled) {
		t.Fatalf("handler context ended with %v, want context.Canceled", c)
	}
	tk := e.get(t, id)
	if tk.Status != flow.StatusPending || tk.CrtRetryNum != 0 || tk.Owner != "" {
		t.Fatalf("status %d retries %d owner %q; want pending, no retry, no owner (log %+v)", tk.Status, tk.CrtRetryNum, tk.Owner, tk.ScheduleLog)
	}
}

// A worker handling a type it did not Register learns the type from the
// server; a type the server does not know is refused at Run, by name.
func TestUnregisteredTypeComesFromServerOrIsRefused(t *testing.T) {
	e := newEnv(t)
	if err := e.c.RegisterTask(context.Background(), taskType("known")); err != nil {
		t.Fatal(err)
	}
	ids := e.create(t, "known", "only", 3)
	w := newWorker(t, e, worker.Config{})
	ran := make(chan string, len(ids))
	w.Handle("known", "only", func(_ context.Context, task *worker.Task) (worker.Result, error) {
		ran <- task.ID
		return worker.Done(nil), nil
	})
	stop := start(t, w)
	for range ids {
		<-ran
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	w2 := newWorker(t, e, worker.Config{})
	w2.Handle("nobody-registered-this", "only", func(context.Context, *worker.Task) (worker.Result, error) {
		return worker.Done(nil), nil
	})
	err := w2.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"nobody-registered-this": not registered on the server`) {
		t.Fatalf("Run with an unknown type = %v", err)
	}
}

// Handlers get a task's schedule log only when the worker asks for logs;
// by default holds leave them out, and the log stored on the server still
// records every hold.
func TestScheduleLogOnlyWhenAsked(t *testing.T) {
	for _, withLog := range []bool{false, true} {
		t.Run(fmt.Sprintf("ScheduleLog=%v", withLog), func(t *testing.T) {
			e := newEnv(t)
			typ := fmt.Sprintf("logs-%v", withLog)
			w := newWorker(t, e, worker.Config{Concurrency: 2, ScheduleLog: withLog})
			w.Register(taskType(typ))
			var mu sync.Mutex
			seen := map[string][]flow.LogEntry{}
			w.Handle(typ, "a", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
				mu.Lock()
				seen[tk.ID] = tk.Raw.ScheduleLog
				mu.Unlock()
				return worker.Done(nil), nil
			})
			stop := start(t, w)
			if err := e.c.RegisterTask(context.Background(), taskType(typ)); err != nil {
				t.Fatal(err)
			}
			ids := e.create(t, typ, "a", 5)
			testenv.Eventually(t, "5 successes", func() bool { return e.counts(t, typ)["success"] == 5 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				got := seen[id]
				if withLog && (len(got) != 2 || got[0].Event != flow.EventCreated || got[1].Event != flow.EventHeld) {
					t.Errorf("task %s: handler saw log %+v, want created, held", id, got)
				}
				if !withLog && got != nil {
					t.Errorf("task %s: handler saw log %+v without asking", id, got)
				}
				stored := e.get(t, id).ScheduleLog
				if len(stored) != 3 || stored[1].Event != flow.EventHeld || stored[2].Event != flow.EventSuccess {
					t.Errorf("task %s: stored log %+v, want created, held, success", id, stored)
				}
			}
		})
	}
}

// OnReported hears of every outcome once, after the server recorded it: a
// task whose success was reported reads as success at once.
func TestOnReportedAfterTheServerRecords(t *testing.T) {
	e := newEnv(t)
	const n = 20
	reports := make(chan worker.Report, 3*n)
	w := newWorker(t, e, worker.Config{Concurrency: 4, OnReported: func(r worker.Report) { reports <- r }})
	w.Register(taskType("told"))
	w.Handle("told", "first", func(_ context.Context, tk *worker.Task) (worker.Result, error) {
		return worker.Next("second", nil), nil
	})
	w.Handle("told", "second", func(_ context.Context, tk *worker.Task) (worker.Result, error) {
		var p path
		if err := tk.Decode(&p); err != nil {
			return worker.Result{}, err
		}
		if p.N%2 == 1 {
			return worker.Fail("odd"), nil
		}
		return worker.Done(nil), nil
	})
	start(t, w)
	if err := e.c.RegisterTask(context.Background(), taskType("told")); err != nil {
		t.Fatal(err)
	}
	ids := e.create(t, "told", "first", n)
	seen := map[string][]string{}
	for range 2 * n {
		var r worker.Report
		select {
		case r = <-reports:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d reports after 30s, want %d", len(seen), 2*n)
		}
		if r.Err != nil || r.TaskType != "told" {
			t.Fatalf("report %+v: want type told and no error", r)
		}
		seen[r.TaskID] = append(seen[r.TaskID], fmt.Sprintf("%s:%d:%s", r.Stage, r.Status, r.NextStage))
		if r.Stage == "second" {
			if got := e.get(t, r.TaskID).Status; got != r.Status {
				t.Fatalf("task %s reported as %d but the server has %d", r.TaskID, r.Status, got)
			}
		}
	}
	for i, id := range ids {
		want := []string{"first:1:second", "second:3:"}
		if i%2 == 1 {
			want[1] = "second:4:"
		}
		if !slices.Equal(seen[id], want) {
			t.Errorf("task %s (n=%d): reports %v, want %v", id, i, seen[id], want)
		}
	}
	select {
	case r := <-reports:
		t.Fatalf("a report more than once: %+v", r)
	default:
	}
}

// A handler fans out; the children run on the same worker; the parent's
// join stage reads them through the client and ends the task.
func TestFanOutAndJoin(t *testing.T) {
	e := newEnv(t)
	w := newWorker(t, e, worker.Config{Concurrency: 4})
	w.Register(taskType("parent"))
	w.Register(taskType("part"))
	w.Handle("parent", "split", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		kids := make([]flow.NewTask, 20)
		for i := range kids {
			kids[i] = flow.NewTask{TaskType: "part", TaskStage: "work", TaskContext: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		}
		return worker.FanOut("merge", kids, nil), nil
	})
	w.Handle("part", "work", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		var p path
		if err := tk.Decode(&p); err != nil {
			return worker.Result{}, err
		}
		return worker.Done(path{N: p.N * 2}), nil
	})
	w.Handle("parent", "merge", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		ch, err := e.c.GetTaskChildren(ctx, tk.ID, "", 0)
		if err != nil {
			return worker.Result{}, err
		}
		sum := 0
		for _, k := range ch.Children {
			var p path
			if k.Status != flow.StatusSuccess || json.Unmarshal(k.TaskContext, &p) != nil {
				return worker.Fail(fmt.Sprintf("child %s is %d", k.TaskID, k.Status)), nil
			}
			sum += p.N
		}
		return worker.Done(path{N: sum}), nil
	})
	start(t, w)
	for _, tt := range []string{"parent", "part"} {
		if err := e.c.RegisterTask(context.Background(), taskType(tt)); err != nil {
			t.Fatal(err)
		}
	}
	id := e.create(t, "parent", "split", 1)[0]
	testenv.Eventually(t, "the parent joined and ended", func() bool { return e.get(t, id).Status.Ended() })
	tk := e.get(t, id)
	var p path
	json.Unmarshal(tk.TaskContext, &p)
	if tk.Status != flow.StatusSuccess || p.N != 2*(19*20/2) || tk.Children["success"] != 20 {
		t.Fatalf("parent %s, context %s, children %v", tk.Status, tk.TaskContext, tk.Children)
	}
}
