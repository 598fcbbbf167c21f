package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
)

func TestUniqueKeyOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	var a, b flow.CreateTaskResponse
	do(t, s, "/v1/create_task", flow.CreateTaskRequest{NewTask: flow.NewTask{TaskType: "video", UniqueKey: "u1"}}, &a, 200)
	do(t, s, "/v1/create_task", flow.CreateTaskRequest{NewTask: flow.NewTask{TaskType: "video", UniqueKey: "u1"}}, &b, 200)
	if a.Existing || !b.Existing || b.TaskIDs[0] != a.TaskIDs[0] {
		t.Fatalf("first %+v, second %+v; want the second to return the first's id with existing", a, b)
	}
	var batch flow.CreateTaskResponse
	do(t, s, "/v1/create_task", flow.CreateTaskRequest{Tasks: []flow.NewTask{{TaskType: "video"}, {TaskType: "video", UniqueKey: "u1"}, {TaskType: "video", UniqueKey: "u2"}}}, &batch, 200)
	if len(batch.ExistingIndex) != 1 || batch.ExistingIndex[0] != 1 || batch.TaskIDs[1] != a.TaskIDs[0] {
		t.Fatalf("batch = %+v", batch)
	}
	if got := getTask(t, s, a.TaskIDs[0]); got.UniqueKey != "u1" {
		t.Fatalf("get_task unique_key = %q", got.UniqueKey)
	}
	code, body := call(t, "POST", s.URL()+"/v1/create_task", `{"task_type":"video","unique_key":"`+strings.Repeat("k", 129)+`"}`)
	if code != 400 || !strings.Contains(string(body), "unique_key: 129 bytes, at most 128") {
		t.Fatalf("long key: %d %s", code, body)
	}
}

func TestPauseResumeRetryDeleteOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	ids := create(t, s, flow.NewTask{TaskType: "video", TaskStage: "a"}, flow.NewTask{TaskType: "video", TaskStage: "a"})
	var tt flow.TaskType
	do(t, s, "/v1/pause_task_type", flow.TaskTypeRequest{TaskType: "video"}, &tt, 200)
	if !tt.Paused {
		t.Fatalf("pause answered %+v", tt)
	}
	if got := hold(t, s, "video", 5, 0); len(got) != 0 {
		t.Fatalf("paused type held %d", len(got))
	}
	var st flow.StatsResponse
	do(t, s, "/v1/stats", nil, &st, 200)
	if len(st.Types) != 1 || !st.Types[0].Paused {
		t.Fatalf("stats = %+v", st)
	}
	// A hold waiting on the paused type is woken by the resume.
	got := make(chan []flow.Task, 1)
	go func() { got <- hold(t, s, "video", 5, 20000) }()
	waitForWaiter(t, s, "video")
	var resumed flow.TaskType
	do(t, s, "/v1/resume_task_type", flow.TaskTypeRequest{TaskType: "video"}, &resumed, 200)
	held := <-got
	if len(held) != 2 || resumed.Paused {
		t.Fatalf("after resume: %d held, %+v", len(held), resumed)
	}
	do(t, s, "/v1/pause_task_type", flow.TaskTypeRequest{TaskType: "nope"}, nil, 404)
	code, body := call(t, "POST", s.URL()+"/v1/register_task", `{"task_type":"video","paused":true}`)
	if code != 400 || !strings.Contains(string(body), "paused: set by POST /v1/pause_task_type") {
		t.Fatalf("register with paused: %d %s", code, body)
	}

	// Retry: only failed or cancelled; delete: not while held.
	do(t, s, "/v1/retry_task", flow.RetryTaskRequest{TaskID: ids[0]}, nil, 409)
	do(t, s, "/v1/delete_task", flow.DeleteTaskRequest{TaskID: ids[0]}, nil, 409)
	do(t, s, "/v1/cancel_task", flow.CancelTaskRequest{TaskID: ids[0]}, nil, 200)
	var rt flow.Task
	do(t, s, "/v1/retry_task", flow.RetryTaskRequest{TaskID: ids[0], TaskStage: "b", TaskContext: []byte(`{"x":1}`)}, &rt, 200)
	if rt.Status != flow.StatusPending || rt.TaskStage != "b" || string(rt.TaskContext) != `{"x":1}` || rt.CrtRetryNum != 0 {
		t.Fatalf("retried = %+v", rt)
	}
	do(t, s, "/v1/delete_task", flow.DeleteTaskRequest{TaskID: ids[0]}, nil, 200)
	do(t, s, "/v1/get_task?task_id="+ids[0], nil, nil, 404)
	do(t, s, "/v1/delete_task", flow.DeleteTaskRequest{TaskID: ids[0]}, nil, 404)
	code, body = call(t, "POST", s.URL()+"/v1/retry_task", `{"task_id":"`+ids[1]+`","task_stage":"a b"}`)
	if code != 400 || !strings.Contains(string(body), "task_stage") {
		t.Fatalf("retry with a bad stage: %d %s", code, body)
	}
}

// The oldest due pending task's age, per type: a task with priority 100 is
// due 100 s before its creation.
func TestOldestPendingAgeGauge(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	create(t, s, flow.NewTask{TaskType: "video", Priority: 100}, flow.NewTask{TaskType: "video", DelayMS: 3_600_000})
	_, b := call(t, "GET", s.URL()+"/metrics", "")
	var age float64
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, `fulcrum_flow_oldest_pending_age_seconds{task_type="video"} `); ok {
			age, _ = strconv.ParseFloat(v, 64)
		}
	}
	if age < 100 || age > 1000 {
		t.Fatalf("oldest pending age %v, want about 100 s", age)
	}
}

func TestHeartbeatAndWorkerGoneOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	create(t, s, flow.NewTask{TaskType: "video"}, flow.NewTask{TaskType: "video"})
	held := hold(t, s, "video", 5, 0) // worker w1
	var hb flow.HeartbeatResponse
	do(t, s, "/v1/heartbeat", flow.HeartbeatRequest{WorkerID: "w1"}, &hb, 200)
	if len(hb.Tasks) != 2 || hb.Tasks[0].LeaseExpiry.Before(*held[0].LeaseExpiry) {
		t.Fatalf("heartbeat = %+v", hb)
	}
	do(t, s, "/v1/heartbeat", flow.HeartbeatRequest{}, nil, 400)
	var gone flow.WorkerGoneResponse
	do(t, s, "/v1/worker_gone", flow.WorkerGoneRequest{WorkerID: "w1"}, &gone, 200)
	if gone.Rescued != 2 {
		t.Fatalf("worker_gone rescued %d, want 2", gone.Rescued)
	}
	do(t, s, "/v1/heartbeat", flow.HeartbeatRequest{WorkerID: "w1"}, &hb, 200)
	if len(hb.Tasks) != 0 {
		t.Fatalf("heartbeat after worker_gone: %+v", hb)
	}
	if again := hold(t, s, "video", 5, 5000); len(again) != 2 { // due after the 10 ms backoff
		t.Fatalf("rescued tasks held again: %d, want 2", len(again))
	}
}
