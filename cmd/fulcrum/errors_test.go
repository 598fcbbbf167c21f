package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow/server"
	"github.com/fulcrum-lb/fulcrum/supervisor"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
)

// Errors a new user meets say what to do, naming the flag, variable or
// command that fixes them.
func TestErrorsPointAtTheFix(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", Token: "tok", DB: "sqlite://" + filepath.Join(t.TempDir(), "flow.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	flowURL := "http://" + s.Addr()
	t.Setenv("FULCRUM_FLOW_TOKEN", "")
	t.Setenv("FULCRUM_TOKEN", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"flow submit to an unknown type", []string{"flow", "submit", "video", "fetch", "--server", flowURL, "--token", "tok"},
			`task type "video": unknown task type: register the type first: fulcrum flow register video`},
		{"flow with a wrong token", []string{"flow", "ls", "--server", flowURL, "--token", "nope"},
			"401 Unauthorized: missing or wrong token (Authorization: Bearer TOKEN): give the server's token with --token or FULCRUM_FLOW_TOKEN"},
		{"worker URL without /ws", []string{"supervisor", "worker", "--supervisor", "ws://127.0.0.1:7300", "--id", "w", "--max-load", "1"},
			`--supervisor: "ws://127.0.0.1:7300" has no path: the supervisor's worker endpoint is /ws (ws://127.0.0.1:7300/ws)`},
		{"worker URL without a scheme", []string{"supervisor", "worker", "--supervisor", "ws://a:1/ws,127.0.0.1:7301", "--id", "w", "--max-load", "1"},
			`--supervisor: "127.0.0.1:7301" has no scheme: give ws://127.0.0.1:7301/ws`},
		{"status URL without a scheme", []string{"supervisor", "status", "--url", "127.0.0.1:7300"},
			`--url: "127.0.0.1:7300" has no http:// or https:// scheme: give http://127.0.0.1:7300`},
		{"demo strategy", []string{"demo", "--strategy", "bogus"},
			`demo: --strategy: unknown strategy "bogus" (known: `},
		{"demo upstreams", []string{"demo", "--upstreams", "9001"},
			`demo: --upstreams: "9001" is not host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCmd()
			root.SetOut(new(bytes.Buffer))
			root.SetErr(new(bytes.Buffer))
			root.SetArgs(tc.args)
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v:\n got %v\nwant %q", tc.args, err, tc.want)
			}
			if strings.Contains(err.Error(), "line ") {
				t.Errorf("names a line of a file the user never wrote: %v", err)
			}
		})
	}
}

// `supervisor status` against a supervisor that wants a token names
// --token and FULCRUM_TOKEN, with the token missing and with it wrong.
func TestSupervisorStatusTokenErrors(t *testing.T) {
	sup := startTestSupervisor(t, "tok")
	t.Setenv("FULCRUM_TOKEN", "")
	for _, tc := range []struct{ token, want string }{
		{"", "401 Unauthorized: the supervisor wants a token: give its token with --token or FULCRUM_TOKEN"},
		{"wrong", "401 Unauthorized: the supervisor refused the token: give its token with --token or FULCRUM_TOKEN"},
	} {
		root := newRootCmd()
		root.SetOut(new(bytes.Buffer))
		root.SetArgs([]string{"supervisor", "status", "--url", "http://" + sup, "--token", tc.token})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q: %v, want %q", tc.token, err, tc.want)
		}
	}
}

// The test binary runs main when FULCRUM_TEST_MAIN holds the arguments
// (one a line), so a test can watch a real process's stderr.
func TestMain(m *testing.M) {
	if args := os.Getenv("FULCRUM_TEST_MAIN"); args != "" {
		os.Args = append([]string{"fulcrum"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// flow serve --lock redis with no Redis there fails with one clean line:
// go-redis's own log lines (one per failed dial) are not printed.
func TestFlowServeRedisDownPrintsOneError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FULCRUM_TEST_MAIN="+strings.Join([]string{"flow", "serve", "--listen", "127.0.0.1:0",
		"--lock", "redis", "--redis", closed, "--db", "sqlite://" + filepath.Join(t.TempDir(), "f.db")}, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("flow serve without its Redis: %v, want it to exit with an error", err)
	}
	got := strings.TrimSpace(stderr.String())
	if want := "fulcrum: flow server: --lock redis: no Redis at " + closed; !strings.HasPrefix(got, want) || strings.Contains(got, "\n") {
		t.Fatalf("stderr:\n%s\nwant one line starting %q", got, want)
	}
}

// startTestSupervisor starts a supervisor on a free loopback port with
// token and a static task, and returns its address.
func startTestSupervisor(t *testing.T, token string) string {
	t.Helper()
	cfg := supervisor.DefaultConfig()
	cfg.Listen, cfg.Token = "127.0.0.1:0", token
	cfg.Source = source.Config{Type: source.TypeStatic, Tasks: []protocol.Task{{TaskID: "a"}}}
	s, err := supervisor.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr()
}
