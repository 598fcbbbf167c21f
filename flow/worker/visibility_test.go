package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow/worker"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuffer) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Every failed stage is logged with its error; the server's metrics show
// the queue wait and the oldest due task's age.
func TestFailedStagesLoggedAndQueueMetrics(t *testing.T) {
	e := newEnv(t)
	var logs syncBuffer
	w := newWorker(t, e, worker.Config{Concurrency: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	tt := taskType("vis")
	tt.MaxRetryNum = 1
	w.Register(tt)
	w.Handle("vis", "a", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		if tk.Attempt == 0 {
			return worker.Result{}, errors.New("disk full")
		}
		return worker.Fail("bad input"), nil
	})
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	e.create(t, "vis", "a", 1)
	stop := start(t, w)
	testenv.Eventually(t, "the task failed", func() bool { return e.counts(t, "vis")["failed"] == 1 })
	stop()
	out := logs.String()
	for _, want := range []string{`stage failed; the server retries it`, `err="disk full"`, `stage failed; the task ends failed`, `err="bad input"`, "task_type=vis", "stage=a"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`fulcrum_flow_queue_wait_seconds_count{task_type="vis"} 2`, `fulcrum_flow_oldest_pending_age_seconds{task_type="vis"} 0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
