package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// buildBinaries builds the fulcrum binary and the example worker into a
// temporary directory, once per test.
func buildBinaries(t *testing.T) (fulcrum, exampleWorker string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds binaries; skipped with -short")
	}
	dir := t.TempDir()
	fulcrum = filepath.Join(dir, "fulcrum")
	exampleWorker = filepath.Join(dir, "flow-worker")
	for _, b := range []struct{ out, pkg string }{
		{fulcrum, "github.com/fulcrum-lb/fulcrum/cmd/fulcrum"},
		{exampleWorker, "github.com/fulcrum-lb/fulcrum/examples/flow-worker"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return fulcrum, exampleWorker
}

// proc is a child process whose output goes to a file in the test's temp
// directory (printed if the test fails).
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(name)+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s %s output:\n%s", name, strings.Join(args, " "), b)
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve starts `fulcrum flow serve` on addr and db and waits until it answers.
func serve(t *testing.T, fulcrum, addr, db string) *proc {
	t.Helper()
	p := startProc(t, fulcrum, "flow", "serve", "--listen", addr, "--db", db)
	c, err := client.New([]string{"http://" + addr}, client.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.Eventually(t, "fulcrum flow serve to answer", func() bool {
		if _, err := c.Stats(context.Background()); err == nil {
			return true
		}
		select {
		case <-p.done:
			t.Fatal("fulcrum flow serve exited")
		default:
		}
		return false
	})
	return p
}

// poll waits for cond like testenv.Eventually, and fails at once on its
// error.
func poll(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	testenv.EventuallyWithin(t, what, 60*time.Second, func() bool {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return ok
	})
}

// A worker process killed with SIGKILL in the middle of a stage: when its
// lease runs out the server hands the task to another worker, which finishes
// it; the expiry counts as a retry and the log names the dead worker.
func TestCrashWorkerKilledMidStage(t *testing.T) {
	fulcrum, exampleWorker := buildBinaries(t)
	addr := freePort(t)
	serve(t, fulcrum, addr, "sqlite://"+filepath.Join(t.TempDir(), "flow.db"))
	url := "http://" + addr
	ctx := context.Background()
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The victim registers the type (1s lease, renewed every ~333ms while
	// it lives) and hangs in every stage.
	victim := startProc(t, exampleWorker, "-server", url, "-id", "victim", "-lease", "1s", "-stage-delay", "1h", "-out", t.TempDir())
	poll(t, "the victim to register the type", func() (bool, error) {
		_, err := c.CreateTask(ctx, flow.NewTask{TaskType: "article", TaskStage: "fetch", TaskContext: json.RawMessage(`{"url":"demo:crash"}`)})
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return false, nil // type not registered yet
		}
		return err == nil, err
	})
	page, err := c.ListTasks(ctx, client.ListFilter{TaskType: "article"})
	if err != nil || len(page.Tasks) != 1 {
		t.Fatalf("list: %v, %v", page, err)
	}
	id := page.Tasks[0].TaskID
	poll(t, "the victim to hold the task", func() (bool, error) {
		tk, err := c.GetTask(ctx, id)
		return err == nil && tk.Status == flow.StatusProcessing && tk.Owner == "victim", err
	})
	// It keeps the task past several lease lengths while alive...
	held, _ := c.GetTask(ctx, id)
	poll(t, "a renewal", func() (bool, error) {
		tk, err := c.GetTask(ctx, id)
		return err == nil && tk.LeaseExpiry != nil && tk.LeaseExpiry.After(held.LeaseExpiry.Add(time.Second)), err
	})
	victim.kill()
	// ...and loses it once dead: the server rescues the task.
	poll(t, "the lease to expire and the task to return", func() (bool, error) {
		tk, err := c.GetTask(ctx, id)
		if err != nil {
			return false, err
		}
		for _, e := range tk.ScheduleLog {
			if e.Event == flow.EventExpired && e.Worker == "victim" {
				return tk.Owner != "victim", nil
			}
		}
		return false, nil
	})
	out := t.TempDir()
	startProc(t, exampleWorker, "-server", url, "-id", "rescuer", "-out", out)
	poll(t, "the rescuer to finish the task", func() (bool, error) {
		tk, err := c.GetTask(ctx, id)
		return err == nil && tk.Status == flow.StatusSuccess, err
	})
	if _, err := os.Stat(filepath.Join(out, id+".json")); err != nil {
		t.Fatalf("the store stage's file: %v", err)
	}
	tk, _ := c.GetTask(ctx, id)
	var stages []string
	for _, e := range tk.ScheduleLog {
		stages = append(stages, e.Event+":"+e.Stage+":"+e.Worker)
	}
	t.Logf("schedule log: %v", stages)
}

// The server killed with SIGKILL while clients create and set tasks: after
// a restart on the same database every acknowledged create and set is there.
func TestCrashServerKilledKeepsAcknowledged(t *testing.T) {
	fulcrum, _ := buildBinaries(t)
	addr := freePort(t)
	db := "sqlite://" + filepath.Join(t.TempDir(), "flow.db")
	srv := serve(t, fulcrum, addr, db)
	url := "http://" + addr
	ctx := context.Background()
	c, err := client.New([]string{url}, client.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RegisterTask(ctx, flow.TaskType{TaskType: "durable", ScheduleLimit: 10, ScheduleIntervalMS: 100,
		MaxProcessingMS: 60_000, MaxRetryNum: 1, RetryIntervalMS: 10, MaxRetryIntervalMS: 10}); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		created []string            // acknowledged creates
		setDone = map[string]bool{} // acknowledged set success
	)
	var wg sync.WaitGroup
	stopLoad := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				ids, err := c.CreateTasks(ctx, []flow.NewTask{
					{TaskType: "durable", TaskStage: "a", TaskContext: json.RawMessage(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))},
					{TaskType: "durable", TaskStage: "a"},
				})
				if err != nil {
					return // the server is gone
				}
				mu.Lock()
				created = append(created, ids...)
				mu.Unlock()
				held, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "durable", Limit: 2, WorkerID: fmt.Sprintf("g%d", g)})
				if err != nil {
					return
				}
				for _, h := range held {
					if err := c.SetTask(ctx, flow.SetTaskRequest{TaskID: h.TaskID, Lease: h.Lease, Status: flow.StatusSuccess}); err != nil {
						return
					}
					mu.Lock()
					setDone[h.TaskID] = true
					mu.Unlock()
				}
			}
		}()
	}
	poll(t, "some acknowledged work", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(created) >= 400 && len(setDone) >= 100, nil
	})
	srv.kill() // in the middle of the load
	close(stopLoad)
	wg.Wait()

	serve(t, fulcrum, addr, db)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range created {
		tk, err := c.GetTask(ctx, id)
		if err != nil {
			t.Fatalf("acknowledged task %s after the restart: %v", id, err)
		}
		if setDone[id] && tk.Status != flow.StatusSuccess {
			t.Fatalf("task %s was set success (acknowledged) but is %d after the restart", id, tk.Status)
		}
	}
	t.Logf("%d acknowledged creates and %d acknowledged sets all survived SIGKILL", len(created), len(setDone))
}
