package client

import (
	"bytes"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/internal/plainjson"
)

// parseHold reads a hold answer as the server writes it, without
// reflection: decoding hold answers was the largest piece of the worker
// SDK's CPU (encoding/json reflects over every field of every task). It
// takes only the plain shape: no whitespace but after the end, known keys
// spelt exactly, strings of printable ASCII without escapes, integers,
// contexts that are valid JSON. Anything else returns false, and the
// caller decodes with encoding/json, which then decides. On true, out holds
// what json.Unmarshal would have put there.
func parseHold(data []byte, out *flow.HoldTasksResponse) bool {
	p := holdParser{Parser: plainjson.Parser{B: data}}
	if !p.Lit(`{"tasks":`) {
		return false
	}
	var tasks []flow.Task
	if !p.Lit("null") {
		// Every task begins so; a context holding the same bytes only
		// makes the capacity generous.
		tasks = make([]flow.Task, 0, bytes.Count(data, []byte(`{"task_id":`)))
		if !p.Array(func() bool {
			var t flow.Task
			if !p.task(&t) {
				return false
			}
			tasks = append(tasks, t)
			p.prev = t
			return true
		}) {
			return false
		}
	}
	if !p.Lit("}") {
		return false
	}
	if !p.End() {
		return false
	}
	out.Tasks = tasks
	return true
}

// holdParser reads a hold answer's parts. The tasks of one answer share
// most of their strings and times (one type, stage, owner and lease; one
// claim's lease expiry and modification time; one batch's creation
// time): each is read as the task before's when its text is the same,
// without a new string or a parse.
type holdParser struct {
	plainjson.Parser
	prev                       flow.Task
	order, lease, create, modi plainjson.TimeMemo
}

func (p *holdParser) task(t *flow.Task) bool {
	return p.Object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "task_id":
			t.TaskID, ok = p.Str()
		case "task_type":
			t.TaskType, ok = p.StrAs(p.prev.TaskType)
		case "task_stage":
			t.TaskStage, ok = p.StrAs(p.prev.TaskStage)
		case "status":
			var n int
			n, ok = p.Int()
			t.Status = flow.Status(n)
		case "task_context":
			t.TaskContext, ok = p.Raw()
		case "priority":
			t.Priority, ok = p.Int()
		case "order_time":
			t.OrderTime, ok = p.TimeAs(&p.order)
		case "crt_retry_num":
			t.CrtRetryNum, ok = p.Int()
		case "max_retry_num":
			t.MaxRetryNum, ok = p.Int()
		case "owner":
			t.Owner, ok = p.StrAs(p.prev.Owner)
		case "lease":
			t.Lease, ok = p.StrAs(p.prev.Lease)
		case "lease_expiry":
			var le time.Time
			le, ok = p.TimeAs(&p.lease)
			t.LeaseExpiry = &le
		case "schedule_log":
			t.ScheduleLog, ok = p.log()
		case "create_time":
			t.CreateTime, ok = p.TimeAs(&p.create)
		case "modify_time":
			t.ModifyTime, ok = p.TimeAs(&p.modi)
		case "unique_key":
			t.UniqueKey, ok = p.StrAs(p.prev.UniqueKey)
		case "sequence_key":
			t.SequenceKey, ok = p.StrAs(p.prev.SequenceKey)
		case "rate_key":
			t.RateKey, ok = p.StrAs(p.prev.RateKey)
		case "fairness_key":
			t.FairnessKey, ok = p.StrAs(p.prev.FairnessKey)
		}
		return ok // false for an unknown key too
	})
}

func (p *holdParser) log() ([]flow.LogEntry, bool) {
	l := make([]flow.LogEntry, 0, 4)
	ok := p.Array(func() bool {
		var e flow.LogEntry
		if !p.Object(func(key []byte) bool {
			var ok bool
			switch string(key) {
			case "at":
				e.At, ok = p.Time()
			case "worker":
				e.Worker, ok = p.Str()
			case "stage":
				e.Stage, ok = p.Str()
			case "event":
				e.Event, ok = p.Str()
			case "error":
				e.Error, ok = p.Str()
			}
			return ok
		}) {
			return false
		}
		l = append(l, e)
		return true
	})
	if !ok {
		return nil, false
	}
	return l, true
}
