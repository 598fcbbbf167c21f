package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

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

// Leases are kept by one heartbeat per worker, not one renewal per task:
// eight stages that outlast their 1 s lease all succeed, and the server
// saw heartbeats and no renew_lease.
func TestHeartbeatKeepsEveryLease(t *testing.T) {
	e := newEnv(t)
	tt := taskType("beat")
	tt.MaxProcessingMS = 1000 // heartbeats every ~330 ms; long enough to ride out a busy machine's stalls
	w := newWorker(t, e, worker.Config{Concurrency: 8})
	w.Register(tt)
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(8)
	w.Handle("beat", "a", func(ctx context.Context, tk *worker.Task) (worker.Result, error) {
		running.Done()
		select {
		case <-release:
		case <-ctx.Done():
			return worker.Result{}, context.Cause(ctx)
		}
		return worker.Done(nil), nil
	})
	if err := e.c.RegisterTask(context.Background(), tt); err != nil {
		t.Fatal(err)
	}
	e.create(t, "beat", "a", 8)
	stop := start(t, w)
	running.Wait()
	// Hold them until the heartbeat has renewed every lease several times.
	metric := func(endpoint string) int {
		resp, err := http.Get(e.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, `fulcrum_flow_http_requests_total{code="200",endpoint="`+endpoint+`"} `) {
				fmt.Sscan(strings.Fields(l)[1], &n)
			}
		}
		return n
	}
	testenv.Eventually(t, "five heartbeats (past the lease)", func() bool { return metric("heartbeat") >= 5 })
	close(release)
	testenv.Eventually(t, "8 successes", func() bool { return e.counts(t, "beat")["success"] == 8 })
	stop()
	if n := metric("renew_lease"); n != 0 {
		t.Fatalf("%d renew_lease calls; the heartbeat should renew every lease", n)
	}
	if c := e.counts(t, "beat"); c["pending"]+c["failed"] != 0 {
		t.Fatalf("a lease ran out: %v", c)
	}
}
