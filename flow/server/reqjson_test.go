package server

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// stdDecode is decode on a body that is not a memBody: its
// encoding/json path, the one decodePlain stands aside for.
func stdDecode(body []byte, v any) error {
	return decode(httptest.NewRequest("POST", "/", bytes.NewReader(body)), v)
}

// agree checks decodePlain against encoding/json on body: where it accepts
// a body, encoding/json accepts it too and reads the same value.
func agree(t *testing.T, body []byte, fresh func() any) (accepted bool) {
	t.Helper()
	fast, std := fresh(), fresh()
	in := bytes.Clone(body)
	accepted = decodePlain(in[:len(in):len(in)], fast) // capacity = length: a read past the end panics
	// Nothing read may point into the body: the server reuses its buffers.
	for i := range in {
		in[i] = 'x'
	}
	if !accepted {
		if !reflect.DeepEqual(fast, fresh()) {
			t.Fatalf("declined %q but changed the value: %+v", body, fast)
		}
		return false
	}
	if err := stdDecode(body, std); err != nil {
		t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
	}
	if !reflect.DeepEqual(fast, std) {
		t.Fatalf("read %q as\n %+v\nencoding/json reads\n %+v", body, fast, std)
	}
	return true
}

func randomRequests(rng *rand.Rand, plain bool) (flow.SetTasksRequest, flow.CreateTaskRequest) {
	strs := []string{"", "a", "run", "01JABCDEFGHJKMNPQRSTVWXYZ0", "with space", "x-y_z.1"}
	if !plain {
		strs = append(strs, `q"uote`, `back\slash`, "<b>&</b>", "tab\t", "héllo")
	}
	ctxs := []string{"", `{"n":1}`, `[1,{"a":"b\"c"}]`, `"s"`, `12`, `-1.5e3`, `true`, `{"a":{"b":[]}}`}
	pick := func() string { return strs[rng.Intn(len(strs))] }
	ctx := func() json.RawMessage {
		if c := ctxs[rng.Intn(len(ctxs))]; c != "" {
			return json.RawMessage(c)
		}
		return nil
	}
	var set flow.SetTasksRequest
	for n := rng.Intn(4); n > 0; n-- {
		set.Tasks = append(set.Tasks, flow.SetTaskRequest{TaskID: pick(), Lease: pick(), Status: flow.Status(rng.Intn(7) - 1),
			TaskStage: pick(), TaskContext: ctx(), Error: pick(), DelayMS: rng.Int63n(1e12) - 5e11})
	}
	nt := func() flow.NewTask {
		return flow.NewTask{TaskType: pick(), TaskStage: pick(), TaskContext: ctx(), Priority: rng.Intn(2000) - 1000,
			DelayMS: rng.Int63n(1e6), UniqueKey: pick()}
	}
	var create flow.CreateTaskRequest
	if rng.Intn(2) == 0 {
		create.NewTask = nt()
	} else {
		for n := rng.Intn(4); n > 0; n-- {
			create.Tasks = append(create.Tasks, nt())
		}
	}
	return set, create
}

// What the Go client sends (json.Marshal of the request types) is read by
// the fast path, as encoding/json reads it; with one byte changed, the
// fast path either steps aside or still agrees with encoding/json.
func TestDecodePlainSameAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	fresh := []func() any{func() any { return new(flow.SetTasksRequest) }, func() any { return new(flow.CreateTaskRequest) }}
	accepted := 0
	for round := 0; round < 3000; round++ {
		plain := round%2 == 0
		set, create := randomRequests(rng, plain)
		for k, v := range []any{set, create} {
			body, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			ok := agree(t, body, fresh[k])
			if plain && !ok && !(k == 0 && set.Tasks == nil) {
				t.Fatalf("the plain request %s went to encoding/json", body)
			}
			if ok {
				accepted++
			}
			for m := 0; m < 4; m++ {
				mut := bytes.Clone(body)
				mut[rng.Intn(len(mut))] = "{}[]\",:0 a-\\n"[rng.Intn(13)]
				agree(t, mut, fresh[k])
			}
		}
	}
	if accepted < 2000 {
		t.Fatalf("the fast path read only %d of 6000 bodies", accepted)
	}
}

func FuzzDecodePlain(f *testing.F) {
	for _, s := range []string{`{"tasks":[{"task_id":"a","lease":"b","status":3}]}`, `{"tasks":[]}`,
		`{"task_type":"t","task_stage":"s","task_context":{"n":1}}`, `{"tasks":[{"task_type":"t","delay_ms":5,"priority":-1}]}`,
		`{"tasks":null}`, `{"tasks":[{"task_id":"a","status":1e2}]}`, `{"Tasks":[]}`, `{"tasks":[]} x`,
		`{"tasks":[{"task_id":"a","lease":"l","status":3,"task_stage":"s"},{"task_id":"b","lease":"l","status":3,"task_stage":"s"},{"task_id":"c","lease":"l\"","status":3}]}`,
		`{"tasks":[{"task_type":"t","task_stage":"s"},{"task_type":"t","task_stage":"s"},{"task_type":"tt","task_stage":""}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		agree(t, body, func() any { return new(flow.SetTasksRequest) })
		agree(t, body, func() any { return new(flow.CreateTaskRequest) })
	})
}
