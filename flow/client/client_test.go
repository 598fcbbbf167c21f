package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/server"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// startServer runs a real flow server on a fresh SQLite file at listen
// ("127.0.0.1:0" for any port) and returns its base URL.
func startServer(t *testing.T, listen, db string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if db == "" {
		db = "sqlite://" + filepath.Join(t.TempDir(), "flow.db")
	}
	s, err := server.Start(ctx, server.Config{Listen: listen, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return "http://" + s.Addr()
}

func newClient(t *testing.T, servers ...string) *client.Client {
	t.Helper()
	c, err := client.New(servers, client.Options{ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var tt = flow.TaskType{TaskType: "ct", ScheduleLimit: 10, ScheduleIntervalMS: 100, MaxProcessingMS: 5000,
	MaxRetryNum: 2, RetryIntervalMS: 10, MaxRetryIntervalMS: 100}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startServer(t, "127.0.0.1:0", ""))
	if err := c.RegisterTask(ctx, tt); err != nil {
		t.Fatal(err)
	}
	one, err := c.CreateTask(ctx, flow.NewTask{TaskType: "ct", TaskStage: "a", TaskContext: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.CreateTasks(ctx, []flow.NewTask{{TaskType: "ct", TaskStage: "a"}, {TaskType: "ct", TaskStage: "a"}, {TaskType: "ct", TaskStage: "a", DelayMS: 3_600_000}})
	if err != nil || len(ids) != 3 {
		t.Fatalf("CreateTasks = %v, %v", ids, err)
	}
	held, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "ct", Limit: 10, WorkerID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 3 { // the delayed one is not due
		t.Fatalf("held %d tasks, want 3", len(held))
	}
	for _, h := range held {
		if h.Lease == "" || h.Owner != "w1" || h.Status != flow.StatusProcessing {
			t.Fatalf("held task %+v: want a lease, owner w1, processing", h)
		}
	}
	exp, err := c.RenewLease(ctx, flow.RenewLeaseRequest{TaskID: held[0].TaskID, Lease: held[0].Lease, ExtendMS: 60_000})
	if err != nil || time.Until(exp) < 30*time.Second {
		t.Fatalf("RenewLease = %v, %v", exp, err)
	}
	// A batch: one next stage, one success, one with a wrong lease.
	res, err := c.SetTasks(ctx, []flow.SetTaskRequest{
		{TaskID: held[0].TaskID, Lease: held[0].Lease, Status: flow.StatusPending, TaskStage: "b"},
		{TaskID: held[1].TaskID, Lease: held[1].Lease, Status: flow.StatusSuccess},
		{TaskID: held[2].TaskID, Lease: "not-the-lease", Status: flow.StatusSuccess},
	})
	if err != nil {
		t.Fatal(err)
	}
	if client.ResultErr(res[0]) != nil || client.ResultErr(res[1]) != nil || !errors.Is(client.ResultErr(res[2]), client.ErrStaleLease) {
		t.Fatalf("SetTasks results %+v: want ok, ok, stale", res)
	}
	if got, err := c.GetTask(ctx, held[0].TaskID); err != nil || got.TaskStage != "b" || got.Status != flow.StatusPending {
		t.Fatalf("GetTask after next stage = %+v, %v", got, err)
	}
	if err := c.CancelTask(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	// Pages of one follow the cursor through all four tasks.
	var listed []string
	for f := (client.ListFilter{TaskType: "ct", Limit: 1}); ; {
		page, err := c.ListTasks(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page.Tasks {
			listed = append(listed, tk.TaskID)
		}
		if page.NextCursor == "" {
			break
		}
		f.Cursor = page.NextCursor
	}
	if len(listed) != 4 {
		t.Fatalf("listed %v, want 4 tasks", listed)
	}
	page, err := c.ListTasks(ctx, client.ListFilter{TaskType: "ct", Status: flow.StatusCancelled})
	if err != nil || len(page.Tasks) != 1 || page.Tasks[0].TaskID != ids[2] {
		t.Fatalf("cancelled filter = %+v, %v", page, err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"pending": 1, "processing": 1, "success": 1, "cancelled": 1}
	for _, ty := range st.Types {
		if ty.TaskType == "ct" {
			for k, v := range want {
				if ty.Counts[k] != v {
					t.Errorf("stats %s = %d, want %d (all %v)", k, ty.Counts[k], v, ty.Counts)
				}
			}
		}
	}
	_ = one
}

func TestErrorsAreTyped(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startServer(t, "127.0.0.1:0", ""))
	if err := c.RegisterTask(ctx, tt); err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateTask(ctx, flow.NewTask{TaskType: "ct", TaskStage: "a"})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "ct", Limit: 1, WorkerID: "w"})
	if err != nil || len(held) != 1 {
		t.Fatalf("hold = %v, %v", held, err)
	}
	if err := c.SetTask(ctx, flow.SetTaskRequest{TaskID: id, Lease: held[0].Lease, Status: flow.StatusSuccess}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		call       func() error
		is         error
		status     int
		msgContain string
	}{
		{"set after the task ended is stale", func() error {
			return c.SetTask(ctx, flow.SetTaskRequest{TaskID: id, Lease: held[0].Lease, Status: flow.StatusSuccess})
		}, client.ErrStaleLease, 409, ""},
		{"renew after the task ended is stale", func() error {
			_, err := c.RenewLease(ctx, flow.RenewLeaseRequest{TaskID: id, Lease: held[0].Lease})
			return err
		}, client.ErrStaleLease, 409, ""},
		{"unknown task", func() error { _, err := c.GetTask(ctx, strings.Repeat("0", 26)); return err }, client.ErrNotFound, 404, ""},
		{"malformed task id", func() error { _, err := c.GetTask(ctx, "no-such-task"); return err }, nil, 400, "task_id"},
		{"unknown type", func() error {
			_, err := c.CreateTask(ctx, flow.NewTask{TaskType: "nope", TaskStage: "a"})
			return err
		}, nil, 0, "nope"},
		{"context too large", func() error {
			big, _ := json.Marshal(map[string]string{"x": strings.Repeat("y", flow.MaxContextBytes)})
			_, err := c.CreateTask(ctx, flow.NewTask{TaskType: "ct", TaskStage: "a", TaskContext: big})
			return err
		}, nil, 400, "4096"},
		{"negative limit", func() error {
			_, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "ct", Limit: -1, WorkerID: "w"})
			return err
		}, nil, 400, "limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want an *APIError", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want it to match %v", err, tc.is)
			}
			if tc.status != 0 && apiErr.Status != tc.status {
				t.Fatalf("status %d, want %d (%v)", apiErr.Status, tc.status, err)
			}
			if apiErr.Status < 400 || apiErr.Status > 499 {
				t.Fatalf("status %d, want a 4xx", apiErr.Status)
			}
			if !strings.Contains(apiErr.Message, tc.msgContain) {
				t.Fatalf("message %q does not name %q", apiErr.Message, tc.msgContain)
			}
		})
	}
	// Nothing the bad calls sent was stored.
	page, err := c.ListTasks(ctx, client.ListFilter{TaskType: "ct"})
	if err != nil || len(page.Tasks) != 1 {
		t.Fatalf("after the bad calls: %d tasks (%v), want the 1 good one", len(page.Tasks), err)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		servers []string
		opts    client.Options
		want    string
	}{
		{"none", nil, client.Options{}, "at least one"},
		{"empty", []string{""}, client.Options{}, "servers[0]"},
		{"scheme", []string{"ftp://h:1"}, client.Options{}, "scheme"},
		{"twice", []string{"h:1", "http://h:1"}, client.Options{}, "twice"},
		{"strategy", []string{"h:1"}, client.Options{Strategy: "coin_flip"}, "coin_flip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.New(tc.servers, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// freeAddr returns an address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A server that is down is skipped, every call still lands, and once it is
// back the prober lets it in again.
func TestDownServerSkippedAndReadmitted(t *testing.T) {
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "shared.db")
	live := startServer(t, "127.0.0.1:0", db)
	downAddr := freeAddr(t)
	c := newClient(t, "http://"+downAddr, live)
	if err := c.RegisterTask(ctx, tt); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		// create_task is not idempotent, but a refused connection proves
		// the request never left, so it moves on to the live server.
		if _, err := c.CreateTask(ctx, flow.NewTask{TaskType: "ct", TaskStage: "a"}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if got := c.Unhealthy(); len(got) != 1 || got[0] != "http://"+downAddr {
		t.Fatalf("Unhealthy = %v, want the down server", got)
	}
	startServer(t, downAddr, db)
	testenv.Eventually(t, "the restarted server let back in", func() bool { return len(c.Unhealthy()) == 0 })
	page, err := c.ListTasks(ctx, client.ListFilter{TaskType: "ct", Limit: 100})
	if err != nil || len(page.Tasks) != 10 {
		t.Fatalf("listed %d tasks (%v), want 10", len(page.Tasks), err)
	}
}

// brokenServer accepts connections, reads a request and hangs up without
// answering: the request reached a server, which may have acted on it.
func brokenServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				http.ReadRequest(bufio.NewReader(conn))
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

// After a request reached a server that then failed, a non-idempotent call
// (create, hold, set) is not sent again elsewhere; an idempotent one is.
func TestRetryOnlyWhatIsSafe(t *testing.T) {
	ctx := context.Background()
	live := startServer(t, "127.0.0.1:0", "")
	broken := brokenServer(t)
	c := newClient(t, broken, live)
	if err := c.RegisterTask(ctx, tt); err != nil {
		t.Fatal(err)
	}
	// Idempotent calls: whichever server round robin starts with, each
	// lands, and the broken server ends up out of rotation.
	for range 3 {
		if _, err := c.Stats(ctx); err != nil {
			t.Fatalf("stats: %v", err)
		}
	}
	if got := c.Unhealthy(); len(got) != 1 || got[0] != broken {
		t.Fatalf("Unhealthy = %v, want [%s]", got, broken)
	}
	// Creates: the one that reaches the broken server fails with its
	// transport error and is not resent to the live one.
	c2 := newClient(t, broken, live)
	var failed int
	for range 5 {
		_, err := c2.CreateTask(ctx, flow.NewTask{TaskType: "ct", TaskStage: "a"})
		if err != nil {
			failed++
			if errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("create via a server that hung up = %v; want its transport error", err)
			}
		}
	}
	page, err := c.ListTasks(ctx, client.ListFilter{TaskType: "ct"})
	if err != nil {
		t.Fatal(err)
	}
	if failed != 1 || len(page.Tasks) != 5-failed {
		t.Fatalf("%d creates failed and the live server has %d tasks; want 1 failed and 4 stored (no resend)", failed, len(page.Tasks))
	}
	// Both down: an error matching ErrUnavailable.
	c3 := newClient(t, "http://"+freeAddr(t))
	if _, err := c3.Stats(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Stats with no server up = %v, want ErrUnavailable", err)
	}
}

// The token reaches the server; a busy server's 503 (Retry-After) moves
// even a create on to the next server, since the busy one did nothing.
func TestTokenAndBusyServer(t *testing.T) {
	ctx := context.Background()
	s, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(t.TempDir(), "flow.db"), Token: "tk"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "http://" + s.Addr()
	if err := newClient(t, url).RegisterTask(ctx, tt); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the token: %v, want 401", err)
	}
	c, err := client.New([]string{url}, client.Options{Token: "tk"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RegisterTask(ctx, tt); err != nil {
		t.Fatal(err)
	}

	var busy atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		busy.Add(1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"server busy"}`))
	})}
	go hs.Serve(ln)
	defer hs.Close()
	c2, err := client.New([]string{"http://" + ln.Addr().String(), url}, client.Options{Token: "tk"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for i := 0; i < 4; i++ {
		if _, err := c2.CreateTask(ctx, flow.NewTask{TaskType: "ct", TaskStage: "a"}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if busy.Load() == 0 {
		t.Fatal("the busy server was never asked; the test shows nothing")
	}
}

// A batch with invalid elements: each gets its 400, and the valid ones
// around them are applied and answered in their places.
func TestSetTasksInvalidElementsAnsweredInPlace(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startServer(t, "127.0.0.1:0", ""))
	if err := c.RegisterTask(ctx, tt); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTasks(ctx, []flow.NewTask{{TaskType: "ct", TaskStage: "a"}, {TaskType: "ct", TaskStage: "a"}, {TaskType: "ct", TaskStage: "a"}}); err != nil {
		t.Fatal(err)
	}
	held, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "ct", Limit: 10, WorkerID: "w1"})
	if err != nil || len(held) != 3 {
		t.Fatalf("held %d, %v; want 3", len(held), err)
	}
	res, err := c.SetTasks(ctx, []flow.SetTaskRequest{
		{TaskID: held[0].TaskID, Lease: held[0].Lease, Status: 9}, // no such status
		{TaskID: held[0].TaskID, Lease: held[0].Lease, Status: flow.StatusSuccess},
		{TaskID: "not an id", Lease: "x", Status: flow.StatusSuccess},
		{TaskID: held[1].TaskID, Lease: held[1].Lease, Status: flow.StatusPending, TaskStage: "b"},
		{TaskID: held[2].TaskID, Lease: "stale", Status: flow.StatusSuccess},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{400, 200, 400, 200, 409}
	for i, r := range res {
		if r.Code != want[i] {
			t.Fatalf("results %+v: want codes %v", res, want)
		}
	}
	for id, st := range map[string]flow.Status{held[0].TaskID: flow.StatusSuccess, held[1].TaskID: flow.StatusPending, held[2].TaskID: flow.StatusProcessing} {
		if got, err := c.GetTask(ctx, id); err != nil || got.Status != st {
			t.Fatalf("task %s: %+v, %v; want status %d", id, got, err, st)
		}
	}
}
