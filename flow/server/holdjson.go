package server

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// heldAnswer is a hold's answer as the store gave it: written as the
// flow.HoldTasksResponse of its tasks, which are not copied out of their
// records for it.
type heldAnswer []flow.Record

// response is the answer as its API type, for encoding/json.
func (h heldAnswer) response() flow.HoldTasksResponse {
	out := flow.HoldTasksResponse{Tasks: make([]flow.Task, len(h))}
	for i := range h {
		out.Tasks[i] = h[i].Task
	}
	return out
}

// appendHeldJSON appends h as json.NewEncoder(w).Encode(h.response())
// writes it, byte for byte (HTML escaping, compacted contexts, the
// trailing newline), without reflection: hold answers are most of what
// the server encodes, and encoding/json's reflective encoder was about a
// tenth of the process's CPU in the end-to-end benchmark. Values it does
// not write the same way by hand (strings and contexts that need escaping
// or compacting) go through encoding/json one at a time; ok is false only
// where encoding/json would fail too (a time it cannot encode, a context
// that is not JSON), and the caller then lets encoding/json answer.
func appendHeldJSON(b []byte, h heldAnswer) (_ []byte, ok bool) {
	b = append(b, `{"tasks":[`...)
	for i := range h {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = appendTaskJSON(b, &h[i].Task); !ok {
			return b, false
		}
	}
	return append(b, "]}\n"...), true
}

// appendTaskJSON writes the fields in flow.Task's declaration order with
// its omitempty rules.
func appendTaskJSON(b []byte, t *flow.Task) (_ []byte, ok bool) {
	b = append(b, `{"task_id":`...)
	b = appendJSONString(b, t.TaskID)
	b = append(b, `,"task_type":`...)
	b = appendJSONString(b, t.TaskType)
	b = append(b, `,"task_stage":`...)
	b = appendJSONString(b, t.TaskStage)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(t.Status), 10)
	if len(t.TaskContext) > 0 {
		b = append(b, `,"task_context":`...)
		if b, ok = appendRawJSON(b, t.TaskContext); !ok {
			return b, false
		}
	}
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(t.Priority), 10)
	b = append(b, `,"order_time":`...)
	if b, ok = appendJSONTime(b, t.OrderTime); !ok {
		return b, false
	}
	b = append(b, `,"crt_retry_num":`...)
	b = strconv.AppendInt(b, int64(t.CrtRetryNum), 10)
	b = append(b, `,"max_retry_num":`...)
	b = strconv.AppendInt(b, int64(t.MaxRetryNum), 10)
	if t.Owner != "" {
		b = append(b, `,"owner":`...)
		b = appendJSONString(b, t.Owner)
	}
	if t.Lease != "" {
		b = append(b, `,"lease":`...)
		b = appendJSONString(b, t.Lease)
	}
	if t.LeaseExpiry != nil {
		b = append(b, `,"lease_expiry":`...)
		if b, ok = appendJSONTime(b, *t.LeaseExpiry); !ok {
			return b, false
		}
	}
	if len(t.ScheduleLog) > 0 {
		b = append(b, `,"schedule_log":[`...)
		for i, e := range t.ScheduleLog {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"at":`...)
			if b, ok = appendJSONTime(b, e.At); !ok {
				return b, false
			}
			if e.Worker != "" {
				b = append(b, `,"worker":`...)
				b = appendJSONString(b, e.Worker)
			}
			if e.Stage != "" {
				b = append(b, `,"stage":`...)
				b = appendJSONString(b, e.Stage)
			}
			b = append(b, `,"event":`...)
			b = appendJSONString(b, e.Event)
			if e.Error != "" {
				b = append(b, `,"error":`...)
				b = appendJSONString(b, e.Error)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"create_time":`...)
	if b, ok = appendJSONTime(b, t.CreateTime); !ok {
		return b, false
	}
	b = append(b, `,"modify_time":`...)
	if b, ok = appendJSONTime(b, t.ModifyTime); !ok {
		return b, false
	}
	for _, k := range [...]struct{ name, v string }{{`,"unique_key":`, t.UniqueKey}, {`,"sequence_key":`, t.SequenceKey}, {`,"rate_key":`, t.RateKey}, {`,"fairness_key":`, t.FairnessKey}} {
		if k.v != "" {
			b = append(b, k.name...)
			b = appendJSONString(b, k.v)
		}
	}
	return append(b, '}'), true
}

// plainJSON reports whether encoding/json writes c unchanged: printable
// ASCII with nothing it escapes (quote, backslash, and <, >, & for HTML).
// space says whether a space counts as plain (in a string it does; in a
// context encoding/json compacts it away, and a space inside a context's
// string is not told apart here).
func plainJSON[T ~string | ~[]byte](c T, space bool) bool {
	for i := 0; i < len(c); i++ {
		switch ch := c[i]; {
		case ch < 0x20, ch > 0x7e, ch == '<', ch == '>', ch == '&':
			return false
		case ch == ' ' && !space:
			return false
		}
	}
	return true
}

// appendSetAnswer appends r as json.NewEncoder(w).Encode(r) writes it
// (set_tasks answers are the other answer a busy server writes most).
func appendSetAnswer(b []byte, r flow.SetTasksResponse) []byte {
	b = append(b, `{"results":`...)
	if r.Results == nil {
		return append(b, "null}\n"...)
	}
	b = append(b, '[')
	for i, res := range r.Results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"task_id":`...)
		b = appendJSONString(b, res.TaskID)
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(res.Code), 10)
		if res.Error != "" {
			b = append(b, `,"error":`...)
			b = appendJSONString(b, res.Error)
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendCreateAnswer appends r as json.NewEncoder(w).Encode(r) writes it.
func appendCreateAnswer(b []byte, r flow.CreateTaskResponse) []byte {
	b = append(b, `{"task_ids":`...)
	if r.TaskIDs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, id := range r.TaskIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, id)
		}
		b = append(b, ']')
	}
	if r.Existing {
		b = append(b, `,"existing":true`...)
	}
	if len(r.ExistingIndex) > 0 {
		b = append(b, `,"existing_index":[`...)
		for i, n := range r.ExistingIndex {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

func appendJSONString(b []byte, s string) []byte {
	if plainJSON(s, true) {
		for i := 0; i < len(s); i++ {
			if s[i] == '"' || s[i] == '\\' {
				goto slow
			}
		}
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
slow:
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// appendRawJSON writes a context as encoding/json writes a RawMessage.
// Contexts were checked as JSON when written (flow.ValidateContext), so a
// plain one is copied; anything else is compacted and escaped by
// encoding/json, which also refuses one that is not JSON.
func appendRawJSON(b []byte, c json.RawMessage) ([]byte, bool) {
	if plainJSON(c, false) {
		return append(b, c...), true
	}
	q, err := json.Marshal(c)
	if err != nil {
		return b, false
	}
	return append(b, q...), true
}

// appendJSONTime writes t as time.Time.MarshalJSON does; false where that
// fails (a year outside 0-9999, an offset it cannot write).
func appendJSONTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}
