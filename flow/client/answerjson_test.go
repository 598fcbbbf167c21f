package client

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// agreeAnswer checks parseAnswer against json.Unmarshal on data: where it
// accepts data, encoding/json accepts it too and reads the same value.
func agreeAnswer(t *testing.T, data []byte, fresh func() any) bool {
	t.Helper()
	fast, std := fresh(), fresh()
	in := bytes.Clone(data)
	accepted := parseAnswer(in[:len(in):len(in)], fast) // capacity = length: a read past the end panics
	// Nothing read may point into the input: the client reuses its buffers.
	for i := range in {
		in[i] = 'x'
	}
	if !accepted {
		if !reflect.DeepEqual(fast, fresh()) {
			t.Fatalf("declined %q but changed the value: %+v", data, fast)
		}
		return false
	}
	if err := json.Unmarshal(data, std); err != nil {
		t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
	}
	if !reflect.DeepEqual(fast, std) {
		t.Fatalf("read %q as\n %+v\nencoding/json reads\n %+v", data, fast, std)
	}
	return true
}

var answerTypes = []func() any{func() any { return new(flow.SetTasksResponse) }, func() any { return new(flow.CreateTaskResponse) }}

// fuzzedAnswers adds hold answers, whose reader has its own test against
// encoding/json (TestParseHoldSameAsEncodingJSON).
var fuzzedAnswers = append(answerTypes[:len(answerTypes):len(answerTypes)], func() any { return new(flow.HoldTasksResponse) })

// The answers the server writes are read as encoding/json reads them,
// plain ones by the fast path; with a byte changed, the fast path steps
// aside or still agrees.
func TestParseAnswerSameAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	plainStrs := []string{"", "01JABCDEFGHJKMNPQRSTVWXYZ0", "lease expired"}
	allStrs := append(plainStrs[:3:3], `q"uote`, "héllo", "<b>")
	accepted := 0
	for round := 0; round < 3000; round++ {
		plain := round%2 == 0
		strs := allStrs
		if plain {
			strs = plainStrs
		}
		pick := func() string { return strs[rng.Intn(len(strs))] }
		set := flow.SetTasksResponse{Results: make([]flow.SetResult, rng.Intn(5))}
		for i := range set.Results {
			set.Results[i] = flow.SetResult{TaskID: pick(), Code: []int{200, 400, 404, 409}[rng.Intn(4)], Error: pick()}
		}
		create := flow.CreateTaskResponse{TaskIDs: make([]string, rng.Intn(5)), Existing: rng.Intn(3) == 0}
		for i := range create.TaskIDs {
			create.TaskIDs[i] = pick()
		}
		if rng.Intn(3) == 0 {
			create.ExistingIndex = []int{rng.Intn(1000), rng.Intn(1000)}
		}
		for k, v := range []any{set, create} {
			var buf bytes.Buffer
			if err := json.NewEncoder(&buf).Encode(v); err != nil {
				t.Fatal(err)
			}
			ok := agreeAnswer(t, buf.Bytes(), answerTypes[k])
			if plain && !ok {
				t.Fatalf("the plain answer %s went to encoding/json", buf.Bytes())
			}
			if ok {
				accepted++
			}
			for m := 0; m < 4; m++ {
				mut := bytes.Clone(buf.Bytes())
				mut[rng.Intn(len(mut))] = "{}[]\",:0 a-\\nt"[rng.Intn(14)]
				agreeAnswer(t, mut, answerTypes[k])
			}
		}
	}
	if accepted < 3000 {
		t.Fatalf("the fast path read only %d of 6000 answers", accepted)
	}
}

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{`{"results":[{"task_id":"a","code":200}]}`, `{"results":null}`, `{"task_ids":["a","b"],"existing":true,"existing_index":[1]}`,
		`{"task_ids":[]}`, `{"task_ids":null}`, `{"existing":false}`, `{"results":[{"code":1e2}]}`,
		`{"tasks":[{"task_id":"a","task_context":{"n":1},"schedule_log":[{"at":"2026-11-25T00:00:00Z","event":"held"}]}]}`,
		`{"tasks":[{"task_context":"0\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, fresh := range fuzzedAnswers {
			agreeAnswer(t, data, fresh)
		}
	})
}
