package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor"
)

// examples/supervisor/run.sh as its README tells it, on free ports: every
// room on 2 of 3 workers; a worker stopped does not end the demo, the
// script says how to start it again, and the other two still hold every
// room twice. Real processes (the binary built from this checkout).
func TestSupervisorExampleKeepsRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fulcrum and runs the demo for seconds")
	}
	for _, tool := range []string{"bash", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s in PATH", tool)
		}
	}
	bin := filepath.Join(t.TempDir(), "fulcrum")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sim, sup := freeAddr(t), freeAddr(t)
	cmd := exec.Command("bash", "../../examples/supervisor/run.sh")
	cmd.Env = append(os.Environ(), "FULCRUM="+bin, "SIM_ADDR="+sim, "SUPERVISOR_ADDR="+sup)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its children go with it at the end
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // run.sh stops its processes
		_ = cmd.Wait()
		<-scanned
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything left
	})
	find := func(re *regexp.Regexp) []string {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		}
		return nil
	}
	status := func() supervisor.Status {
		req, _ := http.NewRequest(http.MethodGet, "http://"+sup+"/status", nil)
		req.Header.Set("Authorization", "Bearer demo-token")
		var st supervisor.Status
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		return st
	}
	// holdsTwice: every room on 2 workers, on connected workers only.
	holdsTwice := func(workers int) bool {
		st := status()
		load, n := 0, 0
		for _, w := range st.Workers {
			if w.Connected {
				load += w.Load
				n++
			}
		}
		return st.Phase == "running" && st.Tasks == 12 && st.Deficit.Tasks == 0 && n == workers && load == 24
	}
	worker2 := regexp.MustCompile(`^\s+(\d+)\s+worker-2\s+(\S.*--id worker-2.*)$`)
	testenv.Eventually(t, "the banner with each PID and its command", func() bool { return find(worker2) != nil })
	m := find(worker2)
	if !strings.Contains(m[2], "--max-load 16") || !strings.Contains(m[2], "ws://"+sup+"/ws") {
		t.Errorf("worker-2's command %q, want --max-load 16 and the supervisor at %s", m[2], sup)
	}
	testenv.Eventually(t, "12 rooms on 2 of 3 workers each", func() bool { return holdsTwice(3) })
	var pid int
	if err := json.Unmarshal([]byte(m[1]), &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := regexp.MustCompile(`^run.sh: worker-2 \(pid ` + m[1] + `\) exited \(status 0\); the others keep running`)
	testenv.Eventually(t, "the script reports worker-2's exit", func() bool { return find(exited) != nil })
	again := regexp.MustCompile(`^run.sh: start it again \(in another shell\) with: (.*--id worker-2.*)$`)
	if a := find(again); a == nil || a[1] != m[2] {
		t.Errorf("restart command %v, want the banner's %q", a, m[2])
	}
	testenv.Eventually(t, "every room still on 2 workers, of the 2 left", func() bool { return holdsTwice(2) })
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("run.sh ended when one worker stopped: %v", err)
	}
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
