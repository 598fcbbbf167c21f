package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/supervisor"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
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
	good := write("good.yaml", "listen: 0.0.0.0:7300\nsource: {type: static, tasks: [{task_id: a}]}\n")
	bad := write("bad.yaml", "token: t\nsource: {type: static}\nredundancy: 0\n")
	// A file source's relative path is read against the config's folder
	// (the test runs in cmd/fulcrum, where rooms.yaml does not exist).
	write("rooms.yaml", "- task_id: room-1\n")
	fileSrc := write("file.yaml", "source: {type: file, path: rooms.yaml}\n")
	noFile := write("nofile.yaml", "source: {type: file, path: gone.yaml}\n")
	badList := write("badlist.yaml", "source: {type: file, path: bad.yaml}\n")
	cases := []struct {
		name, path, env, want string
		ok                    bool
	}{
		{"token from the environment", good, "tok", "ok (listen 0.0.0.0:7300, redundancy 2", true},
		{"no token anywhere, off loopback", good, "", "token: required", false},
		{"bad field named with its line", bad, "", "line 3: redundancy", false},
		{"missing file", filepath.Join(dir, "nope.yaml"), "", "no such file", false},
		{"file source relative to the config", fileSrc, "", "source file", true},
		{"file source that does not exist", noFile, "", "source.path", false},
		{"file source that does not parse", badList, "", "unknown field", false},
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

// `fulcrum supervisor status` prints what GET /status says; a wrong token
// is an error naming the status.
func TestSupervisorStatus(t *testing.T) {
	cfg := supervisor.DefaultConfig()
	cfg.Listen, cfg.Token = "127.0.0.1:0", "tok"
	cfg.Source = source.Config{Type: source.TypeStatic, Tasks: []protocol.Task{{TaskID: "a"}}}
	s, err := supervisor.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(tok string) (string, error) {
		var out bytes.Buffer
		root := newRootCmd()
		root.SetOut(&out)
		root.SetArgs([]string{"supervisor", "status", "--url", "http://" + s.Addr(), "--token", tok})
		err := root.Execute()
		return out.String(), err
	}
	got, err := run("tok")
	if err != nil || !strings.Contains(got, "phase warming, role alone") || !strings.Contains(got, "sink stdout: offered 0") || !strings.Contains(got, "WORKER") {
		t.Fatalf("status: %v\n%s", err, got)
	}
	if _, err := run("wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v, want an error naming 401", err)
	}
}
