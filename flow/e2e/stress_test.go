package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
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

// stressCase sizes one stress run.
type stressCase struct {
	servers int // flow servers on the one database
	workers int // SDK workers, each talking to every server
	conc    int // handlers per worker
	tasks   int
}

var stages = []string{"s1", "s2", "s3"}

// stressCtx is the task context: the stages append themselves to Path.
type stressCtx struct {
	N    int      `json:"n"`
	Path []string `json:"path"`
}

// runKey identifies one attempt of one stage of one task.
type runKey struct {
	task, stage string
	attempt     int
}

// failsFirst says whether a stage's first attempt returns an error (about
// one in eight), so the retry path runs too.
func failsFirst(task, stage string) bool {
	h := fnv.New32a()
	h.Write([]byte(task + "/" + stage))
	return h.Sum32()%8 == 0
}

// runStress starts cs.servers flow servers on dsn and cs.workers workers,
// creates cs.tasks three-stage tasks while the workers run, stops half the
// workers midway (their held tasks go back), then shuts one server down
// while the rest of the work runs, and checks that every task
// ended in success having run each stage exactly once per attempt, with no
// task ever run by two handlers at once.
func runStress(t *testing.T, dsn string, cs stressCase) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var urls []string
	var servers []*server.Server
	for range cs.servers {
		s := startServer(t, ctx, dsn)
		servers = append(servers, s)
		urls = append(urls, "http://"+s.Addr())
	}
	c, err := client.New(urls, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	taskType := fmt.Sprintf("stress_%d", time.Now().UnixNano())
	if err := c.RegisterTask(ctx, flow.TaskType{
		TaskType: taskType, ScheduleLimit: 64, ScheduleIntervalMS: 200, MaxProcessingMS: 20_000,
		MaxRetryNum: 3, RetryIntervalMS: 1, MaxRetryIntervalMS: 10,
	}); err != nil {
		t.Fatal(err)
	}

	var (
		mu         sync.Mutex
		runs       = map[runKey]int{}
		running    = map[string]int{} // task -> handlers running it now
		doubleHeld []string
		maxAtOnce  atomic.Int64
		nowRunning atomic.Int64
	)
	handler := func(i int) worker.Handler {
		return func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
			k := runKey{tk.ID, tk.Stage, tk.Attempt}
			mu.Lock()
			runs[k]++
			running[tk.ID]++
			if running[tk.ID] > 1 {
				doubleHeld = append(doubleHeld, tk.ID)
			}
			mu.Unlock()
			n := nowRunning.Add(1)
			for m := maxAtOnce.Load(); n > m && !maxAtOnce.CompareAndSwap(m, n); m = maxAtOnce.Load() {
			}
			defer func() {
				nowRunning.Add(-1)
				mu.Lock()
				running[tk.ID]--
				mu.Unlock()
			}()
			var sc stressCtx
			if err := tk.Decode(&sc); err != nil {
				return worker.Fail(err.Error()), nil
			}
			if tk.Attempt == 0 && failsFirst(tk.ID, tk.Stage) {
				return worker.Result{}, errors.New("injected first-attempt failure")
			}
			sc.Path = append(sc.Path, tk.Stage)
			if i == len(stages)-1 {
				return worker.Done(sc), nil
			}
			return worker.Next(stages[i+1], sc), nil
		}
	}

	type running_ struct {
		w    *worker.Worker
		done chan error
	}
	var workers []running_
	for i := range cs.workers {
		w, err := worker.New(worker.Config{
			Client: c, WorkerID: fmt.Sprintf("w%d", i), Concurrency: cs.conc, HoldLimit: 16, MaxBacklog: 32,
		})
		if err != nil {
			t.Fatal(err)
		}
		for si, st := range stages {
			w.Handle(taskType, st, handler(si))
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		workers = append(workers, running_{w, done})
	}

	// Create the tasks in batches, from several goroutines, while the
	// workers run.
	var ids sync.Map
	var created atomic.Int64
	var cg sync.WaitGroup
	const batch = 100
	errs := make(chan error, cs.tasks/batch+1)
	for start := 0; start < cs.tasks; start += batch {
		cg.Add(1)
		go func() {
			defer cg.Done()
			var nts []flow.NewTask
			for n := start; n < min(start+batch, cs.tasks); n++ {
				b, _ := json.Marshal(stressCtx{N: n})
				nts = append(nts, flow.NewTask{TaskType: taskType, TaskStage: stages[0], TaskContext: b, Priority: n % 3})
			}
			got, err := c.CreateTasks(ctx, nts)
			if err != nil {
				errs <- err
				return
			}
			for _, id := range got {
				ids.Store(id, true)
			}
			created.Add(int64(len(got)))
		}()
		if start < cs.tasks/2 && start+batch >= cs.tasks/2 {
			// Halfway through creating, stop half the workers: they
			// finish what runs and give back what they hold.
			for _, r := range workers[:cs.workers/2] {
				r.w.Stop()
			}
		}
	}
	cg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	for _, r := range workers[:cs.workers/2] {
		if err := <-r.done; err != nil {
			t.Fatalf("stopped worker: %v", err)
		}
	}
	// Take one server away while the rest of the work runs: the clients
	// skip it and go on with the others.
	if cs.servers > 1 {
		if err := servers[0].Close(); err != nil {
			t.Fatalf("close server 0: %v", err)
		}
		urls = urls[1:]
	}

	// Wait for every task to end.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var counts map[string]int64
		for _, ty := range st.Types {
			if ty.TaskType == taskType {
				counts = ty.Counts
			}
		}
		if counts["success"]+counts["failed"]+counts["cancelled"] == int64(cs.tasks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks did not all end in time: %v", counts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, r := range workers[cs.workers/2:] {
		r.w.Stop()
		if err := <-r.done; err != nil {
			t.Fatalf("worker: %v", err)
		}
	}

	// Every task: success, the three stages in order in its context.
	seen := 0
	for cursor := ""; ; {
		page, err := c.ListTasks(ctx, client.ListFilter{TaskType: taskType, Limit: 500, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page.Tasks {
			seen++
			if _, ok := ids.Load(tk.TaskID); !ok {
				t.Errorf("task %s listed but never created", tk.TaskID)
			}
			var sc stressCtx
			if err := json.Unmarshal(tk.TaskContext, &sc); err != nil {
				t.Fatalf("task %s context %s: %v", tk.TaskID, tk.TaskContext, err)
			}
			if tk.Status != flow.StatusSuccess || !slices.Equal(sc.Path, stages) {
				t.Errorf("task %s: status %d, path %v; want success with %v", tk.TaskID, tk.Status, sc.Path, stages)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if seen != cs.tasks {
		t.Errorf("listed %d tasks, created %d", seen, cs.tasks)
	}

	// Exactly once per attempt: each (task, stage) ran attempt 0, and
	// attempt 1 only after an injected failure; no attempt ran twice.
	mu.Lock()
	defer mu.Unlock()
	if len(doubleHeld) > 0 {
		t.Errorf("%d times a task ran in two handlers at once, e.g. %s", len(doubleHeld), doubleHeld[0])
	}
	extra := 0
	ids.Range(func(k, _ any) bool {
		id := k.(string)
		for _, st := range stages {
			want := map[int]int{0: 1}
			if failsFirst(id, st) {
				want[1] = 1
			}
			for a := 0; a <= 3; a++ {
				if got := runs[runKey{id, st, a}]; got != want[a] {
					if extra++; extra <= 10 {
						t.Errorf("task %s stage %s attempt %d ran %d times, want %d", id, st, a, got, want[a])
					}
				}
			}
		}
		return true
	})
	// How well holds and sets were batched (shown with -v).
	{
		for _, u := range urls {
			resp, err := http.Get(u + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "fulcrum_flow_http_requests_total") || strings.HasPrefix(l, "fulcrum_flow_tasks_held_total") {
						t.Log(u, l)
					}
				}
			}
		}
	}
	total := 0
	for _, n := range runs {
		total += n
	}
	t.Logf("%d tasks, %d stage runs on %d servers by %d workers (at most %d handlers at once)",
		cs.tasks, total, cs.servers, cs.workers, maxAtOnce.Load())
}

// startServer starts one flow server on dsn, closed when the test ends.
func startServer(t *testing.T, ctx context.Context, dsn string) *server.Server {
	t.Helper()
	// Several servers on SQLite or MySQL cannot signal each other that a
	// task became due; a short poll interval stands in for that.
	s, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: dsn, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("start flow server: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sqliteStressTasks is the tasks of the SQLite stress run: 3000 (about
// 10,000 stage runs), or 1000 under the race detector, which slows the
// pure-Go SQLite driver about tenfold, so the run stays near a minute on 2
// cores. PostgreSQL and MariaDB always run 3000.
func sqliteStressTasks() int {
	if raceEnabled {
		return 1000
	}
	return 3000
}

func TestStressSQLite(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "flow.db")
	runStress(t, dsn, stressCase{servers: 3, workers: 6, conc: 4, tasks: sqliteStressTasks()})
}

func TestStressPostgres(t *testing.T) {
	dsn := testenv.Postgres(t)
	runStress(t, freshPostgres(t, dsn), stressCase{servers: 3, workers: 6, conc: 4, tasks: 3000})
}

func TestStressMariaDB(t *testing.T) {
	dsn := testenv.MySQL(t)
	runStress(t, freshMySQL(t, dsn), stressCase{servers: 3, workers: 6, conc: 4, tasks: 3000})
}
