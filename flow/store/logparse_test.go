package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// FuzzParseLog: parseLog gives exactly what json.Unmarshal gives, value and
// error alike, for any input.
func FuzzParseLog(f *testing.F) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	full := flow.MarshalLog([]flow.LogEntry{{At: at, Stage: "s", Event: "created"}, {At: at, Worker: "w1", Stage: "s", Event: "retry", Error: "boom"}})
	for _, s := range []string{
		string(full),
		`[]`, ` [ ] `, `null`, ``, `[`, `[{}]`, `{}`, `[{"at": "2030-01-02T03:04:05.123456Z", "event": "held", "stage": "run", "worker": "w"}]`,
		`[{"at":"2030-01-02T03:04:05Z","event":"held"},{"at":"2030-01-02T03:04:06+02:00","event":"pending"}]`,
		`[{"AT":"2030-01-02T03:04:05Z"}]`, `[{"at":"2030-01-02T24:04:05Z"}]`, `[{"at":"x"}]`, `[{"event":"a\"b"}]`,
		`[{"event":"é"}]`, "[{\"event\":\"\xff\"}]", `[{"event":1}]`, `[{"event":null}]`, `[{"other":"x"}]`,
		`[{"event":"a","event":"b"}]`, `[{"event":"a"}] x`, `[{"event":"a"},]`, `[{"event":"a",}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := parseLog(b)
		var want []flow.LogEntry
		werr := json.Unmarshal(b, &want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: err %v, json.Unmarshal err %v", b, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got  %#v\n want %#v", b, got, want)
		}
	})
}

// The logs the databases return take the fast path.
func TestParseLogFastOnStoredShapes(t *testing.T) {
	for _, s := range []string{
		`[{"at": "2030-01-02T03:04:05.123456Z", "event": "created", "stage": "run"}, {"at": "2030-01-02T03:04:05.2Z", "event": "held", "stage": "run", "worker": "w"}]`, // PostgreSQL jsonb
		`[{"at":"2030-01-02T03:04:05.123456Z","stage":"run","event":"created"}]`,                                                                                        // Go, SQLite
		`[]`,
	} {
		if _, ok := parseLogFast([]byte(s)); !ok {
			t.Errorf("%s took the slow path", s)
		}
	}
}

func BenchmarkParseLog(b *testing.B) {
	s := []byte(`[{"at": "2030-01-02T03:04:05.123456Z", "event": "created", "stage": "run"}, {"at": "2030-01-02T03:04:05.2Z", "event": "held", "stage": "run", "worker": "w"}]`)
	b.Run("parseLog", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseLog(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		for b.Loop() {
			var out []flow.LogEntry
			if err := json.Unmarshal(s, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
