package server

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// TestHoldJSONSameBytes: the hand-written hold answer is byte for byte what
// encoding/json's Encoder writes, for random tasks with every optional
// field present or absent and strings and contexts that need escaping.
func TestHoldJSONSameBytes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	strs := []string{"", "a", "run", "01JABCDEFGHJKMNPQRSTVWXYZ0", "with space", `q"uote`, `back\slash`, "<b>&amp;</b>",
		"tab\there", "nl\n", "\x00\x1f", "héllo", "\u2028\u2029", "bad\xffutf8", "emoji 😀", "ctl\x7f"}
	ctxs := []string{"", `{"n":1}`, `{"n": 1}`, "{\n \"a\" : [1, 2]\n}", `"<tag>&"`, `{"s":"a b"}`, `[1,2,3]`, `null`, `"é"`,
		`{"u":"\u2028"}`, `{"e":"\"\\"}`, `1e10`, `true`}
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -8*3600)}
	pick := func() string { return strs[rng.Intn(len(strs))] }
	tm := func() time.Time {
		return time.Unix(rng.Int63n(4e9), rng.Int63n(1e9)*int64(rng.Intn(2))).In(zones[rng.Intn(len(zones))])
	}
	for round := 0; round < 2000; round++ {
		r := flow.HoldTasksResponse{Tasks: make([]flow.Task, rng.Intn(4))}
		for i := range r.Tasks {
			task := flow.Task{TaskID: pick(), TaskType: pick(), TaskStage: pick(), Status: flow.Status(rng.Intn(7) - 1),
				Priority: rng.Intn(2000) - 1000, OrderTime: tm(), CrtRetryNum: rng.Intn(5), MaxRetryNum: rng.Intn(5),
				Owner: pick(), Lease: pick(), CreateTime: tm(), ModifyTime: tm(), UniqueKey: pick()}
			if c := ctxs[rng.Intn(len(ctxs))]; c != "" {
				task.TaskContext = json.RawMessage(c)
			}
			if rng.Intn(2) == 0 {
				le := tm()
				task.LeaseExpiry = &le
			}
			for n := rng.Intn(4); n > 0; n-- {
				task.ScheduleLog = append(task.ScheduleLog, flow.LogEntry{At: tm(), Worker: pick(), Stage: pick(), Event: pick(), Error: pick()})
			}
			r.Tasks[i] = task
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(r); err != nil {
			t.Fatal(err)
		}
		// The records' own fields (retry intervals) stay out of the answer.
		if got, ok := appendHeldJSON(nil, held(r.Tasks)); !ok || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("round %d: ok %v\ngot  %s\nwant %s", round, ok, got, want.Bytes())
		}
	}
}

// TestHoldJSONRefusesWhatEncodingJSONRefuses: a time encoding/json cannot
// write and a context that is not JSON make the fast path step aside.
func TestHoldJSONRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for name, task := range map[string]flow.Task{
		"year 10000":             {OrderTime: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"bad context":            {TaskContext: json.RawMessage(`{"a":`)},
		"bad context with space": {TaskContext: json.RawMessage(`{"a": `)},
	} {
		r := flow.HoldTasksResponse{Tasks: []flow.Task{task}}
		_, encErr := json.Marshal(r)
		_, ok := appendHeldJSON(nil, held(r.Tasks))
		if name == "bad context" {
			// Contexts are checked when written; a plain one is copied.
			if encErr == nil {
				t.Fatalf("%s: encoding/json accepted it", name)
			}
			continue
		}
		if ok || encErr == nil {
			t.Errorf("%s: fast path ok %v, encoding/json error %v; want both to refuse", name, ok, encErr)
		}
	}
}

// held makes a hold's records of tasks.
func held(tasks []flow.Task) heldAnswer {
	h := make(heldAnswer, len(tasks))
	for i := range h {
		h[i] = flow.Record{Task: tasks[i], RetryIntervalMS: int64(i + 1), MaxRetryIntervalMS: 99}
	}
	return h
}

func BenchmarkHoldJSON(b *testing.B) {
	now := time.Now().UTC()
	le := now.Add(time.Minute)
	r := flow.HoldTasksResponse{Tasks: make([]flow.Task, 500)}
	for i := range r.Tasks {
		r.Tasks[i] = flow.Task{TaskID: "01JABCDEFGHJKMNPQRSTVWXYZ0", TaskType: "bench", TaskStage: "work", Status: flow.StatusProcessing,
			TaskContext: json.RawMessage(`{"n":12345}`), OrderTime: now, Owner: "worker-1", Lease: "0123456789abcdef", LeaseExpiry: &le,
			ScheduleLog: []flow.LogEntry{{At: now, Worker: "worker-1", Stage: "work", Event: "held"}}, CreateTime: now, ModifyTime: now}
	}
	b.Run("encoding/json", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var buf bytes.Buffer
			json.NewEncoder(&buf).Encode(r)
		}
	})
	b.Run("append", func(b *testing.B) {
		h := held(r.Tasks)
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf, _ = appendHeldJSON(buf[:0], h)
		}
	})
}

// set_tasks and create_task answers, written by hand, are byte for byte
// what encoding/json's Encoder writes, strings that need escaping included.
func TestAnswersSameBytes(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	strs := []string{"", "01JABCDEFGHJKMNPQRSTVWXYZ0", "lease expired", `q"uote`, `back\slash`, "<b>&</b>", "tab\t", "héllo", "bad\xff", "\u2028"}
	pick := func() string { return strs[rng.Intn(len(strs))] }
	for round := 0; round < 2000; round++ {
		var set flow.SetTasksResponse
		if rng.Intn(20) != 0 {
			set.Results = make([]flow.SetResult, rng.Intn(5))
		}
		for i := range set.Results {
			set.Results[i] = flow.SetResult{TaskID: pick(), Code: []int{200, 400, 404, 409, -1}[rng.Intn(5)], Error: pick()}
		}
		var create flow.CreateTaskResponse
		if rng.Intn(20) != 0 {
			create.TaskIDs = make([]string, rng.Intn(5))
		}
		for i := range create.TaskIDs {
			create.TaskIDs[i] = pick()
		}
		create.Existing = rng.Intn(3) == 0
		if rng.Intn(3) == 0 {
			create.ExistingIndex = make([]int, rng.Intn(3))
			for i := range create.ExistingIndex {
				create.ExistingIndex[i] = rng.Intn(1000) - 1
			}
		}
		for _, c := range []struct {
			v   any
			got []byte
		}{{set, appendSetAnswer(nil, set)}, {create, appendCreateAnswer(nil, create)}} {
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(c.v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.got, want.Bytes()) {
				t.Fatalf("%+v:\n got %s\nwant %s", c.v, c.got, want.Bytes())
			}
		}
	}
}
