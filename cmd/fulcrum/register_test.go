package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery/discoverytest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func runRegister(ctx context.Context, out *lockedBuf, args ...string) chan error {
	root := newRootCmd()
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(append([]string{"register"}, args...))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	return done
}

func TestRegisterCommand(t *testing.T) {
	endpoint := discoverytest.Etcd(t)
	prefix := discoverytest.Prefix(t)
	cli, err := discovery.NewEtcdClient(config.EtcdDiscovery{Endpoints: []string{endpoint}, DialTimeout: config.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	value := func() string {
		r, err := cli.Get(t.Context(), prefix+"127.0.0.1:9", clientv3.WithPrefix())
		if err != nil || len(r.Kvs) == 0 {
			return ""
		}
		return string(r.Kvs[0].Value)
	}

	// Until stopped: the key is there with its weight and start time, and
	// gone after.
	ctx, stop := context.WithCancel(t.Context())
	out := &lockedBuf{}
	done := runRegister(ctx, out, "--etcd", endpoint, "--prefix", prefix, "--url", "http://127.0.0.1:9", "--weight", "4", "--started-at", "2026-11-23T10:00:00Z", "--ttl", "2s")
	testenv.Eventually(t, "the key registered", func() bool { return value() != "" })
	var reg map[string]any
	if err := json.Unmarshal([]byte(value()), &reg); err != nil || reg["weight"] != 4.0 || reg["started_at"] != "2026-11-23T10:00:00Z" {
		t.Fatalf("registered %s (%v)", value(), err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("register: %v\n%s", err, out)
	}
	if v := value(); v != "" || !strings.Contains(out.String(), "deregistered "+prefix+"127.0.0.1:9") {
		t.Fatalf("after stop: key %q, output:\n%s", v, out)
	}

	// Around a command: registered while it runs, its exit status passed on.
	out = &lockedBuf{}
	done = runRegister(t.Context(), out, "--etcd", endpoint, "--prefix", prefix, "--url", "http://127.0.0.1:9", "--", "sh", "-c", "sleep 0.5; exit 3")
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(out.String(), "registered ") {
		t.Fatalf("register around a failing command = %v, output:\n%s", err, out)
	}
	if v := value(); v != "" {
		t.Fatalf("key left after the command exited: %s", v)
	}

	for _, bad := range [][]string{
		{"--url", "http://127.0.0.1:9"},
		{"--prefix", "/p", "--url", "http://127.0.0.1:9"},
		{"--prefix", "/p/", "--url", "ftp://x"},
		{"--prefix", "/p/", "--url", "http://127.0.0.1:9", "--started-at", "yesterday"},
	} {
		if err := <-runRegister(t.Context(), &lockedBuf{}, append([]string{"--etcd", endpoint}, bad...)...); err == nil {
			t.Errorf("register %v succeeded", bad)
		}
	}
}
