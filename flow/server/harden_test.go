package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// TestHelperLimitedServe is not a test: it is the server process the
// hardening tests start, with limits from the environment.
func TestHelperLimitedServe(t *testing.T) {
	db := os.Getenv("FLOW_TEST_LIMITED_DB")
	if db == "" {
		t.Skip("helper process for the hardening tests")
	}
	cfg := Config{Listen: "127.0.0.1:0", DB: db, Logger: quiet()}
	if v := os.Getenv("FLOW_TEST_READ_TIMEOUT"); v != "" {
		cfg.ReadTimeout, _ = time.ParseDuration(v)
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", s.Addr())
	select {} // until killed
}

// child runs TestHelperLimitedServe in its own process and returns its
// base URL and pid; it is killed when t ends.
func child(t *testing.T, env ...string) (string, int) {
	t.Helper()
	cmd, addr := startHelper(t, "TestHelperLimitedServe",
		append(env, "FLOW_TEST_LIMITED_DB=sqlite://"+filepath.Join(t.TempDir(), "flow.db"))...)
	return addr, cmd.Process.Pid
}

// startHelper runs the named helper test of this package in its own
// process with env added, waits for the "ADDR host:port" line it prints
// once it serves, and returns the process and that address. The process
// is killed when t ends.
func startHelper(t *testing.T, helper string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		t.Fatalf("child said %q, %v", line, err)
	}
	return cmd, strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
}

// peakRSS is a process's high-water mark of resident memory (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// Sixty clients sending large bodies at once: bodies declared over the cap
// are refused before they are read, and the bodies that fit are read only
// as far as the memory budget goes (the rest are told to come back), so the
// server's peak memory stays bounded. Before the caps, 60 bodies of 8 MiB
// took the server to 1 GiB.
func TestLargeBodiesBoundedMemory(t *testing.T) {
	addr, pid := child(t)
	base := "http://" + addr
	// Just under the cap: 1000 tasks with 4 KiB contexts, of a type that
	// does not exist, so the whole body is read and decoded but nothing is
	// written.
	var b bytes.Buffer
	b.WriteString(`{"tasks":[`)
	ctx := `{"k":"` + strings.Repeat("x", flow.MaxContextBytes-10) + `"}`
	for i := 0; i < flow.MaxBatch; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"task_type":"nope","task_stage":"s","task_context":` + ctx + `}`)
	}
	b.WriteString(`]}`)
	fits := b.Bytes()
	if int64(len(fits)) > flow.MaxRequestBytes {
		t.Fatalf("test body %d is over the cap %d", len(fits), flow.MaxRequestBytes)
	}
	over := bytes.Repeat([]byte(" "), 8<<20)
	before := peakRSS(t, pid)
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0}}
	for i := 0; i < 60; i++ {
		for _, body := range [][]byte{fits, over} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := hc.Post(base+"/v1/create_task", "application/json", bytes.NewReader(body))
				code := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
					if code == 503 && resp.Header.Get("Retry-After") == "" {
						code = -503 // a 503 without Retry-After is a failure
					}
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	peak := peakRSS(t, pid)
	t.Logf("answers %v; peak RSS %d MiB (%d MiB before the burst)", codes, peak>>20, before>>20)
	// 404: read and decoded (unknown type); 413: over the cap; 503: over
	// the memory budget. A connection error counts as 0: a server that
	// answered 413 without reading may close before the client finished
	// sending the 8 MiB.
	for code, n := range codes {
		switch code {
		case 404, 413, 503, 0:
		default:
			t.Errorf("%d answers with code %d", n, code)
		}
	}
	if codes[404] == 0 {
		t.Errorf("no body that fits was served: %v", codes)
	}
	if codes[413]+codes[0] < 60 {
		t.Errorf("8 MiB bodies: %d refused with 413 (+%d cut), want 60", codes[413], codes[0])
	}
	// The budget is 4 bodies of ~5.9 MiB; decoding roughly triples that,
	// the garbage collector may double it, and the race detector (the
	// child is this test binary) adds its own.
	if limit := int64(400 << 20); peak > limit {
		t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, limit>>20)
	}
}

// Fifty clients that trickle a request (one byte at a time, far slower than
// the read timeout allows) are all cut off, whether they trickle the header
// or the body.
func TestTricklingClientsAreCutOff(t *testing.T) {
	addr, _ := child(t, "FLOW_TEST_READ_TIMEOUT=500ms")
	var closed atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	const n = 50
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := "POST /v1/create_task HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
		if i%2 == 0 {
			// Trickle the header itself.
			head = ""
		} else if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		go func() { // writer: one byte every 100 ms until the server hangs up
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				if _, err := c.Write([]byte("P")); err != nil {
					return
				}
			}
		}()
		go func() { // reader: the server answers (408) or closes; either way the read ends
			io.Copy(io.Discard, c)
			closed.Add(1)
		}()
	}
	testenv.Eventually(t, fmt.Sprintf("all %d trickling connections closed by the server", n), func() bool { return closed.Load() == n })
}

func TestInFlightCap(t *testing.T) {
	t.Parallel()
	s := start(t, Config{MaxInFlight: 4})
	register(t, s, video)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/hold_tasks", strings.NewReader(`{"task_type":"video","worker_id":"w","wait_ms":30000}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	testenv.Eventually(t, "four holds waiting", func() bool { return s.inflight.Load() == 4 })
	resp, err := http.Get(s.URL() + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "4 requests in flight") {
		t.Fatalf("fifth request: %d Retry-After=%q %s; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if code, _ := call(t, "GET", s.URL()+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz under the cap: %d, want 200 (not counted)", code)
	}
	cancel()
	wg.Wait()
	testenv.Eventually(t, "holds gone", func() bool { return s.inflight.Load() == 0 })
	if code, b := call(t, "GET", s.URL()+"/v1/stats", ""); code != 200 {
		t.Fatalf("after the holds: %d %s", code, b)
	}
}

func TestBodyMemoryBudget(t *testing.T) {
	t.Parallel()
	s := start(t, Config{MaxBodyBytes: 1000, MaxBodyMemory: 1500})
	register(t, s, video)
	// Hold one reservation of 1000 bytes open: a body declared 1000 bytes
	// that has sent only part of it.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/create_task HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	testenv.Eventually(t, "the partial body reserved", func() bool { return s.bodyMem.Load() == 1000 })
	big := `{"task_type":"video","task_stage":"` + strings.Repeat("a", 600) + `"}`
	code, b := call(t, "POST", s.URL()+"/v1/create_task", big)
	if code != 503 || !strings.Contains(string(b), "memory cap") {
		t.Fatalf("second body over the budget: %d %s, want 503", code, b)
	}
	if code, b := call(t, "POST", s.URL()+"/v1/create_task", `{"task_type":"video"}`); code != 200 {
		t.Fatalf("a small body within the budget: %d %s", code, b)
	}
	c.Close()
	testenv.Eventually(t, "the reservation released", func() bool { return s.bodyMem.Load() == 0 })
}

func TestTokenRequired(t *testing.T) {
	t.Parallel()
	for _, l := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		_, err := Start(context.Background(), Config{Listen: l, DB: "sqlite://" + filepath.Join(t.TempDir(), "f.db"), Logger: quiet()})
		if err == nil || !strings.Contains(err.Error(), "token is required") {
			t.Errorf("listen %s without a token: %v, want refused", l, err)
		}
	}
	s := start(t, Config{Token: "s3cret"})
	get := func(path, auth string) int {
		req, _ := http.NewRequest("GET", s.URL()+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200},
		{"/v1/stats", "", 401},
		{"/v1/stats", "Bearer wrong", 401},
		{"/v1/stats", "Bearer s3cret", 200},
		{"/metrics", "", 401},
		{"/", "", 401},
		{"/", "Bearer s3cret", 200},
	} {
		if got := get(c.path, c.auth); got != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.auth, got, c.want)
		}
	}
	// A non-loopback listen with a token starts.
	s2, err := Start(context.Background(), Config{Listen: "0.0.0.0:0", Token: "x", DB: "sqlite://" + filepath.Join(t.TempDir(), "g.db"), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

func TestIndexAndSurrogate(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	code, b := call(t, "GET", s.URL()+"/", "")
	if code != 200 || !strings.Contains(string(b), "POST /v1/create_task") || !strings.Contains(string(b), "GET /v1/stats") {
		t.Fatalf("GET /: %d %s", code, b)
	}
	code, b = call(t, "POST", s.URL()+"/v1/create_task", `{"task_type":"video","task_context":{"a":"\ud800"}}`)
	if code != 400 || !strings.Contains(string(b), "task_context: lone UTF-16 surrogate") {
		t.Fatalf("lone surrogate: %d %s, want 400 naming task_context", code, b)
	}
}
