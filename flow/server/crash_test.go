package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// TestHelperServe is not a test: it is the server process that
// TestKill9LosesNothingAcknowledged starts and kills.
func TestHelperServe(t *testing.T) {
	db := os.Getenv("FLOW_TEST_CHILD_DB")
	if db == "" {
		t.Skip("helper process for TestKill9LosesNothingAcknowledged")
	}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DB: db, TablePrefix: os.Getenv("FLOW_TEST_CHILD_PREFIX"), Logger: quiet()})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", s.Addr())
	select {} // until killed
}

// A server killed with SIGKILL in the middle of creating and finishing
// tasks loses nothing it acknowledged: every created id is in the database
// and every acknowledged success is a success.
func TestKill9LosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		kill9(t, "sqlite://"+filepath.Join(t.TempDir(), "crash.db"), "flow_")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn, p := testenv.Postgres(t), storetest.Prefix()
		dropTables(t, dsn, p)
		kill9(t, dsn, p)
	})
}

func kill9(t *testing.T, db, prefix string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$")
	cmd.Env = append(os.Environ(), "FLOW_TEST_CHILD_DB="+db, "FLOW_TEST_CHILD_PREFIX="+prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		cmd.Process.Kill()
		t.Fatalf("child said %q, %v", line, err)
	}
	base := "http://" + strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
	post := func(path, body string) (int, []byte, error) {
		resp, err := httpClient.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var b []byte
		b, err = readAll(resp)
		return resp.StatusCode, b, err
	}
	if code, b, err := post("/v1/register_task", `{"task_type":"video"}`); code != 200 {
		t.Fatalf("register: %d %s %v", code, b, err)
	}
	var mu sync.Mutex
	var created, succeeded []string
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				code, b, err := post("/v1/create_task", `{"tasks":[{"task_type":"video"},{"task_type":"video"}]}`)
				if err != nil || code != 200 {
					return // the server is gone
				}
				var cr flow.CreateTaskResponse
				json.Unmarshal(b, &cr)
				mu.Lock()
				created = append(created, cr.TaskIDs...)
				mu.Unlock()
				code, b, err = post("/v1/hold_tasks", fmt.Sprintf(`{"task_type":"video","worker_id":"w%d","limit":1}`, w))
				if err != nil || code != 200 {
					return
				}
				var hr flow.HoldTasksResponse
				json.Unmarshal(b, &hr)
				for _, tk := range hr.Tasks {
					code, _, err = post("/v1/set_task", fmt.Sprintf(`{"task_id":%q,"lease":%q,"status":3}`, tk.TaskID, tk.Lease))
					if err != nil {
						return
					}
					if code == 200 {
						mu.Lock()
						succeeded = append(succeeded, tk.TaskID)
						mu.Unlock()
					}
				}
			}
		}()
	}
	// Kill once a good number of writes were acknowledged.
	testenv.Eventually(t, "100 acknowledged creates", func() bool { mu.Lock(); defer mu.Unlock(); return len(created) >= 100 })
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	wg.Wait()

	st, err := store.Open(context.Background(), db, store.Options{TablePrefix: prefix, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range created {
		if _, err := st.GetTask(context.Background(), id); err != nil {
			t.Errorf("acknowledged task %s lost: %v", id, err)
		}
	}
	for _, id := range succeeded {
		if r, err := st.GetTask(context.Background(), id); err != nil || r.Status != flow.StatusSuccess {
			t.Errorf("acknowledged success of %s lost: %+v %v", id, r.Status, err)
		}
	}
	t.Logf("%d creates and %d successes acknowledged before the kill, all present", len(created), len(succeeded))
}

var httpClient = &http.Client{}

func readAll(resp *http.Response) ([]byte, error) { return io.ReadAll(resp.Body) }
