package server

import (
	"bytes"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/internal/plainjson"
)

// decodePlain reads the two requests that carry most of a busy server's
// bytes, set_tasks and create_task batches, in the plain shape the Go
// client writes, without reflection (encoding/json's decoding of them was
// about a tenth of the process's CPU end to end). It reports false for
// any other request or shape, with v untouched, and decode then lets
// encoding/json read the body and name what is wrong with it.
func decodePlain(body []byte, v any) bool {
	switch v := v.(type) {
	case *flow.SetTasksRequest:
		var r flow.SetTasksRequest
		p := plainjson.Parser{B: body}
		ok := p.Object(func(key []byte) bool {
			if string(key) != "tasks" {
				return false
			}
			r.Tasks = make([]flow.SetTaskRequest, 0, bytes.Count(body, []byte(`{"task_id":`))) // every element begins so
			var prev flow.SetTaskRequest
			return p.Array(func() bool {
				var t flow.SetTaskRequest
				if !plainSet(&p, &t, &prev) {
					return false
				}
				r.Tasks = append(r.Tasks, t)
				prev = t
				return true
			})
		})
		if !ok || !p.End() {
			return false
		}
		*v = r
		return true
	case *flow.CreateTaskRequest:
		var r flow.CreateTaskRequest
		p := plainjson.Parser{B: body}
		ok := p.Object(func(key []byte) bool {
			if string(key) == "tasks" {
				r.Tasks = make([]flow.NewTask, 0, bytes.Count(body, []byte(`{"task_type":`))) // every element the Go client writes begins so
				var prev flow.NewTask
				return p.Array(func() bool {
					var t flow.NewTask
					if !p.Object(func(key []byte) bool { return plainNewTaskField(&p, &t, &prev, key) }) {
						return false
					}
					r.Tasks = append(r.Tasks, t)
					prev = t
					return true
				})
			}
			return plainNewTaskField(&p, &r.NewTask, &flow.NewTask{}, key)
		})
		if !ok || !p.End() {
			return false
		}
		*v = r
		return true
	}
	return false
}

// plainSet reads one set; prev is the batch's element before it, whose
// lease and stage it mostly repeats.
func plainSet(p *plainjson.Parser, t, prev *flow.SetTaskRequest) bool {
	return p.Object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "task_id":
			t.TaskID, ok = p.Str()
		case "lease":
			t.Lease, ok = p.StrAs(prev.Lease)
		case "status":
			var n int
			n, ok = p.Int()
			t.Status = flow.Status(n)
		case "task_stage":
			t.TaskStage, ok = p.StrAs(prev.TaskStage)
		case "task_context":
			t.TaskContext, ok = p.Raw()
		case "error":
			t.Error, ok = p.Str()
		case "delay_ms":
			t.DelayMS, ok = p.Int64(64)
		case "pause_rate_key_ms":
			t.PauseRateKeyMS, ok = p.Int64(64)
		}
		return ok // false for an unknown key too
	})
}

// plainNewTaskField reads one field of a new task; prev is the batch's
// task before it, whose type and stage it mostly repeats.
func plainNewTaskField(p *plainjson.Parser, t, prev *flow.NewTask, key []byte) bool {
	var ok bool
	switch string(key) {
	case "task_type":
		t.TaskType, ok = p.StrAs(prev.TaskType)
	case "task_stage":
		t.TaskStage, ok = p.StrAs(prev.TaskStage)
	case "task_context":
		t.TaskContext, ok = p.Raw()
	case "priority":
		t.Priority, ok = p.Int()
	case "delay_ms":
		t.DelayMS, ok = p.Int64(64)
	case "unique_key":
		t.UniqueKey, ok = p.Str()
	case "sequence_key":
		t.SequenceKey, ok = p.StrAs(prev.SequenceKey)
	case "rate_key":
		t.RateKey, ok = p.StrAs(prev.RateKey)
	case "fairness_key":
		t.FairnessKey, ok = p.StrAs(prev.FairnessKey)
	}
	return ok
}
