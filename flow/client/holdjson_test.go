package client

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

func randomHold(rng *rand.Rand, plain bool) flow.HoldTasksResponse {
	strs := []string{"", "a", "run", "01JABCDEFGHJKMNPQRSTVWXYZ0", "with space", "x-y_z.1"}
	if !plain {
		strs = append(strs, `q"uote`, `back\slash`, "<b>&</b>", "tab\t", "héllo", "bad\xff")
	}
	ctxs := []string{"", `{"n":1}`, `[1,{"a":"b\"c"}]`, `"s"`, `12`, `-1.5e3`, `true`, `{"a":{"b":[]}}`}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -8*3600)}
	pick := func() string { return strs[rng.Intn(len(strs))] }
	var used []time.Time // an answer's tasks share times, which the reader reuses
	tm := func() time.Time {
		if len(used) > 0 && rng.Intn(2) == 0 {
			return used[rng.Intn(len(used))]
		}
		t := time.Unix(rng.Int63n(4e9), rng.Int63n(1e9)*int64(rng.Intn(2))).In(zones[rng.Intn(len(zones))])
		used = append(used, t)
		return t
	}
	var r flow.HoldTasksResponse
	if rng.Intn(30) != 0 {
		r.Tasks = make([]flow.Task, rng.Intn(4))
	}
	for i := range r.Tasks {
		t := flow.Task{TaskID: pick(), TaskType: pick(), TaskStage: pick(), Status: flow.Status(rng.Intn(7) - 1),
			Priority: rng.Intn(2000) - 1000, OrderTime: tm(), CrtRetryNum: rng.Intn(5), MaxRetryNum: rng.Intn(5),
			Owner: pick(), Lease: pick(), CreateTime: tm(), ModifyTime: tm(), UniqueKey: pick()}
		if c := ctxs[rng.Intn(len(ctxs))]; c != "" {
			t.TaskContext = json.RawMessage(c)
		}
		if rng.Intn(2) == 0 {
			le := tm()
			t.LeaseExpiry = &le
		}
		for n := rng.Intn(4); n > 0; n-- {
			t.ScheduleLog = append(t.ScheduleLog, flow.LogEntry{At: tm(), Worker: pick(), Stage: pick(), Event: pick(), Error: pick()})
		}
		r.Tasks[i] = t
	}
	return r
}

// TestParseHoldSameAsEncodingJSON: what the fast reader accepts it reads
// exactly as json.Unmarshal does; it accepts every plain answer; and for
// answers with one byte changed, it either steps aside or agrees with
// encoding/json (never accepts what encoding/json refuses).
func TestParseHoldSameAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 3000; round++ {
		plain := round%2 == 0
		r := randomHold(rng, plain)
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(r); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		check := func(data []byte, mustParse bool) {
			t.Helper()
			var want, got flow.HoldTasksResponse
			wantErr := json.Unmarshal(data, &want)
			in := bytes.Clone(data)
			ok := parseHold(in, &got)
			// Nothing read may point into the input: the client reuses its
			// answer buffers.
			for i := range in {
				in[i] = 'x'
			}
			if mustParse && !ok {
				t.Fatalf("round %d: plain answer not read: %s", round, data)
			}
			if !ok {
				return
			}
			if wantErr != nil {
				t.Fatalf("round %d: read what encoding/json refuses (%v): %s", round, wantErr, data)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: %s\ngot  %+v\nwant %+v", round, data, got, want)
			}
		}
		check(data, plain)
		for k := 0; k < 5 && len(data) > 0; k++ {
			m := bytes.Clone(data)
			m[rng.Intn(len(m))] = "{}[]\",:0a-.e \\n"[rng.Intn(15)]
			check(m, false)
		}
	}
}
