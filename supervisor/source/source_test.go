package source

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

func tasks(kv ...string) []protocol.Task {
	out := []protocol.Task{}
	for i := 0; i < len(kv); i += 2 {
		t := protocol.Task{TaskID: kv[i]}
		if kv[i+1] != "" {
			t.Spec = json.RawMessage(kv[i+1])
		}
		out = append(out, t)
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     []protocol.Task
		wantErr  string
	}{
		{"json object", `{"tasks":[{"task_id":"r1","spec":{"url":"ws://x/1"}},{"task_id":"r2"}]}`, tasks("r1", `{"url":"ws://x/1"}`, "r2", ""), ""},
		{"json array", `[{"task_id":"r1","spec":"ws://x/1"}]`, tasks("r1", `"ws://x/1"`), ""},
		{"yaml", "tasks:\n  - task_id: r1\n    spec: {room: 1, tags: [a, b]}\n  - task_id: 42\n", tasks("r1", `{"room":1,"tags":["a","b"]}`, "42", ""), ""},
		{"empty document", "", []protocol.Task{}, ""},
		{"empty list", `{"tasks":[]}`, []protocol.Task{}, ""},
		{"null list", "tasks:\n", []protocol.Task{}, ""},
		{"duplicate id", "tasks:\n  - task_id: a\n  - task_id: b\n  - task_id: a\n", nil, `line 4: tasks[2].task_id: duplicate "a" (first on line 2)`},
		{"missing id", `[{"spec":1}]`, nil, "line 1: tasks[0].task_id: required"},
		{"empty id", `[{"task_id":""}]`, nil, "tasks[0].task_id: required"},
		{"id not a string", `[{"task_id":{"a":1}}]`, nil, "tasks[0].task_id: want a string"},
		{"float id", `[{"task_id":1.5}]`, nil, "task_id: want a string"},
		{"control char id", "[{\"task_id\":\"a\\u0001\"}]", nil, "control character"},
		{"long id", `[{"task_id":"` + strings.Repeat("x", MaxTaskID+1) + `"}]`, nil, "more than 256"},
		{"unknown task field", `[{"task_id":"a","room":1}]`, nil, `tasks[0]: unknown field "room"`},
		{"unknown top field", `{"task":[]}`, nil, `line 1: unknown field "task"`},
		{"no tasks field", `{}`, nil, "no tasks field"},
		{"scalar", `"rooms"`, nil, "not a scalar"},
		{"tasks not array", `{"tasks":{"a":1}}`, nil, "tasks: want an array"},
		{"element not object", `["r1"]`, nil, "tasks[0]: want an object"},
		{"syntax error", "tasks: [\n", nil, "task list: yaml"},
		{"spec with non-string keys", "- task_id: a\n  spec: {1: x, [2]: y}\n", nil, "tasks[0].spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse = %v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse = %s, want %s", show(got), show(tt.want))
			}
		})
	}
}

func show(ts []protocol.Task) string { b, _ := json.Marshal(ts); return string(b) }

func TestConfigYAML(t *testing.T) {
	in := "type: static\ntasks:\n  - task_id: r1\n    spec: {url: ws://h/1}\n  - task_id: r2\n"
	var c Config
	if err := yaml.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(c)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.List(context.Background())
	if want := tasks("r1", `{"url":"ws://h/1"}`, "r2", ""); !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %s, want %s", show(got), show(want))
	}
	// Decoding only decodes; the ids are Validate's to check.
	var bad Config
	if err := yaml.Unmarshal([]byte("type: static\ntasks:\n  - task_id: a\n  - task_id: a\n"), &bad); err != nil {
		t.Fatalf("decoding a list with a duplicate id: %v", err)
	}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "source.tasks[1].task_id: duplicate") {
		t.Fatalf("duplicate in static list: %v", err)
	}
	// Every shape problem is reported, each with its line.
	err = yaml.Unmarshal([]byte("type: static\ntasks:\n  - task_id: [a]\n  - 5\n  - {task_id: b, room: 1}\n"), &bad)
	for _, w := range []string{"line 3: source.tasks[0].task_id: want a string", "line 4: source.tasks[1]: want an object", `line 5: source.tasks[2]: unknown field "room"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("shape problems: %v, want %q", err, w)
		}
	}
}

// Every problem of a task list is reported at once, each with its line,
// not only the first.
func TestTaskProblemsTogether(t *testing.T) {
	in := "tasks:\n  - task_id: a\n  - task_id: \"\"\n  - spec: {x: 1}\n  - task_id: a\n  - task_id: \"b\\x01\"\n  - task_id: c\n"
	_, err := Parse([]byte(in))
	want := []string{
		"line 3: tasks[1].task_id: required",
		"line 4: tasks[2].task_id: required",
		`line 5: tasks[3].task_id: duplicate "a" (first on line 2)`,
		"line 6: tasks[4].task_id: ",
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Parse = %v\nwant it to contain %q", err, w)
		}
	}
	if err != nil && !strings.HasPrefix(err.Error(), "4 problems:") {
		t.Errorf("Parse = %v, want 4 problems", err)
	}
	_, err = Parse([]byte("- task_id: [a]\n- 5\n- {task_id: b, room: 1}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "3 problems:\n  line 1: tasks[0].task_id: want a string\n  line 2: tasks[1]: want an object") {
		t.Errorf("shape problems: %v", err)
	}
	c := Config{Type: "static", Tasks: tasks("", "", "a", "{", "a", "")}
	err = c.Validate()
	for _, w := range []string{"source.tasks[0].task_id: required", "source.tasks[1].spec: not valid JSON", `source.tasks[2].task_id: duplicate "a" (also source.tasks[1])`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate = %v\nwant it to contain %q", err, w)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		c       Config
		wantErr string
	}{
		{"static", Config{Type: "static", Tasks: tasks("a", "")}, ""},
		{"static empty", Config{Type: "static"}, ""},
		{"file", Config{Type: "file", Path: "/tmp/x.yaml"}, ""},
		{"http", Config{Type: "http", URL: "http://127.0.0.1:7400/rooms"}, ""},
		{"no type", Config{}, "source.type: required"},
		{"unknown type", Config{Type: "kafka"}, "source.type: unknown"},
		{"file no path", Config{Type: "file"}, "source.path: required"},
		{"file with url", Config{Type: "file", Path: "x", URL: "http://h/"}, "type file takes path"},
		{"http no url", Config{Type: "http"}, "source.url: required"},
		{"http bad scheme", Config{Type: "http", URL: "ftp://h/x"}, "source.url"},
		{"http no host", Config{Type: "http", URL: "http:///x"}, "source.url"},
		{"http with tasks", Config{Type: "http", URL: "http://h/", Tasks: tasks("a", "")}, "type http takes url"},
		{"static with path", Config{Type: "static", Path: "x"}, "type static takes tasks"},
		{"static duplicate", Config{Type: "static", Tasks: tasks("a", "", "a", "")}, "source.tasks[1].task_id: duplicate"},
		{"static empty id", Config{Type: "static", Tasks: tasks("", "")}, "source.tasks[0].task_id: required"},
		{"static bad spec", Config{Type: "static", Tasks: tasks("a", "{")}, "source.tasks[0].spec"},
		{"negative timeout", Config{Type: "http", URL: "http://h/", Timeout: -1}, "source.timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Timeout != DefaultTimeout {
					t.Fatalf("timeout default not filled: %v", c.Timeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
			if _, err := Open(tt.c); err == nil {
				t.Fatal("Open accepted a config Validate refused")
			}
		})
	}
}

// Every problem comes back at once, each a field error on its own path.
func TestValidateListsEveryProblemOnItsPath(t *testing.T) {
	c := Config{Type: "http", URL: "ftp://h/x", Path: "p", Timeout: -1}
	err := c.Validate()
	var list *confyaml.Error
	if !errors.As(err, &list) {
		t.Fatalf("Validate = %v (%T), want a *confyaml.Error", err, err)
	}
	var paths []string
	for _, p := range list.Problems {
		paths = append(paths, p.Path)
	}
	if got, want := strings.Join(paths, " "), "source.timeout source.url source"; got != want {
		t.Fatalf("paths %q, want %q (%v)", got, want, err)
	}
}

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tasks.yaml")
	s, err := Open(Config{Type: "file", Path: p})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(context.Background()); err == nil || !strings.Contains(err.Error(), "source.path") {
		t.Fatalf("missing file: %v", err)
	}
	write := func(body string) {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tasks:\n  - task_id: r1\n")
	got, err := s.List(context.Background())
	if err != nil || !reflect.DeepEqual(got, tasks("r1", "")) {
		t.Fatalf("List = %s, %v", show(got), err)
	}
	// Read again on every List: an edit shows at the next query.
	write(`[{"task_id":"r1"},{"task_id":"r2"}]`)
	got, err = s.List(context.Background())
	if err != nil || !reflect.DeepEqual(got, tasks("r1", "", "r2", "")) {
		t.Fatalf("List after edit = %s, %v", show(got), err)
	}
	write("- task_id: r1\n- task_id: r1\n")
	if _, err := s.List(context.Background()); err == nil || !strings.Contains(err.Error(), p+": line 2") {
		t.Fatalf("bad file: %v, want the path and line", err)
	}
}

func TestHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("method %s", r.Method)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tasks":[{"task_id":"room-1","spec":{"url":"http://x/rooms/room-1"}}]}`))
	})
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "spider is down", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"tasks":[{"task_id":"a"},{"task_id":"a"}]}`))
	})
	release := make(chan struct{})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	list := func(path string, timeout time.Duration) ([]protocol.Task, error) {
		s, err := Open(Config{Type: "http", URL: srv.URL + path, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return s.List(context.Background())
	}
	got, err := list("/ok", 0)
	if err != nil || !reflect.DeepEqual(got, tasks("room-1", `{"url":"http://x/rooms/room-1"}`)) {
		t.Fatalf("List = %s, %v", show(got), err)
	}
	if _, err := list("/down", 0); !errors.Is(err, ErrStatus) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "spider is down") {
		t.Fatalf("503: %v", err)
	}
	if _, err := list("/garbage", 0); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate ids: %v", err)
	}
	if _, err := list("/slow", 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "GET") {
		t.Fatalf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, _ := Open(Config{Type: "http", URL: srv.URL + "/ok"})
	if _, err := s.List(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[{"task_id":"r1","spec":{"url":"ws://x/1"}},{"task_id":"r2"}]}`,
		`[{"task_id":"r1","spec":"x"}]`,
		"tasks:\n  - task_id: r1\n    spec: {room: 1}\n",
		"- task_id: &a x\n- task_id: *a\n",
		"tasks: [\n", "", "null", `{"tasks":null}`, "- task_id: 1\n  spec: [1, 2.5, true, null]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Parse(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, tk := range got {
			if checkID(tk.TaskID) != nil || seen[tk.TaskID] {
				t.Fatalf("Parse accepted bad or duplicate id %q", tk.TaskID)
			}
			seen[tk.TaskID] = true
			if len(tk.Spec) > 0 && !json.Valid(tk.Spec) {
				t.Fatalf("spec %q is not JSON", tk.Spec)
			}
		}
		// What Parse accepts survives a JSON round trip unchanged.
		b, _ := json.Marshal(map[string]any{"tasks": got})
		again, err := Parse(b)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
		if len(again) != len(got) {
			t.Fatalf("round trip changed the list: %s vs %s", show(got), show(again))
		}
	})
}
