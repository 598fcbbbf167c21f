package client

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
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
	p := holdParser{b: data}
	if !p.lit(`{"tasks":`) {
		return false
	}
	var tasks []flow.Task
	if !p.lit("null") {
		tasks = make([]flow.Task, 0, 16)
		if !p.array(func() bool {
			var t flow.Task
			if !p.task(&t) {
				return false
			}
			tasks = append(tasks, t)
			return true
		}) {
			return false
		}
	}
	if !p.lit("}") {
		return false
	}
	for _, c := range p.b[p.i:] {
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	out.Tasks = tasks
	return true
}

type holdParser struct {
	b []byte
	i int
}

func (p *holdParser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str reads a string of printable ASCII without escapes.
func (p *holdParser) str() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := string(p.b[p.i+1 : j])
			p.i = j + 1
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// int reads a JSON integer (no fraction, no exponent) that fits an int.
func (p *holdParser) int() (int, bool) {
	j := p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	d := j
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == d || (p.b[d] == '0' && j > d+1) {
		return 0, false
	}
	if j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:j]), 10, 0)
	if err != nil {
		return 0, false
	}
	p.i = j
	return int(n), true
}

// time reads a string as time.Time.UnmarshalJSON does.
func (p *holdParser) time() (time.Time, bool) {
	start := p.i
	if _, ok := p.str(); !ok {
		return time.Time{}, false
	}
	var t time.Time
	if t.UnmarshalJSON(p.b[start:p.i]) != nil {
		return time.Time{}, false
	}
	return t, true
}

// raw reads an object, array, string or number as it stands (a context)
// and checks it is JSON.
func (p *holdParser) raw() (json.RawMessage, bool) {
	start, depth, inStr := p.i, 0, false
	j := p.i
	for ; j < len(p.b); j++ {
		c := p.b[j]
		if inStr {
			switch c {
			case '\\':
				j++
			case '"':
				inStr = false
			}
			if depth == 0 && !inStr {
				j++
				break
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			continue
		case '{', '[':
			depth++
			continue
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, false
			}
			if depth == 0 {
				j++
				goto end
			}
			continue
		case ',':
			if depth == 0 {
				goto end
			}
		}
	}
end:
	v := p.b[start:j]
	// null leaves a context empty in encoding/json's hands; let it.
	if len(v) == 0 || v[0] == 'n' || !json.Valid(v) {
		return nil, false
	}
	p.i = j
	return append(json.RawMessage(nil), v...), true
}

// array reads a JSON array, elem reading each element.
func (p *holdParser) array(elem func() bool) bool {
	if !p.lit("[") {
		return false
	}
	if p.lit("]") {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.lit("]") {
			return true
		}
		if !p.lit(",") {
			return false
		}
	}
}

// object reads a JSON object, field reading each member's value after
// its key; field reports false for a key it does not know or a bad value.
func (p *holdParser) object(field func(key string) bool) bool {
	if !p.lit("{") {
		return false
	}
	for first := true; !p.lit("}"); first = false {
		if !first && !p.lit(",") {
			return false
		}
		key, ok := p.str()
		if !ok || !p.lit(":") || !field(key) {
			return false
		}
	}
	return true
}

func (p *holdParser) task(t *flow.Task) bool {
	return p.object(func(key string) bool {
		var ok bool
		switch key {
		case "task_id":
			t.TaskID, ok = p.str()
		case "task_type":
			t.TaskType, ok = p.str()
		case "task_stage":
			t.TaskStage, ok = p.str()
		case "status":
			var n int
			n, ok = p.int()
			t.Status = flow.Status(n)
		case "task_context":
			t.TaskContext, ok = p.raw()
		case "priority":
			t.Priority, ok = p.int()
		case "order_time":
			t.OrderTime, ok = p.time()
		case "crt_retry_num":
			t.CrtRetryNum, ok = p.int()
		case "max_retry_num":
			t.MaxRetryNum, ok = p.int()
		case "owner":
			t.Owner, ok = p.str()
		case "lease":
			t.Lease, ok = p.str()
		case "lease_expiry":
			var le time.Time
			le, ok = p.time()
			t.LeaseExpiry = &le
		case "schedule_log":
			t.ScheduleLog, ok = p.log()
		case "create_time":
			t.CreateTime, ok = p.time()
		case "modify_time":
			t.ModifyTime, ok = p.time()
		case "unique_key":
			t.UniqueKey, ok = p.str()
		}
		return ok // false for an unknown key too
	})
}

func (p *holdParser) log() ([]flow.LogEntry, bool) {
	l := make([]flow.LogEntry, 0, 4)
	ok := p.array(func() bool {
		var e flow.LogEntry
		if !p.object(func(key string) bool {
			var ok bool
			switch key {
			case "at":
				e.At, ok = p.time()
			case "worker":
				e.Worker, ok = p.str()
			case "stage":
				e.Stage, ok = p.str()
			case "event":
				e.Event, ok = p.str()
			case "error":
				e.Error, ok = p.str()
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
