package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/worker"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// A handler that gets an upstream's 429 returns PauseKey: the task runs
// the same stage again after the pause, its retries untouched, and its
// schedule log says it paused. Tasks of one sequence_key run one at a
// time in creation order even with four handlers at once.
func TestPauseKeyAndSequenceKey(t *testing.T) {
	e := newEnv(t)
	w := newWorker(t, e, worker.Config{Concurrency: 4})
	tt := taskType("calls")
	tt.MaxRetryNum = 0 // a spent retry would fail the task
	w.Register(tt)
	var mu sync.Mutex
	var order []string
	var running atomic.Int32
	var paused atomic.Bool
	w.Handle("calls", "call", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		if n := running.Add(1); n > 1 {
			t.Errorf("%d tasks of sequence key %s run at once", n, tk.Raw.SequenceKey)
		}
		defer running.Add(-1)
		if tk.Raw.RateKey == "api" && paused.CompareAndSwap(false, true) {
			return worker.PauseKey(1, "429 Too Many Requests"), nil
		}
		mu.Lock()
		order = append(order, tk.ID)
		mu.Unlock()
		return worker.Done(nil), nil
	})
	start(t, w)
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	var nts []flow.NewTask
	for i := 0; i < 6; i++ {
		nts = append(nts, flow.NewTask{TaskType: "calls", TaskStage: "call", SequenceKey: "order-7", RateKey: "api"})
	}
	ids, err := e.c.CreateTasks(context.Background(), nts)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "6 successes", func() bool { return e.counts(t, "calls")["success"] == 6 })
	mu.Lock()
	defer mu.Unlock()
	for i, id := range ids {
		if i >= len(order) || order[i] != id {
			t.Fatalf("ran %v, want creation order %v", order, ids)
		}
	}
	first := e.get(t, ids[0])
	pausedLogged := false
	for _, l := range first.ScheduleLog {
		pausedLogged = pausedLogged || (l.Event == flow.EventPaused && l.Error == "429 Too Many Requests")
	}
	if first.CrtRetryNum != 0 || !pausedLogged {
		t.Fatalf("paused task: retries %d, log %+v; want no retry spent and a paused entry", first.CrtRetryNum, first.ScheduleLog)
	}
}
