package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
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

// `supervisor --check` tries the sink as start would: a RabbitMQ routing
// key naming no queue, a wrong password, a NATS server that is down and a
// subject no JetStream stream captures fail with the field to fix; a
// reachable broker passes. Real brokers.
func TestSupervisorCheckTriesTheSink(t *testing.T) {
	amqpURL := testenv.AMQP(t)
	natsURL := testenv.NATS(t)
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "wrong-password")
	badPass := u.String()
	// A port nothing listens on: a listener opened and closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "nats://" + ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	missing := fmt.Sprintf("fulcrum-check-missing-%d", time.Now().UnixNano())
	for _, tc := range []struct {
		name, sink, want string
		ok               bool
	}{
		{"rabbitmq ok", fmt.Sprintf("{type: rabbitmq, url: %q, queue: fulcrum-check-ok}", amqpURL), "sink rabbitmq", true},
		{"rabbitmq queue missing", fmt.Sprintf("{type: rabbitmq, url: %q, routing_key: %s}", amqpURL, missing), "sink.routing_key: no queue", false},
		{"rabbitmq wrong password", fmt.Sprintf("{type: rabbitmq, url: %q, queue: q}", badPass), "sink.url: connect to", false},
		{"nats ok", fmt.Sprintf("{type: nats, url: %q, subject: fulcrum.check}", natsURL), "sink nats", true},
		{"nats down", fmt.Sprintf("{type: nats, url: %q, subject: fulcrum.check}", down), "sink.url: connect to " + down, false},
		{"jetstream without a stream", fmt.Sprintf("{type: nats, url: %q, subject: %s, jetstream: true}", natsURL, missing), "sink.subject: no JetStream stream", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "sup.yaml")
			body := "listen: 127.0.0.1:7300\nsource: {type: static, tasks: [{task_id: a}]}\nsink: " + tc.sink + "\n"
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			root := newRootCmd()
			root.SetOut(&out)
			root.SetArgs([]string{"supervisor", "--check", "--config", path})
			err := root.Execute()
			got := out.String()
			if err != nil {
				got = err.Error()
			}
			if (err == nil) != tc.ok || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q (err %v), want ok=%v containing %q", got, err, tc.ok, tc.want)
			}
			if strings.Contains(got, "wrong-password") {
				t.Errorf("the password is printed: %q", got)
			}
		})
	}
}
