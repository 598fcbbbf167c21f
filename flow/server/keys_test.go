package server

import (
	"net/http"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Over HTTP: sequence_key and rate_key travel through create, hold and
// get_task; a worker's 429 (set_task with pause_rate_key_ms) pauses the
// key, and get_task_type lists it and until when.
func TestKeysOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	tt := video
	tt.RateLimitPerSecond = 50
	var reg flow.TaskType
	do(t, s, "/v1/register_task", tt, &reg, http.StatusOK)
	if reg.RateLimitPerSecond != 50 {
		t.Fatalf("register_task answered %+v, want rate_limit_per_second 50", reg)
	}
	ids := create(t, s, flow.NewTask{TaskType: "video", TaskStage: "call", SequenceKey: "order-1", RateKey: "api"},
		flow.NewTask{TaskType: "video", TaskStage: "call", SequenceKey: "order-1", RateKey: "api"},
		flow.NewTask{TaskType: "video", TaskStage: "call", RateKey: "other"})
	h := hold(t, s, "video", 5, 0)
	if len(h) != 2 {
		t.Fatalf("held %d, want the head of order-1 and the other key's task", len(h))
	}
	var first flow.Task
	for _, x := range h {
		if x.TaskID == ids[0] {
			first = x
		}
	}
	if first.SequenceKey != "order-1" || first.RateKey != "api" {
		t.Fatalf("held %+v, want the head of order-1 with its keys", h)
	}
	do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: first.TaskID, Lease: first.Lease, Status: flow.StatusPending, PauseRateKeyMS: 60000, Error: "429 Too Many Requests"}, nil, http.StatusOK)
	var got flow.TaskType
	do(t, s, "/v1/get_task_type?task_type=video", nil, &got, http.StatusOK)
	if len(got.PausedKeys) != 1 || got.PausedKeys[0].RateKey != "api" || got.PausedKeys[0].Until.IsZero() || got.RateLimitPerSecond != 50 {
		t.Fatalf("get_task_type = %+v, want api paused and the rate limit", got)
	}
	task := getTask(t, s, first.TaskID)
	if task.Status != flow.StatusPending || task.CrtRetryNum != 0 || task.SequenceKey != "order-1" {
		t.Fatalf("paused task = %+v, want pending with no retry spent", task)
	}
	if more := hold(t, s, "video", 5, 0); len(more) != 0 {
		t.Fatalf("held %d during the pause", len(more))
	}
}

// Over HTTP: a fair type's weights come back from register_task and
// get_task_type, fairness_key travels through create, hold and get_task,
// and holds share across the keys by weight, the light key's tasks
// created last.
func TestFairOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	tt := video
	tt.ScheduleLimit, tt.Fair, tt.FairnessWeights = 8, true, map[string]int{"big": 3}
	var reg flow.TaskType
	do(t, s, "/v1/register_task", tt, &reg, http.StatusOK)
	if !reg.Fair || reg.FairnessWeights["big"] != 3 {
		t.Fatalf("register_task answered %+v, want fair with big: 3", reg)
	}
	var nts []flow.NewTask
	for i := 0; i < 20; i++ {
		nts = append(nts, flow.NewTask{TaskType: "video", TaskStage: "a", FairnessKey: "big"})
	}
	create(t, s, nts...)
	ids := create(t, s, flow.NewTask{TaskType: "video", TaskStage: "a", FairnessKey: "small"}, flow.NewTask{TaskType: "video", TaskStage: "a", FairnessKey: "small"})
	n := map[string]int{}
	for _, x := range hold(t, s, "video", 8, 0) {
		n[x.FairnessKey]++
	}
	if n["big"] != 6 || n["small"] != 2 {
		t.Fatalf("hold of 8: %v, want big 6, small 2", n)
	}
	if got := getTask(t, s, ids[0]); got.FairnessKey != "small" {
		t.Fatalf("get_task: fairness_key %q, want small", got.FairnessKey)
	}
	var got flow.TaskType
	do(t, s, "/v1/get_task_type?task_type=video", nil, &got, http.StatusOK)
	if !got.Fair || got.FairnessWeights["big"] != 3 {
		t.Fatalf("get_task_type = %+v, want fair with big: 3", got)
	}
}
