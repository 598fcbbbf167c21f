package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start runs a server on a free port with SQLite in a temp dir unless cfg
// names a database; it is closed (and its tables dropped) when t ends.
func start(t testing.TB, cfg Config) *Server {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.DB == "" {
		cfg.DB = "sqlite://" + filepath.Join(t.TempDir(), "flow.db")
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// dropTables removes a test prefix's tables after the servers using it close.
func dropTables(t testing.TB, dsn, prefix string) {
	t.Cleanup(func() {
		s, err := store.Open(context.Background(), dsn, store.Options{TablePrefix: prefix, Logger: quiet()})
		if err != nil {
			t.Errorf("drop tables: %v", err)
			return
		}
		s.DropTables(context.Background())
		s.Close()
	})
}

func call(t testing.TB, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// do posts (or gets, when in is nil and path has a query) and decodes the
// answer into out, failing unless the code is want.
func do(t testing.TB, s *Server, path string, in, out any, want int) {
	t.Helper()
	method, body := http.MethodGet, ""
	if in != nil {
		method = http.MethodPost
		b, _ := json.Marshal(in)
		body = string(b)
	}
	code, b := call(t, method, s.URL()+path, body)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: answer %s: %v", path, b, err)
		}
	}
}

var video = flow.TaskType{TaskType: "video", ScheduleLimit: 5, MaxRetryNum: 1, RetryIntervalMS: 10, MaxRetryIntervalMS: 10, MaxProcessingMS: 60000}

func register(t testing.TB, s *Server, tt flow.TaskType) {
	t.Helper()
	do(t, s, "/v1/register_task", tt, nil, 200)
}

func create(t testing.TB, s *Server, nts ...flow.NewTask) []string {
	t.Helper()
	var out flow.CreateTaskResponse
	do(t, s, "/v1/create_task", flow.CreateTaskRequest{Tasks: nts}, &out, 200)
	return out.TaskIDs
}

func hold(t testing.TB, s *Server, typ string, limit int, waitMS int64) []flow.Task {
	t.Helper()
	var out flow.HoldTasksResponse
	do(t, s, "/v1/hold_tasks", flow.HoldTasksRequest{TaskType: typ, Limit: limit, WorkerID: "w1", WaitMS: waitMS}, &out, 200)
	return out.Tasks
}

func getTask(t testing.TB, s *Server, id string) flow.Task {
	t.Helper()
	var out flow.Task
	do(t, s, "/v1/get_task?task_id="+id, nil, &out, 200)
	return out
}

// A task goes through three stages, one failure with a retry, and ends.
func TestThreeStagesEndToEnd(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	var typ flow.TaskType
	do(t, s, "/v1/get_task_type?task_type=video", nil, &typ, 200)
	want := video
	want.ScheduleIntervalMS = typ.ScheduleIntervalMS // unset at register: the default fills it
	if !reflect.DeepEqual(typ, want) || typ.ScheduleIntervalMS <= 0 {
		t.Fatalf("get_task_type = %+v, registered %+v", typ, video)
	}
	id := create(t, s, flow.NewTask{TaskType: "video", TaskStage: "download", TaskContext: json.RawMessage(`{"url":"http://v/1"}`)})[0]
	steps := []struct {
		stage  string
		set    flow.SetTaskRequest
		status flow.Status
	}{
		{"download", flow.SetTaskRequest{Status: flow.StatusPending, TaskStage: "encode", TaskContext: json.RawMessage(`{"url":"http://v/1","file":"/tmp/a"}`)}, flow.StatusPending},
		{"encode", flow.SetTaskRequest{Status: flow.StatusPending, Error: "disk full"}, flow.StatusPending}, // retry 1 of 1
		{"encode", flow.SetTaskRequest{Status: flow.StatusPending, TaskStage: "publish"}, flow.StatusPending},
		{"publish", flow.SetTaskRequest{Status: flow.StatusSuccess}, flow.StatusSuccess},
	}
	for i, st := range steps {
		var got []flow.Task
		testenv.Eventually(t, "the task to be due", func() bool { got = hold(t, s, "video", 10, 0); return len(got) > 0 })
		if len(got) != 1 || got[0].TaskID != id || got[0].TaskStage != st.stage || got[0].Lease == "" {
			t.Fatalf("step %d: held %+v", i, got)
		}
		req := st.set
		req.TaskID, req.Lease = id, got[0].Lease
		do(t, s, "/v1/set_task", req, nil, 200)
		if task := getTask(t, s, id); task.Status != st.status || task.Lease != "" {
			t.Fatalf("step %d: task %+v", i, task)
		}
	}
	task := getTask(t, s, id)
	if string(task.TaskContext) != `{"url":"http://v/1","file":"/tmp/a"}` || task.CrtRetryNum != 0 || task.TaskStage != "publish" {
		t.Fatalf("final task %+v", task)
	}
	var events []string
	for _, e := range task.ScheduleLog {
		events = append(events, e.Event)
	}
	if fmt.Sprint(events) != "[created held pending held retry held pending held success]" {
		t.Fatalf("schedule log events %v", events)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	s := start(t, Config{MaxBodyBytes: 64 << 10})
	register(t, s, video)
	ids := create(t, s, flow.NewTask{TaskType: "video"}, flow.NewTask{TaskType: "video"})
	held := hold(t, s, "video", 1, 0)[0]
	done := create(t, s, flow.NewTask{TaskType: "video", Priority: 100})[0]
	h2 := hold(t, s, "video", 1, 0)[0]
	if h2.TaskID != done {
		t.Fatalf("priority task not first: %s", h2.TaskID)
	}
	do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: done, Lease: h2.Lease, Status: flow.StatusSuccess}, nil, 200)
	missing := "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	big := `{"k":"` + strings.Repeat("x", flow.MaxContextBytes) + `"}`
	cases := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"bad JSON", "POST", "/v1/create_task", `{"task_type":`, 400, "bad JSON"},
		{"not an object", "POST", "/v1/create_task", `[1]`, 400, "want an object"},
		{"empty body", "POST", "/v1/hold_tasks", ``, 400, "empty body"},
		{"trailing data", "POST", "/v1/cancel_task", `{"task_id":"` + ids[1] + `"} {}`, 400, "after the JSON object"},
		{"unknown field", "POST", "/v1/create_task", `{"task_type":"video","colour":1}`, 400, `unknown field "colour"`},
		{"wrong field type", "POST", "/v1/create_task", `{"task_type":5}`, 400, "task_type: want string"},
		{"body too large", "POST", "/v1/create_task", `{"task_type":"video","task_stage":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "over 65536 bytes"},
		{"register: missing name", "POST", "/v1/register_task", `{}`, 400, "task_type: required"},
		{"register: bad name", "POST", "/v1/register_task", `{"task_type":"a b"}`, 400, "task_type"},
		{"register: negative", "POST", "/v1/register_task", `{"task_type":"a","schedule_limit":-1}`, 400, "schedule_limit: -1 is negative"},
		{"register: retry cap below interval", "POST", "/v1/register_task", `{"task_type":"a","retry_interval_ms":10,"max_retry_interval_ms":5}`, 400, "max_retry_interval_ms"},
		{"create: unknown type", "POST", "/v1/create_task", `{"task_type":"nope"}`, 404, `task type "nope": unknown task type`},
		{"create: context too big", "POST", "/v1/create_task", `{"task_type":"video","task_context":` + big + `}`, 400, "task_context: 4104 bytes, at most 4096"},
		{"create: negative delay", "POST", "/v1/create_task", `{"task_type":"video","delay_ms":-1}`, 400, "delay_ms: -1 is negative"},
		{"create: no type", "POST", "/v1/create_task", `{}`, 400, "task_type: required"},
		{"create: sequence key too long", "POST", "/v1/create_task", `{"task_type":"video","sequence_key":"` + strings.Repeat("k", 129) + `"}`, 400, "sequence_key: 129 bytes, at most 128"},
		{"create: rate key too long", "POST", "/v1/create_task", `{"tasks":[{"task_type":"video","rate_key":"` + strings.Repeat("k", 129) + `"}]}`, 400, "tasks[0].rate_key: 129 bytes"},
		{"register: negative rate limit", "POST", "/v1/register_task", `{"task_type":"a","rate_limit_per_second":-1}`, 400, "rate_limit_per_second: -1"},
		{"register: weights without fair", "POST", "/v1/register_task", `{"task_type":"a","fairness_weights":{"t1":2}}`, 400, "fairness_weights: only with fair: true"},
		{"register: zero weight", "POST", "/v1/register_task", `{"task_type":"a","fair":true,"fairness_weights":{"t1":0}}`, 400, `fairness_weights: "t1": weight 0, want 1 to 1000`},
		{"register: weight too big", "POST", "/v1/register_task", `{"task_type":"a","fair":true,"fairness_weights":{"t1":1001}}`, 400, `fairness_weights: "t1": weight 1001`},
		{"register: empty weight key", "POST", "/v1/register_task", `{"task_type":"a","fair":true,"fairness_weights":{"":1}}`, 400, "fairness_weights: a key is empty"},
		{"register: weight not a number", "POST", "/v1/register_task", `{"task_type":"a","fair":true,"fairness_weights":{"t1":"x"}}`, 400, "fairness_weights"},
		{"create: fairness key too long", "POST", "/v1/create_task", `{"tasks":[{"task_type":"video","fairness_key":"` + strings.Repeat("k", 129) + `"}]}`, 400, "tasks[0].fairness_key: 129 bytes"},
		{"register: paused keys", "POST", "/v1/register_task", `{"task_type":"a","paused_keys":[]}`, 400, "paused_keys: set by set_task"},
		{"create: inline and batch", "POST", "/v1/create_task", `{"task_type":"video","tasks":[{"task_type":"video"}]}`, 400, "not both"},
		{"create: empty batch", "POST", "/v1/create_task", `{"tasks":[]}`, 400, "empty batch"},
		{"create: bad element", "POST", "/v1/create_task", `{"tasks":[{"task_type":"video"},{"task_type":"video","task_context":` + big + `}]}`, 400, "tasks[1].task_context"},
		{"create: unknown type in batch", "POST", "/v1/create_task", `{"tasks":[{"task_type":"video"},{"task_type":"nope"}]}`, 404, "nope"},
		{"hold: negative limit", "POST", "/v1/hold_tasks", `{"task_type":"video","worker_id":"w","limit":-1}`, 400, "limit: -1 is negative"},
		{"hold: negative wait", "POST", "/v1/hold_tasks", `{"task_type":"video","worker_id":"w","wait_ms":-5}`, 400, "wait_ms: -5 is negative"},
		{"hold: no worker", "POST", "/v1/hold_tasks", `{"task_type":"video"}`, 400, "worker_id: required"},
		{"hold: unknown type", "POST", "/v1/hold_tasks", `{"task_type":"nope","worker_id":"w"}`, 404, "unknown task type"},
		{"set: stale lease", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","lease":"old","status":3}`, 409, "stale lease"},
		{"set: task ended", "POST", "/v1/set_task", `{"task_id":"` + done + `","lease":"` + h2.Lease + `","status":4}`, 409, "stale lease"},
		{"set: unknown task", "POST", "/v1/set_task", `{"task_id":"` + missing + `","lease":"x","status":3}`, 404, "not found"},
		{"set: bad status", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","lease":"` + held.Lease + `","status":2}`, 400, "status: 2"},
		{"set: bad id", "POST", "/v1/set_task", `{"task_id":"abc","lease":"x","status":3}`, 400, `task_id: "abc" is not a task id`},
		{"set: no lease", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","status":3}`, 400, "lease: required"},
		{"set: context too big", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","lease":"` + held.Lease + `","status":3,"task_context":` + big + `}`, 400, "task_context"},
		{"set: pause with success", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","lease":"` + held.Lease + `","status":3,"pause_rate_key_ms":1000}`, 400, "pause_rate_key_ms: only with status 1"},
		{"set: negative pause", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","lease":"` + held.Lease + `","status":1,"pause_rate_key_ms":-1}`, 400, "pause_rate_key_ms: -1 is negative"},
		{"set: pause without a rate key", "POST", "/v1/set_task", `{"task_id":"` + held.TaskID + `","lease":"` + held.Lease + `","status":1,"pause_rate_key_ms":1000}`, 400, "has no rate_key"},
		{"set_tasks: empty", "POST", "/v1/set_tasks", `{"tasks":[]}`, 400, "empty batch"},
		{"renew: stale", "POST", "/v1/renew_lease", `{"task_id":"` + held.TaskID + `","lease":"old"}`, 409, "stale lease"},
		{"renew: unknown", "POST", "/v1/renew_lease", `{"task_id":"` + missing + `","lease":"x","extend_ms":5}`, 404, "not found"},
		{"renew: negative", "POST", "/v1/renew_lease", `{"task_id":"` + held.TaskID + `","lease":"x","extend_ms":-1}`, 400, "extend_ms"},
		{"cancel: unknown", "POST", "/v1/cancel_task", `{"task_id":"` + missing + `"}`, 404, "not found"},
		{"cancel: ended", "POST", "/v1/cancel_task", `{"task_id":"` + done + `"}`, 409, "already ended success"},
		{"get: no id", "GET", "/v1/get_task", ``, 400, "task_id: required"},
		{"get: unknown", "GET", "/v1/get_task?task_id=" + missing, ``, 404, "not found"},
		{"get: unknown parameter", "GET", "/v1/get_task?id=" + missing, ``, 400, `unknown parameter "id"`},
		{"get type: none", "GET", "/v1/get_task_type", ``, 400, "task_type: required"},
		{"get type: unknown", "GET", "/v1/get_task_type?task_type=nope", ``, 404, "unknown task type"},
		{"list: negative limit", "GET", "/v1/get_task_list?limit=-1", ``, 400, "limit: -1 is negative"},
		{"list: bad limit", "GET", "/v1/get_task_list?limit=ten", ``, 400, `limit: "ten" is not a number`},
		{"list: bad status", "GET", "/v1/get_task_list?status=done", ``, 400, `status: unknown status "done"`},
		{"list: bad cursor", "GET", "/v1/get_task_list?cursor=zz", ``, 400, "cursor"},
		{"wrong method", "GET", "/v1/create_task", ``, 405, "use POST"},
		{"unknown endpoint", "POST", "/v1/nothing", `{}`, 404, "no endpoint /v1/nothing"},
	}
	before := statsOf(t, s)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, b := call(t, c.method, s.URL()+c.path, c.body)
			var e flow.ErrorResponse
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("answer %q is not the JSON error body: %v", b, err)
			}
			if code != c.code || !strings.Contains(e.Error, c.msg) {
				t.Fatalf("%d %q, want %d containing %q", code, e.Error, c.code, c.msg)
			}
		})
	}
	// Nothing was stored or changed by the refused requests.
	if after := statsOf(t, s); after != before {
		t.Fatalf("stats changed by refused requests:\n%s\n%s", before, after)
	}
	if got := getTask(t, s, held.TaskID); got.Status != flow.StatusProcessing || got.Owner != "w1" {
		t.Fatalf("held task changed: %+v", got)
	}
	do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: held.TaskID, Lease: held.Lease, Status: flow.StatusSuccess}, nil, 200)
}

func statsOf(t testing.TB, s *Server) string {
	var st flow.StatsResponse
	do(t, s, "/v1/stats", nil, &st, 200)
	return fmt.Sprint(st)
}

func TestSetTasksBatchResults(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	create(t, s, flow.NewTask{TaskType: "video"}, flow.NewTask{TaskType: "video"})
	h := hold(t, s, "video", 2, 0)
	var out flow.SetTasksResponse
	do(t, s, "/v1/set_tasks", flow.SetTasksRequest{Tasks: []flow.SetTaskRequest{
		{TaskID: h[0].TaskID, Lease: h[0].Lease, Status: flow.StatusSuccess},
		{TaskID: h[1].TaskID, Lease: "stale", Status: flow.StatusSuccess},
		{TaskID: "bad", Lease: "x", Status: flow.StatusSuccess},
		{TaskID: h[1].TaskID, Lease: h[1].Lease, Status: flow.StatusPending, TaskStage: "two"},
	}}, &out, 200)
	var codes []int
	for _, r := range out.Results {
		codes = append(codes, r.Code)
	}
	if fmt.Sprint(codes) != "[200 409 400 200]" || out.Results[2].Error == "" || out.Results[1].TaskID != h[1].TaskID {
		t.Fatalf("results %+v", out.Results)
	}
	if got := getTask(t, s, h[1].TaskID); got.TaskStage != "two" || got.Status != flow.StatusPending {
		t.Fatalf("task %+v", got)
	}
}

func TestListPaginationAndFilters(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	var nts []flow.NewTask
	for i := 0; i < 7; i++ {
		nts = append(nts, flow.NewTask{TaskType: "video", TaskStage: []string{"a", "b"}[i%2]})
	}
	ids := create(t, s, nts...)
	var all []string
	cursor := ""
	for page := 0; page < 10; page++ {
		var out flow.TaskListResponse
		do(t, s, "/v1/get_task_list?task_type=video&limit=3&cursor="+cursor, nil, &out, 200)
		for _, tk := range out.Tasks {
			all = append(all, tk.TaskID)
		}
		if out.NextCursor == "" {
			break
		}
		cursor = out.NextCursor
	}
	if fmt.Sprint(all) != fmt.Sprint(ids) {
		t.Fatalf("pages gave %v, want %v", all, ids)
	}
	var out flow.TaskListResponse
	do(t, s, "/v1/get_task_list?task_stage=a&status=pending", nil, &out, 200)
	if len(out.Tasks) != 4 {
		t.Fatalf("stage a: %d tasks", len(out.Tasks))
	}
	do(t, s, "/v1/get_task_list?status=2", nil, &out, 200)
	if len(out.Tasks) != 0 {
		t.Fatalf("processing: %d tasks", len(out.Tasks))
	}
}

// A waiting hold is woken by the in-process signal: the poll interval is an
// hour, so without the signal it would come back empty after wait_ms.
func TestHoldWaitWokenByCreateAndByDelay(t *testing.T) {
	t.Parallel()
	s := start(t, Config{PollInterval: time.Hour, MaxWait: time.Minute})
	register(t, s, video)
	for _, c := range []struct {
		name string
		task flow.NewTask
	}{
		{"create", flow.NewTask{TaskType: "video", TaskStage: "now"}},
		{"delayed task comes due", flow.NewTask{TaskType: "video", TaskStage: "later", DelayMS: 300}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := make(chan []flow.Task, 1)
			go func() { got <- hold(t, s, "video", 1, 60000) }()
			waitForWaiter(t, s, "video")
			id := create(t, s, c.task)[0]
			tasks := <-got
			if len(tasks) != 1 || tasks[0].TaskID != id {
				t.Fatalf("hold returned %+v, want task %s", tasks, id)
			}
		})
	}
}

// waitForWaiter returns once a hold is parked on the waker for typ.
func waitForWaiter(t testing.TB, s *Server, typ string) {
	testenv.Eventually(t, "a waiting hold", func() bool {
		s.wake.mu.Lock()
		defer s.wake.mu.Unlock()
		_, ok := s.wake.ch[typ]
		return ok
	})
}

func TestCloseAnswersWaitingHolds(t *testing.T) {
	t.Parallel()
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(t.TempDir(), "f.db"), Logger: quiet(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	register(t, s, video)
	got := make(chan int, 1)
	go func() {
		code, _ := call(t, "POST", s.URL()+"/v1/hold_tasks", `{"task_type":"video","worker_id":"w","wait_ms":60000}`)
		got <- code
	}()
	waitForWaiter(t, s, "video")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code := <-got; code != 200 {
		t.Fatalf("waiting hold got %d on shutdown", code)
	}
}

func TestLeaseExpiryRescueAndPrune(t *testing.T) {
	t.Parallel()
	s := start(t, Config{RescueInterval: 10 * time.Millisecond, PruneInterval: 10 * time.Millisecond, Retention: time.Millisecond})
	tt := video
	tt.MaxProcessingMS = 50
	register(t, s, tt)
	id := create(t, s, flow.NewTask{TaskType: "video"})[0]
	first := hold(t, s, "video", 1, 0)[0]
	// The worker "crashes": the lease runs out and the task comes back.
	testenv.Eventually(t, "the task to be rescued", func() bool { return getTask(t, s, id).Status == flow.StatusPending })
	register(t, s, video) // a long lease from now on, so the next hold is not rescued too
	var again []flow.Task
	testenv.Eventually(t, "the task to be held again", func() bool { again = hold(t, s, "video", 1, 0); return len(again) == 1 })
	if again[0].TaskID != id || again[0].CrtRetryNum != 1 || again[0].Lease == first.Lease {
		t.Fatalf("re-held %+v", again[0])
	}
	code, _ := call(t, "POST", s.URL()+"/v1/set_task", fmt.Sprintf(`{"task_id":%q,"lease":%q,"status":3}`, id, first.Lease))
	if code != 409 {
		t.Fatalf("the crashed worker's late set got %d, want 409", code)
	}
	// Renew keeps the second lease alive past max_processing_time.
	do(t, s, "/v1/renew_lease", flow.RenewLeaseRequest{TaskID: id, Lease: again[0].Lease, ExtendMS: 60000}, nil, 200)
	do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: id, Lease: again[0].Lease, Status: flow.StatusSuccess}, nil, 200)
	testenv.Eventually(t, "the finished task to be pruned", func() bool {
		code, _ := call(t, "GET", s.URL()+"/v1/get_task?task_id="+id, "")
		return code == 404
	})
}

func TestCancelAndMetrics(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	ids := create(t, s, flow.NewTask{TaskType: "video"}, flow.NewTask{TaskType: "video"})
	var task flow.Task
	do(t, s, "/v1/cancel_task", flow.CancelTaskRequest{TaskID: ids[0]}, &task, 200)
	if task.Status != flow.StatusCancelled {
		t.Fatalf("cancel answered %+v", task)
	}
	h := hold(t, s, "video", 5, 0)
	if len(h) != 1 || h[0].TaskID != ids[1] {
		t.Fatalf("held %+v", h)
	}
	code, b := call(t, "GET", s.URL()+"/metrics", "")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{
		`fulcrum_flow_tasks{status="cancelled",task_type="video"} 1`,
		`fulcrum_flow_tasks{status="processing",task_type="video"} 1`,
		`fulcrum_flow_tasks_created_total{task_type="video"} 2`,
		`fulcrum_flow_tasks_held_total{task_type="video"} 1`,
		`fulcrum_flow_http_requests_total{code="200",endpoint="create_task"} 1`,
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	code, _ = call(t, "GET", s.URL()+"/healthz", "")
	if code != 200 {
		t.Fatalf("healthz %d", code)
	}
}

// Two servers on one PostgreSQL database: a hold waiting on one is woken by
// a task created on the other (LISTEN/NOTIFY), with polling set to an hour.
func TestPostgresNotifyAcrossServers(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	p := storetest.Prefix()
	dropTables(t, dsn, p)
	a := start(t, Config{DB: dsn, TablePrefix: p, PollInterval: time.Hour, MaxWait: time.Minute})
	b := start(t, Config{DB: dsn, TablePrefix: p, PollInterval: time.Hour, MaxWait: time.Minute})
	register(t, a, video)
	got := make(chan []flow.Task, 1)
	go func() { got <- hold(t, a, "video", 1, 60000) }()
	waitForWaiter(t, a, "video")
	id := create(t, b, flow.NewTask{TaskType: "video"})[0]
	if tasks := <-got; len(tasks) != 1 || tasks[0].TaskID != id {
		t.Fatalf("hold on server a returned %+v, want %s created on b", tasks, id)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{LockMode: "mutex"}, `lock mode "mutex"`},
		{Config{DB: "oracle://x"}, `db "oracle://x"`},
		{Config{RescueInterval: -time.Second}, "rescue interval -1s is negative"},
		{Config{DB: "sqlite://"}, "path is empty"},
	} {
		c.cfg.Listen, c.cfg.Logger = "127.0.0.1:0", quiet()
		if _, err := Start(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start(%+v) err = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// FuzzRequests feeds arbitrary bodies to every POST endpoint: the answer is
// never a 5xx and always JSON, with an error message on 4xx.
func FuzzRequests(f *testing.F) {
	s := start(f, Config{})
	register(f, s, video)
	for _, seed := range []string{
		`{"task_type":"video","task_stage":"a","task_context":{"x":1}}`,
		`{"tasks":[{"task_type":"video"},{"task_type":"video","delay_ms":5}]}`,
		`{"task_type":"video","worker_id":"w","limit":2,"wait_ms":0}`,
		`{"task_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","lease":"x","status":3}`,
		`{"tasks":[{"task_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","lease":"x","status":1,"error":"e"}]}`,
		`{"task_type":"t","schedule_limit":3,"max_retry_num":2}`,
		`{"task_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","lease":"x","extend_ms":10}`,
		`{"task_context":"\u0000"}`, `{`, `[]`, `null`, `{"limit":1e400}`, `{"task_type":"video","priority":-99999999999}`,
	} {
		f.Add(seed)
	}
	h := s.http.Handler
	paths := []string{"/v1/register_task", "/v1/create_task", "/v1/hold_tasks", "/v1/set_task", "/v1/set_tasks", "/v1/renew_lease", "/v1/cancel_task"}
	f.Fuzz(func(t *testing.T, body string) {
		for _, p := range paths {
			if p == "/v1/hold_tasks" && strings.Contains(body, "wait_ms") {
				body = strings.ReplaceAll(body, "wait_ms", "wait_mz") // keep runs short
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", p, strings.NewReader(body)))
			if rec.Code >= 500 {
				t.Fatalf("%s %q: %d %s", p, body, rec.Code, rec.Body)
			}
			var e flow.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("%s %q: answer %q is not JSON", p, body, rec.Body)
			}
			if rec.Code >= 400 && e.Error == "" {
				t.Fatalf("%s %q: %d without an error message", p, body, rec.Code)
			}
		}
	})
}
