package worker

import (
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// A set sends task_context only when it changes the stored one: a handler
// that returns no context and leaves Task.Context alone sends none (the
// server keeps the stored context), on every outcome; one it returns or
// assigns to Task.Context is sent.
func TestSetSendsContextOnlyWhenChanged(t *testing.T) {
	held := func() *heldTask {
		return newHeld(&Worker{log: slog.New(slog.DiscardHandler)}, &flow.Task{TaskID: "t1", TaskStage: "s", Lease: "l", TaskContext: json.RawMessage(`{"n":1}`)}, time.Now(), 0)
	}
	for name, res := range map[string]Result{"done": Done(nil), "next": Next("s2", nil), "pause": PauseKey(1, "429")} {
		if req := held().setRequest(res, nil); req.TaskContext != nil {
			t.Errorf("%s with no context sent %s", name, req.TaskContext)
		}
	}
	if req := errorRequest(held(), "boom"); req.TaskContext != nil {
		t.Errorf("an error's retry sent %s", req.TaskContext)
	}
	if req := held().setRequest(Done(map[string]int{"x": 1}), nil); string(req.TaskContext) != `{"x":1}` {
		t.Errorf("done with a context sent %s", req.TaskContext)
	}
	h := held()
	h.task.Context = json.RawMessage(`{"n":2}`)
	if req := h.setRequest(Done(nil), nil); string(req.TaskContext) != `{"n":2}` {
		t.Errorf("an assigned Task.Context sent %s", req.TaskContext)
	}
	if req := h.setRequest(Result{}, errors.New("boom")); string(req.TaskContext) != `{"n":2}` {
		t.Errorf("an error after assigning Task.Context sent %s", req.TaskContext)
	}
}
