package main

import (
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
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
