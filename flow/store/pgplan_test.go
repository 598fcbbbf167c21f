package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// On PostgreSQL a hold and a final set each write one index entry fewer
// than a type index over all rows would cost (postgres.go, the fifth
// migration); what that index served must still be served by one: every
// get_task_list of a type, by each status and by none, and the prune, are
// index scans, never a scan of the table, on a table big enough that the
// planner would prefer one if no index fitted.
func TestPostgresListAndPruneUseIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.Postgres(t), Options{TablePrefix: "plan_"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DropTables(context.Background())
		s.Close()
	}()
	// 60,000 tasks of three types: mostly succeeded, some pending, a few
	// held, failed or cancelled.
	if _, err := s.w.ExecContext(ctx, `INSERT INTO plan_tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
		crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time)
		SELECT lpad(to_hex(i), 26, '0'), 'type' || (i % 3), 'a', CASE WHEN i % 50 = 0 THEN 2 WHEN i % 10 = 0 THEN 1
		WHEN i % 97 = 0 THEN 4 WHEN i % 89 = 0 THEN 5 ELSE 3 END,
		'{}', 0, i, 0, 1, 1000, 1000, '', '', i, '[]', i, i FROM generate_series(1, 60000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "ANALYZE plan_tasks"); err != nil {
		t.Fatal(err)
	}
	explain := func(q string, args ...any) string {
		t.Helper()
		rows, err := s.r.QueryContext(ctx, "EXPLAIN "+s.drv.rebind(q), args...)
		if err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		return strings.Join(lines, "\n")
	}
	// Each listing either walks the key in order (where most rows of the
	// type match, the planner stops after a page) or reads the status's
	// own index; rare statuses must come from their index.
	for _, st := range append([]flow.Status{0}, flow.AllStatuses()...) {
		for _, after := range []string{"", strings.Repeat("0", 20) + "000100"} {
			q, args := pgListByType("plan_tasks", s.q.cols, ListFilter{TaskType: "type1", Status: st, After: after, Limit: 100})
			p := explain(q, args...)
			if strings.Contains(p, "Seq Scan") {
				t.Errorf("list of a type, status %v, after %q, scans the table:\n%s", st, after, p)
			}
			want := map[flow.Status]string{flow.StatusPending: "plan_tasks_pending", flow.StatusProcessing: "plan_tasks_lease",
				flow.StatusFailed: "plan_tasks_ended_list", flow.StatusCancelled: "plan_tasks_ended_list"}[st]
			if want != "" && !strings.Contains(p, want) {
				t.Errorf("list of a type, status %v, does not read %s:\n%s", st, want, p)
			}
		}
	}
	// A hold finds the rows it locked again by their address, not the key.
	if p := explain(s.drv.(*pgDriver).q.hold, "type1", int64(1<<40), "type1", int64(1<<40), 500, "w", "lease", int64(1), int64(1), "2026-11-25T00:00:00Z", "w"); !strings.Contains(p, "Tid Scan") {
		t.Errorf("hold does not find its rows by ctid:\n%s", p)
	}
	// The batch to delete comes from a walk of the key up to the cutoff's
	// id (how the DELETE then finds those rows is the planner's choice).
	p := explain(s.q.prune, flow.TaskIDFloor(time.UnixMicro(30000)), int64(30000), 1000)
	if !strings.Contains(p, "Index Cond: ((task_id)::text < ") {
		t.Errorf("prune does not walk the key:\n%s", p)
	}
	var idx []string
	rows, err := s.r.QueryContext(ctx, "SELECT indexname FROM pg_indexes WHERE tablename = 'plan_tasks' ORDER BY indexname")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		idx = append(idx, n)
	}
	rows.Close()
	if got := strings.Join(idx, " "); got != "plan_tasks_claim plan_tasks_ended_list plan_tasks_fair plan_tasks_lease plan_tasks_parent plan_tasks_pending plan_tasks_pkey plan_tasks_rate plan_tasks_seq plan_tasks_seq_proc plan_tasks_unique plan_tasks_waiting" {
		t.Errorf("indexes = %s", got)
	}
}

// The hold's key checks (keys.go) probe indexes, never scan: the claim
// still walks the claim index in order_time order, a rate key is a
// probe of rate_keys, and a sequence key probes of the partial indexes
// of live keyed tasks, on a table where every pending
// task has both keys (20,000 pending of 60,000, 2,000 keys).
func TestPostgresKeyedHoldUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.Postgres(t), Options{TablePrefix: "kplan_"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DropTables(ctx) // the counts' tables too
		s.Close()
	}()
	if _, err := s.w.ExecContext(ctx, `INSERT INTO kplan_tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
		crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time,
		sequence_key, rate_key)
		SELECT lpad(to_hex(i), 26, '0'), 'type1', 'a', CASE WHEN i % 3 = 0 THEN 1 ELSE 3 END,
		'{}', 0, i, 0, 1, 1000, 1000, '', '', 0, '[]', i, i, 'k' || (i % 2000), 'r' || (i % 100) FROM generate_series(1, 60000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "INSERT INTO kplan_rate_keys SELECT 'type1', 'r' || i, 0, 0 FROM generate_series(1, 100) i"); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"kplan_tasks", "kplan_rate_keys"} {
		if _, err := s.w.ExecContext(ctx, "ANALYZE "+tbl); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.r.QueryContext(ctx, "EXPLAIN "+s.drv.(*pgDriver).q.hold, "type1", int64(1<<40), "type1", int64(1<<40), 100, "w", "lease", int64(1), int64(1), "2026-11-25T00:00:00Z", "w")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var l string
		rows.Scan(&l)
		lines = append(lines, l)
	}
	rows.Close()
	p := strings.Join(lines, "\n")
	t.Logf("keyed hold:\n%s", p)
	// The planner may hash the paused keys and the processing keyed
	// tasks once per claim (both small) or probe them per row; either
	// way it never scans the tasks.
	if strings.Contains(p, "Seq Scan on kplan_tasks") {
		t.Errorf("keyed hold scans the tasks:\n%s", p)
	}
	for _, want := range []string{"kplan_tasks_claim", "kplan_keys_free("} {
		if !strings.Contains(p, want) {
			t.Errorf("keyed hold does not use %s:\n%s", want, p)
		}
	}
	// The probes keys_free runs (pgKeysFree) never scan the tasks; the
	// older-live probe reads the live keyed tasks' index. (The paused
	// keys, 100 rows here, may be scanned; no task is processing, so the
	// lease index answers the last probe as well as any.)
	for probe, want := range map[string]string{
		"SELECT 1 FROM kplan_rate_keys r WHERE r.task_type = 'type1' AND r.rate_key = 'r1' AND r.paused_until > 5": "kplan_rate_keys",
		"SELECT 1 FROM kplan_tasks sq WHERE sq.task_type = 'type1' AND sq.sequence_key = 'k1' AND sq.sequence_key <> '' AND sq.status IN (1, 2, 6)" +
			` AND (sq.create_time, sq.task_id) < (30001, '00000000000000000000007531' COLLATE "C")`: "kplan_tasks_seq ",
		"SELECT 1 FROM kplan_tasks sq WHERE sq.task_type = 'type1' AND sq.sequence_key = 'k1' AND sq.sequence_key <> '' AND sq.status = 2": "kplan_tasks",
	} {
		var lines []string
		rows, err := s.r.QueryContext(ctx, "EXPLAIN "+probe)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var l string
			rows.Scan(&l)
			lines = append(lines, l)
		}
		rows.Close()
		if p := strings.Join(lines, "\n"); !strings.Contains(p, want) || strings.Contains(p, "Seq Scan on kplan_tasks") {
			t.Errorf("key probe does not use %s:\n%s\n%s", want, probe, p)
		}
	}
}
