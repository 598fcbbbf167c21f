package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSupervisorCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "source: {type: static, tasks: [{task_id: a}]}\n")
	bad := write("bad.yaml", "token: t\nsource: {type: static}\nredundancy: 0\n")
	cases := []struct {
		name, path, env, want string
		ok                    bool
	}{
		{"token from the environment", good, "tok", "ok (listen 127.0.0.1:7300, redundancy 2", true},
		{"no token anywhere", good, "", "token: required", false},
		{"bad field named with its line", bad, "", "line 3: redundancy", false},
		{"missing file", filepath.Join(dir, "nope.yaml"), "", "no such file", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FULCRUM_TOKEN", tc.env)
			var out bytes.Buffer
			root := newRootCmd()
			root.SetOut(&out)
			root.SetArgs([]string{"supervisor", "--check", "--config", tc.path})
			err := root.Execute()
			got := out.String()
			if err != nil {
				got = err.Error()
			}
			if (err == nil) != tc.ok || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q (err %v), want ok=%v containing %q", got, err, tc.ok, tc.want)
			}
		})
	}
	// The worker subcommand is mounted.
	if c, _, err := newRootCmd().Find([]string{"supervisor", "worker"}); err != nil || c.Name() != "worker" {
		t.Fatalf("supervisor worker: %v", err)
	}
}
