package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fulcrum-lb/fulcrum/gateway"
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
	// Await the command's word that it registered, not the key: the key
	// can be there while the command still waits for etcd's answer.
	testenv.Eventually(t, "the command to say it registered", func() bool {
		return strings.Contains(out.String(), "registered "+prefix+"127.0.0.1:9 ")
	})
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

	// Stopped before it could register: not a failure, nothing left.
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	out = &lockedBuf{}
	if err := <-runRegister(cancelled, out, "--etcd", endpoint, "--prefix", prefix, "--url", "http://127.0.0.1:9"); err != nil {
		t.Fatalf("register stopped before registering = %v, want nil\n%s", err, out)
	}
	if v := value(); v != "" || !strings.Contains(out.String(), "stopped before http://127.0.0.1:9 was registered") {
		t.Fatalf("stopped before registering: key %q, output:\n%s", v, out)
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

// TestHelperRegister is not a test: run by TestRegisterKilledUnderLoad as
// a child process, it is `fulcrum register` with the arguments in
// FULCRUM_REGISTER_ARGS.
func TestHelperRegister(t *testing.T) {
	args := os.Getenv("FULCRUM_REGISTER_ARGS")
	if args == "" {
		t.Skip("helper process only")
	}
	root := newRootCmd()
	root.SetArgs(append([]string{"register"}, strings.Fields(args)...))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// A `fulcrum register` process killed with SIGKILL while a gateway serves
// its target under load: the key lapses with its lease, the target
// drains, and no request fails.
func TestRegisterKilledUnderLoad(t *testing.T) {
	endpoint := discoverytest.Etcd(t)
	prefix := discoverytest.Prefix(t)
	// Each load request carries a number taken before it is sent; each
	// target keeps the highest it was sent, so a request sent after the
	// change shows.
	var hits, newest [2]atomic.Int64
	var urls [2]string
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			if n, err := strconv.ParseInt(r.Header.Get("X-Load-Seq"), 10, 64); err == nil {
				for cur := newest[i].Load(); n > cur && !newest[i].CompareAndSwap(cur, n); cur = newest[i].Load() {
				}
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
admin: {listen: "off"}
access_log: {enabled: false}
upstreams:
  api:
    retry: {attempts: 1}
    discovery: {etcd: {endpoints: [%q], prefix: %q}}
`, endpoint, prefix)))
	if err != nil {
		t.Fatal(err)
	}
	// The registrars: real processes. The one killed has the shortest
	// lease; the one that stays has a minute's, so no pause of a loaded
	// machine can make it lapse under the load.
	var procs [2]*exec.Cmd
	for i, ttl := range []string{"1m", "2s"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRegister$")
		cmd.Env = append(os.Environ(), "FULCRUM_REGISTER_ARGS=--etcd "+endpoint+" --prefix "+prefix+" --url "+urls[i]+" --ttl "+ttl)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	count := func() int { return len(g.Upstreams()[0].Targets) }
	testenv.Eventually(t, "both registrars' targets", func() bool { return count() == 2 })

	var done, failed, seq atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 10 * time.Second}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, err := http.NewRequest("GET", "http://"+g.Addr()+"/", nil)
				if err != nil {
					panic(err)
				}
				req.Header.Set("X-Load-Seq", strconv.FormatInt(seq.Add(1), 10))
				res, err := c.Do(req)
				if err != nil {
					failed.Add(1)
				} else {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						failed.Add(1)
					}
				}
				done.Add(1)
			}
		}()
	}
	testenv.Eventually(t, "load on both targets", func() bool { return hits[0].Load() > 50 && hits[1].Load() > 50 })

	if err := procs[1].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the killed registrar's target to lapse", func() bool { return count() == 1 })
	// The change is applied: no request sent from now on may reach the
	// dead registrar's target (those sent before may still land there)
	// while many more are served.
	applied, served := seq.Load(), done.Load()
	testenv.Eventually(t, "200 more requests", func() bool { return done.Load() >= served+200 })
	close(stop)
	wg.Wait()
	if n := newest[1].Load(); n > applied {
		t.Fatalf("the lapsed target got request %d, sent after its removal was applied (before request %d)", n, applied+1)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed", n, done.Load())
	}
	t.Logf("%d requests, 0 failed; registrar SIGKILLed, its target drained", done.Load())
}
