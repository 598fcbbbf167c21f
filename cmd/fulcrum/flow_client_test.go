package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/server"
)

func TestParseTaskLines(t *testing.T) {
	big := `{"task_type":"t","task_stage":"s","task_context":"` + strings.Repeat("x", flow.MaxContextBytes) + `"}`
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{"two tasks and a blank line", "{\"task_type\":\"a\",\"task_stage\":\"s\"}\n\n{\"task_type\":\"b\",\"task_stage\":\"s\",\"task_context\":{\"k\":1},\"priority\":2,\"delay_ms\":5}\n", 2, ""},
		{"empty input", "", 0, ""},
		{"bad JSON names its line", "{\"task_type\":\"a\",\"task_stage\":\"s\"}\n{nope}\n", 0, "line 2"},
		{"missing type", `{"task_stage":"s"}`, 0, "line 1: task_type is missing"},
		{"missing stage", `{"task_type":"t"}`, 0, "line 1: task_stage is missing"},
		{"unknown field", `{"task_type":"t","task_stage":"s","stage":"x"}`, 0, `line 1: json: unknown field "stage"`},
		{"two values on a line", `{"task_type":"t","task_stage":"s"} {"task_type":"t","task_stage":"s"}`, 0, "line 1: more than one JSON value"},
		{"context too large", big, 0, "line 1: task_context is"},
		{"negative delay", `{"task_type":"t","task_stage":"s","delay_ms":-1}`, 0, "line 1: delay_ms -1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTaskLines(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if got != nil {
					t.Fatalf("got %d tasks with an error; want none", len(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("got %d tasks, want %d", len(got), tc.want)
			}
		})
	}
}

func FuzzParseTaskLines(f *testing.F) {
	f.Add("{\"task_type\":\"a\",\"task_stage\":\"s\",\"task_context\":{\"k\":[1,2]}}\n")
	f.Add("{\"task_type\":\"a\"}\n{")
	f.Add("\n\n  \n")
	f.Add(`{"task_type":"a","task_stage":"s","delay_ms":-5}`)
	f.Fuzz(func(t *testing.T, in string) {
		tasks, err := parseTaskLines(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, tk := range tasks {
			if tk.TaskType == "" || tk.TaskStage == "" || tk.DelayMS < 0 || len(tk.TaskContext) > flow.MaxContextBytes {
				t.Fatalf("task %d passed validation but is invalid: %+v", i, tk)
			}
		}
	})
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want flow.Status
		ok   bool
	}{
		{"pending", flow.StatusPending, true}, {"SUCCESS", flow.StatusSuccess, true}, {"4", flow.StatusFailed, true},
		{"5", flow.StatusCancelled, true}, {"done", 0, false}, {"0", 0, false}, {"", 0, false},
	} {
		got, err := parseStatus(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseStatus(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// runFlow runs `fulcrum flow args...` with stdin and returns stdout.
func runFlow(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"flow"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestFlowClientCommands(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(t.TempDir(), "flow.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "http://" + s.Addr()
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RegisterTask(ctx, flow.TaskType{TaskType: "cli", ScheduleLimit: 5, ScheduleIntervalMS: 100,
		MaxProcessingMS: 1000, MaxRetryNum: 1, RetryIntervalMS: 10, MaxRetryIntervalMS: 10}); err != nil {
		t.Fatal(err)
	}

	out, err := runFlow(t, "", "submit", "cli", "fetch", "--context", `{"url":"x"}`, "--priority", "2", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	got, err := c.GetTask(ctx, id)
	if err != nil || got.TaskStage != "fetch" || string(got.TaskContext) != `{"url":"x"}` || got.Priority != 2 {
		t.Fatalf("submitted task = %+v, %v", got, err)
	}

	lines := "{\"task_type\":\"cli\",\"task_stage\":\"a\"}\n{\"task_type\":\"cli\",\"task_stage\":\"b\",\"task_context\":{\"n\":2}}\n"
	out, err = runFlow(t, lines, "submit", "--file", "-", "--batch", "1", "-o", "json", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	var created flow.CreateTaskResponse
	if err := json.Unmarshal([]byte(out), &created); err != nil || len(created.TaskIDs) != 2 {
		t.Fatalf("submit --file -o json printed %q (%v)", out, err)
	}

	out, err = runFlow(t, "", "get", id, "-o", "json", "--server", url)
	var tk flow.Task
	if err != nil || json.Unmarshal([]byte(out), &tk) != nil || tk.TaskID != id {
		t.Fatalf("get -o json = %q, %v", out, err)
	}
	out, err = runFlow(t, "", "get", id, "--server", url)
	if err != nil || !strings.Contains(out, "task_stage") || !strings.Contains(out, "pending") || !strings.Contains(out, "schedule log:") {
		t.Fatalf("get table = %q, %v", out, err)
	}

	out, err = runFlow(t, "", "ls", "--type", "cli", "--limit", "1", "--all", "-o", "json", "--server", url)
	var list flow.TaskListResponse
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Tasks) != 3 {
		t.Fatalf("ls --all = %q, %v", out, err)
	}
	out, err = runFlow(t, "", "ls", "--type", "cli", "--stage", "b", "--status", "pending", "--server", url)
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, created.TaskIDs[1]) {
		t.Fatalf("ls --stage b = %q, %v; want a header and one row", out, err)
	}

	out, err = runFlow(t, "", "stats", "--server", url)
	if err != nil || !strings.Contains(out, "PENDING") || !regexp.MustCompile(`cli\s+3\s+0\s+0\s+0\s+0`).MatchString(out) {
		t.Fatalf("stats = %q, %v", out, err)
	}

	// Errors name what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "cli"}, "TYPE and STAGE"},
		{[]string{"submit", "cli", "a", "--context", "{bad"}, "--context"},
		{[]string{"submit", "nope", "a"}, "nope"},
		{[]string{"get", strings.Repeat("0", 26)}, "404"},
		{[]string{"ls", "--status", "done"}, "--status"},
		{[]string{"stats", "-o", "yaml"}, "--output"},
	} {
		_, err := runFlow(t, "", append(tc.args, "--server", url)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("flow %v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// The operator's commands, with the server named by FULCRUM_FLOW_SERVER.
func TestFlowOperatorCommands(t *testing.T) {
	ctx := context.Background()
	s, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(t.TempDir(), "flow.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Setenv("FULCRUM_FLOW_SERVER", "http://"+s.Addr())
	c, err := client.New([]string{"http://" + s.Addr()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	must := func(args ...string) string {
		t.Helper()
		out, err := runFlow(t, "", args...)
		if err != nil {
			t.Fatalf("flow %v: %v", args, err)
		}
		return out
	}
	if out := must("register", "ops", "--max-retry", "2", "--retry-interval", "2s"); !strings.Contains(out, "ops active") || !strings.Contains(out, "max_retry=2") {
		t.Fatalf("register printed %q", out)
	}
	if out := must("register", "nightly", "--cron", "0 3 * * *", "--cron-stage", "build"); !strings.Contains(out, `cron="0 3 * * *" cron_stage=build`) {
		t.Fatalf("register --cron printed %q", out)
	}
	if _, err := runFlow(t, "", "register", "bad", "--cron", "61 * * * *"); err == nil || !strings.Contains(err.Error(), "cron") {
		t.Fatalf("register with a bad cron: %v", err)
	}
	a := strings.TrimSpace(must("submit", "ops", "s", "--unique-key", "k1"))
	if b := strings.TrimSpace(must("submit", "ops", "s", "--unique-key", "k1")); b != a {
		t.Fatalf("second submit with the same unique key: %s, want %s", b, a)
	}
	if out := must("register", "calls", "--rate-limit", "2.5"); !strings.Contains(out, "rate_limit=2.5/s") {
		t.Fatalf("register --rate-limit printed %q", out)
	}
	if out := must("register", "export", "--fair", "--fairness-weight", "acme=3", "--fairness-weight", "globex=2"); !strings.Contains(out, "fair fairness_weights=acme:3,globex:2") {
		t.Fatalf("register --fair printed %q", out)
	}
	if _, err := runFlow(t, "", "register", "export", "--fair", "--fairness-weight", "acme=0"); err == nil || !strings.Contains(err.Error(), "--fairness-weight acme=0") {
		t.Fatalf("register with a zero weight: %v", err)
	}
	exp := strings.TrimSpace(must("submit", "export", "s", "--fairness-key", "acme"))
	if got, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "export", WorkerID: "w"}); err != nil || len(got) != 1 || got[0].TaskID != exp || got[0].FairnessKey != "acme" {
		t.Fatalf("hold of the submitted fair task: %+v, %v", got, err)
	}
	call := strings.TrimSpace(must("submit", "calls", "s", "--sequence-key", "order-1", "--rate-key", "api"))
	got, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "calls", WorkerID: "w"})
	if err != nil || len(got) != 1 || got[0].TaskID != call || got[0].SequenceKey != "order-1" || got[0].RateKey != "api" {
		t.Fatalf("hold of the submitted keyed task: %+v, %v", got, err)
	}
	if err := c.SetTask(ctx, flow.SetTaskRequest{TaskID: call, Lease: got[0].Lease, Status: flow.StatusPending, PauseRateKeyMS: 3600_000}); err != nil {
		t.Fatal(err)
	}
	if out := must("type", "calls"); !strings.Contains(out, `rate_key "api" paused until `) {
		t.Fatalf("type of a type with a paused key printed %q", out)
	}
	if out := must("pause", "ops"); !strings.Contains(out, "ops paused") {
		t.Fatalf("pause printed %q", out)
	}
	if out := must("stats"); !strings.Contains(out, "ops (paused)") {
		t.Fatalf("stats while paused: %q", out)
	}
	if got, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "ops", WorkerID: "w"}); err != nil || len(got) != 0 {
		t.Fatalf("hold of a paused type: %d tasks, %v", len(got), err)
	}
	must("resume", "ops")
	if got, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "ops", WorkerID: "gone-1"}); err != nil || len(got) != 1 {
		t.Fatalf("hold before worker-gone: %d tasks, %v", len(got), err)
	}
	if out := must("worker-gone", "gone-1", "nobody"); !strings.Contains(out, "gone-1 rescued=1") || !strings.Contains(out, "nobody rescued=0") {
		t.Fatalf("worker-gone printed %q", out)
	}
	if got, err := c.GetTask(ctx, a); err != nil || got.Status == flow.StatusProcessing {
		t.Fatalf("task of a worker declared gone: %v, %v; want it rescued", got.Status, err)
	}
	must("cancel", a)
	if out := must("retry", a, "--stage", "t", "--context", `{"n":1}`); !strings.Contains(out, a+" pending stage=t") {
		t.Fatalf("retry printed %q", out)
	}
	if _, err := runFlow(t, "", "delete", a, "nonsense"); err == nil || !strings.Contains(err.Error(), "1 of 2 tasks failed") {
		t.Fatalf("delete with one bad id: %v", err)
	}
	if _, err := c.GetTask(ctx, a); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("deleted task: %v", err)
	}
	if _, err := runFlow(t, "", "retry", a); err == nil || !strings.Contains(err.Error(), "1 of 1") {
		t.Fatalf("retry of a deleted task: %v", err)
	}
}

// flow serve beyond loopback needs a token; FULCRUM_FLOW_TOKEN gives one.
func TestFlowServeRefusesOpenListenWithoutToken(t *testing.T) {
	t.Setenv("FULCRUM_FLOW_TOKEN", "")
	_, err := runFlow(t, "", "serve", "--listen", "0.0.0.0:0", "--db", "sqlite://"+filepath.Join(t.TempDir(), "f.db"))
	if err == nil || !strings.Contains(err.Error(), "token is required (--token or FULCRUM_FLOW_TOKEN)") {
		t.Fatalf("serve on 0.0.0.0 without a token: %v", err)
	}
	_, err = runFlow(t, "", "serve", "--db", "flow.db")
	if err == nil || !strings.Contains(err.Error(), "for a SQLite file write sqlite://flow.db") {
		t.Fatalf("serve with a bare path: %v", err)
	}
}
