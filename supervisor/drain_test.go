package supervisor

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	workersdk "github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// A worker drained on purpose (its own Drain, as on SIGTERM, and another
// through POST /workers/{id}/drain): its tasks go to the others first and
// end on it only once the new holder runs them, so no task ever runs on
// fewer than k workers, counted from the sessions the workers really run.
func TestDrainMakesBeforeBreak(t *testing.T) {
	c := testConfig(tasks(0, 12))
	c.Redundancy = 2
	c.WorkerTimeout, c.TaskTimeout = 10*time.Second, 10*time.Second // a drain, not a timeout, must move the tasks
	s := startServer(t, c)
	// A session takes a while to start (as connecting to a room does), and
	// counts as running from its first sign of life until it ends.
	var pmu sync.Mutex
	producing := map[string]int{} // task -> sessions producing
	alive := workersdk.SessionFunc(func(ctx context.Context, task protocol.Task, out *workersdk.Output) error {
		select {
		case <-time.After(100 * time.Millisecond): // the simulated connect
		case <-ctx.Done():
			return nil
		}
		pmu.Lock()
		producing[task.TaskID]++
		pmu.Unlock()
		defer func() { pmu.Lock(); producing[task.TaskID]--; pmu.Unlock() }()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			out.Seen()
			select {
			case <-ctx.Done():
				return nil
			case <-tk.C:
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workers := map[string]*workersdk.Worker{}
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for i := range 4 {
		id := fmt.Sprintf("w%d", i)
		w, err := workersdk.New(workersdk.Config{URL: "ws://" + s.Addr() + WorkerPath, Token: testToken, WorkerID: id,
			MaxLoad: 12, Session: alive, ReportInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		workers[id], stops[id] = w, stop
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	running := func() map[string]int {
		pmu.Lock()
		defer pmu.Unlock()
		return maps.Clone(producing)
	}
	testenv.Eventually(t, "every task running on 2 workers", func() bool {
		r := running()
		if len(r) != 12 {
			return false
		}
		for _, n := range r {
			if n != 2 {
				return false
			}
		}
		return true
	})

	// Watch the sessions really running while the workers leave.
	var mu sync.Mutex
	lowest, watching := 2, make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-watching:
				return
			default:
			}
			r := running()
			mu.Lock()
			for i := range 12 {
				lowest = min(lowest, r[fmt.Sprintf("room-%05d", i)])
			}
			mu.Unlock()
			time.Sleep(time.Millisecond) // a sampling period, not a wait for an event
		}
	}()

	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	if err := workers["w0"].Drain(dctx); err != nil {
		t.Fatalf("w0: Drain = %v", err)
	}
	stops["w0"]()
	var out struct {
		Draining bool
		Load     int
	}
	if code := admin(t, s, "POST", "/workers/w1/drain", "", &out); code != 200 || !out.Draining {
		t.Fatalf("POST /workers/w1/drain: %d %+v", code, out)
	}
	testenv.Eventually(t, "w1 drained", func() bool { return len(workers["w1"].Tasks()) == 0 })
	testenv.Eventually(t, "every task producing on 2 workers", func() bool {
		r := running()
		for i := range 12 {
			if r[fmt.Sprintf("room-%05d", i)] != 2 {
				return false
			}
		}
		return true
	})
	if code := admin(t, s, "POST", "/workers/nope/drain", "", nil); code != 404 {
		t.Fatalf("drain of an unknown worker: %d, want 404", code)
	}
	close(watching)
	<-watchDone
	mu.Lock()
	defer mu.Unlock()
	if lowest < 2 {
		t.Fatalf("a task ran on %d workers while two were drained, want never below 2", lowest)
	}
	r := running()
	for i := range 12 {
		if id := fmt.Sprintf("room-%05d", i); r[id] != 2 {
			t.Fatalf("%s runs on %d workers after the drains, want 2", id, r[id])
		}
	}
}
