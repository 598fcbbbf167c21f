package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

var kid = flow.TaskType{TaskType: "kid", ScheduleLimit: 100, MaxProcessingMS: 60000}

// A fan-out through the HTTP API and the SDK: bad requests refused with
// the field named and nothing applied; the parent waits, shows its
// children's counts, joins after the last, and its join stage reads them.
func TestFanOutThroughAPI(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	register(t, s, video)
	register(t, s, kid)
	create(t, s, flow.NewTask{TaskType: "video", TaskStage: "split"})
	p := hold(t, s, "video", 1, 0)[0]

	kids := make([]flow.NewTask, 5)
	for i := range kids {
		kids[i] = flow.NewTask{TaskType: "kid", TaskStage: "work", TaskContext: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	set := func(children []flow.NewTask, join string, st flow.Status) flow.SetTaskRequest {
		return flow.SetTaskRequest{TaskID: p.TaskID, Lease: p.Lease, Status: st, Children: children, JoinStage: join}
	}
	for _, c := range []struct {
		req   flow.SetTaskRequest
		field string
	}{
		{set(make([]flow.NewTask, flow.MaxBatch+1), "join", flow.StatusWaiting), "children"},
		{set([]flow.NewTask{{TaskType: "kid"}, {TaskType: "nope"}}, "join", flow.StatusWaiting), "children[1].task_type"},
		{set(kids, "", flow.StatusWaiting), "join_stage"},
		{set(kids, "join", flow.StatusSuccess), "children"},
		{set(nil, "join", flow.StatusWaiting), "children"},
		{set([]flow.NewTask{{TaskType: "kid", UniqueKey: "k"}}, "join", flow.StatusWaiting), "children[0].unique_key"},
		{set([]flow.NewTask{{TaskType: "kid", DelayMS: -1}}, "join", flow.StatusWaiting), "children[0].delay_ms"},
	} {
		var e flow.ErrorResponse
		do(t, s, "/v1/set_task", c.req, &e, http.StatusBadRequest)
		if !strings.HasPrefix(e.Error, c.field+":") {
			t.Errorf("error %q does not name %s", e.Error, c.field)
		}
	}
	var batch flow.SetTasksResponse
	do(t, s, "/v1/set_tasks", flow.SetTasksRequest{Tasks: []flow.SetTaskRequest{set([]flow.NewTask{{TaskType: "nope"}}, "join", flow.StatusWaiting)}}, &batch, 200)
	if r := batch.Results[0]; r.Code != 400 || !strings.HasPrefix(r.Error, "tasks[0].children[0].task_type:") {
		t.Fatalf("set_tasks result %+v", r)
	}
	if got := getTask(t, s, p.TaskID); got.Status != flow.StatusProcessing || got.Children != nil {
		t.Fatalf("refused fan-outs changed the parent: %s, children %v", got.Status, got.Children)
	}

	do(t, s, "/v1/set_task", set(kids, "join", flow.StatusWaiting), nil, 200)
	if got := getTask(t, s, p.TaskID); got.Status != flow.StatusWaiting || got.Children["pending"] != 5 {
		t.Fatalf("parent %s, children %v", got.Status, got.Children)
	}
	held := hold(t, s, "kid", 10, 0)
	if len(held) != 5 {
		t.Fatalf("held %d children", len(held))
	}
	for i, k := range held {
		req := flow.SetTaskRequest{TaskID: k.TaskID, Lease: k.Lease, Status: flow.StatusSuccess, TaskContext: json.RawMessage(`{"done":true}`)}
		if i == 0 {
			req = flow.SetTaskRequest{TaskID: k.TaskID, Lease: k.Lease, Status: flow.StatusFailed, Error: "no luck"}
		}
		if i == len(held)-1 {
			if got := getTask(t, s, p.TaskID); got.Status != flow.StatusWaiting {
				t.Fatalf("parent %s before its last child ended", got.Status)
			}
		}
		do(t, s, "/v1/set_task", req, nil, 200)
	}
	j := hold(t, s, "video", 1, 0)
	if len(j) != 1 || j[0].TaskID != p.TaskID || j[0].TaskStage != "join" {
		t.Fatalf("join hold %+v", j)
	}
	c, err := client.New([]string{s.URL()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.GetTaskChildren(context.Background(), p.TaskID, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	failed, ok := 0, 0
	for _, k := range ch.Children {
		switch {
		case k.Status == flow.StatusFailed && k.Error == "no luck":
			failed++
		case k.Status == flow.StatusSuccess && string(k.TaskContext) == `{"done":true}`:
			ok++
		}
	}
	if failed != 1 || ok != 4 || ch.NextCursor != "" {
		t.Fatalf("children %+v", ch)
	}
	var page flow.TaskChildrenResponse
	do(t, s, "/v1/get_task_children?limit=2&task_id="+p.TaskID, nil, &page, 200)
	if len(page.Children) != 2 || page.NextCursor != page.Children[1].TaskID {
		t.Fatalf("page %+v", page)
	}
	do(t, s, "/v1/get_task_children?limit=2000&task_id="+p.TaskID, nil, nil, 400)
	do(t, s, "/v1/get_task_children?task_id=01Q3G99683AXE14ZK1TSGEZ003", nil, nil, 404)

	// The join stage fans out again; a cancel then reaches the children.
	do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: p.TaskID, Lease: j[0].Lease, Status: flow.StatusWaiting, JoinStage: "join2", Children: kids[:2]}, nil, 200)
	do(t, s, "/v1/cancel_task", flow.CancelTaskRequest{TaskID: p.TaskID}, nil, 200)
	if got := getTask(t, s, p.TaskID); got.Status != flow.StatusCancelled || got.Children["cancelled"] != 2 {
		t.Fatalf("after cancel: %s, children %v", got.Status, got.Children)
	}
}

// TestHelperFanOutServe is not a test: it is the server process that
// TestKill9FanOut starts and kills.
func TestHelperFanOutServe(t *testing.T) {
	db := os.Getenv("FLOW_TEST_FANOUT_DB")
	if db == "" {
		t.Skip("helper process for TestKill9FanOut")
	}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DB: db, Logger: quiet()})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", s.Addr())
	select {} // until killed
}

// A server killed with SIGKILL while parents fan out and children end
// leaves each fan-out whole or absent, and once every child has ended,
// each parent has joined exactly once.
func TestKill9FanOut(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "fanout.db")
	const n = 100 // children per parent
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFanOutServe$")
	cmd.Env = append(os.Environ(), "FLOW_TEST_FANOUT_DB="+db)
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
	c, err := client.New([]string{"http://" + strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))}, client.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, tt := range []flow.TaskType{video, kid} {
		if err := c.RegisterTask(ctx, tt); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	kids := make([]flow.NewTask, n)
	for i := range kids {
		kids[i] = flow.NewTask{TaskType: "kid"}
	}
	for w := 0; w < 2; w++ { // fan out parents
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.CreateTask(ctx, flow.NewTask{TaskType: "video"}); err != nil {
					return
				}
				h, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "video", Limit: 1, WorkerID: "p"})
				if err != nil {
					return
				}
				for _, p := range h {
					if p.TaskStage == "join" {
						continue // a joined parent: left held, as a join stage's worker may
					}
					if err := c.SetTask(ctx, flow.SetTaskRequest{TaskID: p.TaskID, Lease: p.Lease, Status: flow.StatusWaiting, Children: kids, JoinStage: "join"}); err != nil {
						return
					}
					mu.Lock()
					acked = append(acked, p.TaskID)
					mu.Unlock()
				}
			}
		}()
	}
	for w := 0; w < 2; w++ { // end children
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				h, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: "kid", Limit: 50, WorkerID: "k"})
				if err != nil {
					return
				}
				reqs := make([]flow.SetTaskRequest, len(h))
				for i, k := range h {
					reqs[i] = flow.SetTaskRequest{TaskID: k.TaskID, Lease: k.Lease, Status: flow.StatusSuccess}
				}
				if len(reqs) > 0 {
					if _, err := c.SetTasks(ctx, reqs); err != nil {
						return
					}
				}
			}
		}()
	}
	testenv.Eventually(t, "5 acknowledged fan-outs", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 5 })
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	wg.Wait()

	st, err := store.Open(ctx, db, store.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	parents, err := st.ListTasks(ctx, store.ListFilter{TaskType: "video", Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	whole := map[string]bool{}
	for _, p := range parents {
		cnt, err := st.ChildCounts(ctx, p.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, v := range cnt {
			total += v
		}
		if total != 0 && total != n {
			t.Errorf("parent %s has %d children, want 0 or %d", p.TaskID, total, n)
		}
		whole[p.TaskID] = total == n
	}
	for _, id := range acked {
		if !whole[id] {
			t.Errorf("acknowledged fan-out of %s lost", id)
		}
	}
	// End every child still live; then each parent that fanned out has
	// joined exactly once.
	now := time.Now()
	for {
		h, err := st.Hold(ctx, store.HoldParams{TaskType: "kid", WorkerID: "after", Limit: 500, Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := st.RescueExpired(ctx, now.Add(time.Hour), 10000); err != nil || (len(h) == 0 && n == 0) {
			break // nothing pending and nothing left held by the killed server's workers
		}
		reqs := make([]flow.SetTaskRequest, len(h))
		for i, k := range h {
			reqs[i] = flow.SetTaskRequest{TaskID: k.TaskID, Lease: k.Lease, Status: flow.StatusSuccess}
		}
		if _, err := st.SetTasks(ctx, reqs, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range parents {
		if !whole[p.TaskID] {
			continue
		}
		r, err := st.GetTask(ctx, p.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		joined := 0
		for _, l := range r.ScheduleLog {
			if l.Event == flow.EventJoined {
				joined++
			}
		}
		if r.TaskStage != "join" || joined != 1 {
			t.Errorf("parent %s: %s at %s, joined %d times", r.TaskID, r.Status, r.TaskStage, joined)
		}
	}
	t.Logf("%d parents, %d fan-outs acknowledged before the kill", len(parents), len(acked))
}

// BenchmarkFanOutJoin: a parent with 1,000 one-stage children; the time
// from sending the last child's set to a long-polling hold returning the
// joined parent (join-µs), and from that set's answer (after-ack-µs).
//
//	go test ./flow/server -run '^$' -bench FanOutJoin -benchtime 5x
func BenchmarkFanOutJoin(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchFanOutJoin(b, Config{}) })
	b.Run("postgres", func(b *testing.B) {
		dsn, p := testenv.Postgres(b), "bfan_"+fmt.Sprint(time.Now().UnixNano()%1e9)+"_"
		dropTables(b, dsn, p)
		benchFanOutJoin(b, Config{DB: dsn, TablePrefix: p})
	})
}

func benchFanOutJoin(b *testing.B, cfg Config) {
	s := start(b, cfg)
	register(b, s, video)
	register(b, s, kid)
	kids := make([]flow.NewTask, flow.MaxBatch)
	for i := range kids {
		kids[i] = flow.NewTask{TaskType: "kid", TaskStage: "work"}
	}
	var join, afterAck time.Duration
	for i := 0; i < b.N; i++ {
		create(b, s, flow.NewTask{TaskType: "video", TaskStage: "split"})
		p := hold(b, s, "video", 1, 0)[0]
		do(b, s, "/v1/set_task", flow.SetTaskRequest{TaskID: p.TaskID, Lease: p.Lease, Status: flow.StatusWaiting, JoinStage: "join", Children: kids}, nil, 200)
		var held []flow.Task
		for len(held) < len(kids) {
			held = append(held, hold(b, s, "kid", 100, 0)...)
		}
		for k := 0; k < len(held)-1; k += 250 {
			var reqs []flow.SetTaskRequest
			for _, t := range held[k:min(k+250, len(held)-1)] {
				reqs = append(reqs, flow.SetTaskRequest{TaskID: t.TaskID, Lease: t.Lease, Status: flow.StatusSuccess})
			}
			do(b, s, "/v1/set_tasks", flow.SetTasksRequest{Tasks: reqs}, nil, 200)
		}
		got := make(chan time.Time)
		go func() {
			var out flow.HoldTasksResponse
			do(b, s, "/v1/hold_tasks", flow.HoldTasksRequest{TaskType: "video", Limit: 1, WorkerID: "j", WaitMS: 30000}, &out, 200)
			got <- time.Now()
		}()
		time.Sleep(50 * time.Millisecond) // let the long poll park; not part of the figure
		last := held[len(held)-1]
		sent := time.Now()
		do(b, s, "/v1/set_task", flow.SetTaskRequest{TaskID: last.TaskID, Lease: last.Lease, Status: flow.StatusSuccess}, nil, 200)
		acked := time.Now()
		at := <-got
		join += at.Sub(sent)
		afterAck += at.Sub(acked)
	}
	b.ReportMetric(float64(join.Microseconds())/float64(b.N), "join-µs")
	b.ReportMetric(float64(afterAck.Microseconds())/float64(b.N), "after-ack-µs")
}
