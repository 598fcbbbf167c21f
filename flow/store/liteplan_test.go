package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// stats on SQLite reads the counts table only, never the tasks (a row
// read per task, 50 ms for 20,000 tasks, on every console poll); prune a
// range of old ended tasks per type, never the whole index.
func TestLiteStatsAndPruneReadIndexesOnly(t *testing.T) {
	s, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "p.db"), Options{TablePrefix: "p_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plan := func(q string, args ...any) []string {
		t.Helper()
		rows, err := s.r.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			out = append(out, detail)
		}
		return out
	}
	// Stats reads the kept counts, never the tasks.
	stats := plan(s.countsRead(false))
	t.Logf("stats: %q", stats)
	for _, l := range stats {
		if strings.Contains(l, "p_tasks") {
			t.Errorf("stats reads the tasks table: %q", l)
		}
	}
	// The DELETE's own lookup by task_id is the primary key; the batch it
	// deletes must come from a range of the ended index.
	prune := plan(s.q.prune, int64(1), 10)
	t.Logf("prune: %q", prune)
	found := false
	for _, l := range prune {
		if strings.Contains(l, "p_tasks_ended (status=? AND task_type=? AND modify_time<?)") {
			found = true
		}
		if strings.HasPrefix(l, "SCAN") && strings.Contains(l, "p_tasks") && !strings.Contains(l, "task_types") {
			t.Errorf("prune scans: %q", l)
		}
	}
	if !found {
		t.Errorf("prune does not seek old ended tasks per status and type: %q", prune)
	}
}

// A task whose stored schedule log cannot be read is still handed out by
// a hold (without its log), and the other tasks of the batch with it: the
// claim has committed by the time the logs are read, so failing the hold
// would strand the whole batch under a lease no worker holds.
func TestHoldHandsOutATaskWithAnUnreadableLog(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "l.db"), Options{TablePrefix: "l_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tt := flow.TaskType{TaskType: "t", ScheduleLimit: 10, MaxProcessingMS: 60000, MaxRetryNum: 1, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
	now := time.Now().UTC()
	if err := s.RegisterType(ctx, tt, now); err != nil {
		t.Fatal(err)
	}
	ids := flow.NewTaskIDs(now, 2)
	recs := []flow.Record{flow.NewRecord(ids[0], flow.NewTask{TaskType: "t", TaskStage: "a"}, tt, now), flow.NewRecord(ids[1], flow.NewTask{TaskType: "t", TaskStage: "a"}, tt, now)}
	if err := s.CreateTasks(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "UPDATE l_tasks SET schedule_log = 'not json' WHERE task_id = ?", ids[0]); err != nil {
		t.Fatal(err)
	}
	held, err := s.Hold(ctx, HoldParams{TaskType: "t", WorkerID: "w", Limit: 10, Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute)})
	if err != nil {
		t.Fatalf("hold: %v", err)
	}
	if len(held) != 2 || held[0].TaskID != ids[0] || held[0].ScheduleLog != nil || len(held[1].ScheduleLog) != 2 {
		t.Fatalf("held %+v", held)
	}
}

// The hold's key checks (keys.go) on SQLite: the claim walks the claim
// index, and each check is a search of an index, never a scan.
func TestLiteKeyedHoldUsesIndexes(t *testing.T) {
	s, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "k.db"), Options{TablePrefix: "k_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := s.drv.(*liteDriver)
	rows, err := s.r.Query("EXPLAIN QUERY PLAN "+d.q.hold, "w", "lease", int64(1), int64(1), "2026-11-25T00:00:00Z", "w", "type1", int64(1<<40), "type1", int64(1<<40), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	t.Logf("keyed hold: %q", plan)
	all := strings.Join(plan, "\n")
	for _, l := range plan {
		if strings.HasPrefix(l, "SCAN") && !strings.Contains(l, "INDEX") {
			t.Errorf("keyed hold scans: %q", l)
		}
	}
	for _, want := range []string{"k_tasks_claim", "rk USING PRIMARY KEY", "k_tasks_seq ", "k_tasks_seq_proc"} {
		if !strings.Contains(all, want) {
			t.Errorf("keyed hold does not use %s: %q", want, plan)
		}
	}
}
