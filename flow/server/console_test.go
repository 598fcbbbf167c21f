package server

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// onEachDB runs f against a server on SQLite, PostgreSQL and MySQL (the
// latter two skip outside CI without the service): what the console and
// the funnel read comes from each driver's own queries.
func onEachDB(t *testing.T, f func(t *testing.T, s *Server)) {
	for _, db := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "flow.db") }},
		{"postgres", func(t *testing.T) string { return testenv.Postgres(t) }},
		{"mysql", func(t *testing.T) string { return "mysql://" + testenv.MySQL(t) }},
	} {
		t.Run(db.name, func(t *testing.T) {
			dsn, p := db.dsn(t), storetest.Prefix()
			if db.name != "sqlite" {
				dropTables(t, dsn, p)
			}
			f(t, start(t, Config{DB: dsn, TablePrefix: p}))
		})
	}
}

// GET /v1/funnel counts each type's tasks by stage and status and says how
// long the oldest due pending task has waited; GET /v1/console names the
// operator endpoints this server has; /ui/ serves the console.
func TestConsoleFunnelAndActions(t *testing.T) { onEachDB(t, testConsoleFunnelAndActions) }

func testConsoleFunnelAndActions(t *testing.T, s *Server) {
	register(t, s, video)
	var nts []flow.NewTask
	for range 5 {
		nts = append(nts, flow.NewTask{TaskType: "video", TaskStage: "download"})
	}
	create(t, s, nts...)
	held := hold(t, s, "video", 3, 0)
	for i, tk := range held {
		req := flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: flow.StatusPending, TaskStage: "encode"}
		if i == 2 {
			req = flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: flow.StatusFailed, Error: "bad codec"}
		}
		do(t, s, "/v1/set_task", req, nil, 200)
	}
	var out FunnelResponse
	do(t, s, "/v1/funnel", nil, &out, 200)
	if len(out.Types) != 1 || out.Types[0].TaskType != "video" || out.Types[0].Truncated {
		t.Fatalf("funnel %+v", out)
	}
	got := map[string]map[string]int64{}
	for _, st := range out.Types[0].Stages {
		got[st.Stage] = st.Counts
	}
	if got["download"]["pending"] != 2 || got["download"]["failed"] != 1 || got["encode"]["pending"] != 2 || len(got) != 2 {
		t.Errorf("stage counts %v, want download: 2 pending 1 failed, encode: 2 pending", got)
	}
	if out.Types[0].Stages[0].Stage != "download" {
		t.Errorf("stages in order %+v, want download first", out.Types[0].Stages)
	}
	if out.Types[0].OldestPendingMS < 0 {
		t.Errorf("oldest pending %d ms", out.Types[0].OldestPendingMS)
	}
	do(t, s, "/v1/funnel?task_type=nope", nil, nil, 404)
	do(t, s, "/v1/funnel?x=1", nil, nil, 400)

	var cr ConsoleResponse
	do(t, s, "/v1/console", nil, &cr, 200)
	if !cr.Actions["cancel_task"] || len(cr.Actions) != len(consoleActions) {
		t.Errorf("actions %v, want cancel_task present and every action named", cr.Actions)
	}
	code, body := call(t, "GET", s.URL()+"/ui/", "")
	if code != 200 || !strings.Contains(string(body), `data-component="flow"`) {
		t.Errorf("GET /ui/: %d %.200s", code, body)
	}
}

// POST /v1/rebuild_counts recounts the counts behind stats and the funnel
// and answers stats; a body that is not {} is refused.
func TestRebuildCounts(t *testing.T) { onEachDB(t, testRebuildCounts) }

func testRebuildCounts(t *testing.T, s *Server) {
	register(t, s, video)
	create(t, s, flow.NewTask{TaskType: "video", TaskStage: "download"}, flow.NewTask{TaskType: "video", TaskStage: "download"})
	hold(t, s, "video", 1, 0)
	var out flow.StatsResponse
	do(t, s, "/v1/rebuild_counts", struct{}{}, &out, 200)
	if len(out.Types) != 1 || out.Types[0].Counts["pending"] != 1 || out.Types[0].Counts["processing"] != 1 {
		t.Fatalf("stats after rebuild %+v, want 1 pending and 1 processing video", out)
	}
	do(t, s, "/v1/rebuild_counts", map[string]int{"x": 1}, nil, 400)
	do(t, s, "/v1/rebuild_counts", nil, nil, 405)
}

// The funnel orders stages from the logs of succeeded tasks too when the
// most common status shows no moves: here 9 tasks wait at the first
// stage (zeta) and 3 went on to alpha and succeeded; by name alone alpha
// would come first.
func TestFunnelOrderFromSucceeded(t *testing.T) { onEachDB(t, testFunnelOrderFromSucceeded) }

func testFunnelOrderFromSucceeded(t *testing.T, s *Server) {
	register(t, s, video)
	create(t, s, flow.NewTask{TaskType: "video", TaskStage: "zeta"}, flow.NewTask{TaskType: "video", TaskStage: "zeta"},
		flow.NewTask{TaskType: "video", TaskStage: "zeta"})
	for _, tk := range hold(t, s, "video", 3, 0) {
		do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: flow.StatusPending, TaskStage: "alpha"}, nil, 200)
	}
	for _, tk := range hold(t, s, "video", 3, 0) {
		do(t, s, "/v1/set_task", flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: flow.StatusSuccess}, nil, 200)
	}
	var nts []flow.NewTask
	for range 9 {
		nts = append(nts, flow.NewTask{TaskType: "video", TaskStage: "zeta"})
	}
	create(t, s, nts...)
	var out FunnelResponse
	do(t, s, "/v1/funnel", nil, &out, 200)
	st := out.Types[0].Stages
	if len(st) != 2 || st[0].Stage != "zeta" || st[0].Counts["pending"] != 9 || st[1].Stage != "alpha" || st[1].Counts["success"] != 3 {
		t.Fatalf("stages %+v, want zeta (9 pending) then alpha (3 succeeded)", st)
	}
}
