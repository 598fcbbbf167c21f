package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// myPlanStore is a MySQL store with 60,000 tasks of three types, oldest
// first: mostly succeeded, a few failed, cancelled or held, and the newest
// fifth pending; and analyze, which runs ANALYZE (or, for a write, EXPLAIN)
// of a statement and returns its plan's lines.
func myPlanStore(t *testing.T, prefix string) (s *SQLStore, analyze func(q string, args ...any) []map[string]string) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, "mysql://"+testenv.MySQL(t), Options{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.DropTables(context.Background())
		s.Close()
	})
	if _, err := s.w.ExecContext(ctx, `INSERT INTO `+prefix+`tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
		crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time)
		WITH RECURSIVE g (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 300),
		n (i) AS (SELECT a.i * 300 + b.i - 300 FROM g a, g b WHERE a.i * 300 + b.i - 300 <= 60000)
		SELECT LPAD(HEX(i), 26, '0'), CONCAT('type', i % 3), CONCAT('s', i % 2),
		CASE WHEN i > 48000 THEN 1 WHEN i % 500 = 0 THEN 2 WHEN i % 97 = 0 THEN 4 WHEN i % 89 = 0 THEN 5 ELSE 3 END,
		'{}', 0, i, 0, 1, 1000, 1000, CASE WHEN i % 500 = 0 THEN CONCAT('w', i % 3) ELSE '' END, '', i, '[]', i, i FROM n`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "ANALYZE TABLE "+prefix+"tasks"); err != nil {
		t.Fatal(err)
	}
	// ANALYZE runs the query: r_rows is what it read from the table.
	analyze = func(q string, args ...any) []map[string]string {
		t.Helper()
		how := "ANALYZE "
		if !strings.HasPrefix(q, "SELECT") {
			how = "EXPLAIN "
		}
		rows, err := s.r.QueryContext(ctx, how+q, args...)
		if err != nil {
			t.Fatalf("analyze %s: %v", q, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var out []map[string]string
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for i, v := range vals {
				m[cols[i]] = v.String
			}
			out = append(out, m)
		}
		return out
	}
	return s, analyze
}

// On MySQL/MariaDB a listing of one type and status (the funnel's sample,
// get_task_list with both filters) reads list_idx, whose entries for the
// pair are in id order, and so reads about as many rows as it returns.
// Left to itself MariaDB walked the primary key for the most common
// status, filtering out the other types' and statuses' rows (here three
// rows read per row returned, six with a stage), and read the rare ones
// from claim_idx or lease_idx and sorted them.
func TestMySQLListUsesListIndex(t *testing.T) {
	s, analyze := myPlanStore(t, "lmplan_")
	const limit = 100
	for _, st := range flow.AllStatuses() {
		for _, f := range []ListFilter{
			{TaskType: "type1", Status: st, Limit: limit},
			{TaskType: "type1", Status: st, After: strings.Repeat("0", 20) + "000100", Limit: limit},
			{TaskType: "type1", Status: st, TaskStage: "s1", Limit: limit},
		} {
			q, args := s.drv.listQuery(f)
			for _, l := range analyze(q, args...) {
				if l["table"] != "lmplan_tasks" {
					continue
				}
				read, _ := strconv.ParseFloat(l["r_rows"], 64)
				t.Logf("status %v %+v: key=%s r_rows=%s extra=%s", st, f, l["key"], l["r_rows"], l["Extra"])
				// A stage filter reads about two rows per row returned.
				if l["key"] != "list_idx" || strings.Contains(l["Extra"], "filesort") || read > 3*limit {
					t.Errorf("list of type1, status %v (%+v): key %s, %s rows read, %s", st, f, l["key"], l["r_rows"], l["Extra"])
				}
			}
		}
	}
}

// On MySQL/MariaDB the statements that looked tasks up by status read the
// generated columns' indexes that stand in for partial ones (see the
// last migration): the claim and the next due time claim_idx (pending_at),
// the lease sweep, the heartbeat and a worker's held tasks lease_idx
// (lease_at), the retention delete ended_idx (ended_at). Each reads about
// as many rows as it returns (a worker's: every held task's entry, as
// before), never the table; only the worker's tasks are sorted (by id, a
// hold's worth).
func TestMySQLStatusReadsUseIndexes(t *testing.T) {
	s, analyze := myPlanStore(t, "smplan_")
	d := s.drv.(*myDriver)
	now := time.UnixMicro(60001)
	const limit = 100
	for _, c := range []struct {
		name, q, key string
		args         []any
		most         float64 // rows read (ANALYZE) or estimated (EXPLAIN of a write), at most
		sort         bool
	}{
		{"hold", d.q.holdSel, "claim_idx", dueArgs(HoldParams{TaskType: "type1", Now: now, Limit: limit}), limit, false},
		{"hold without logs", d.q.holdSelNoLog, "claim_idx", dueArgs(HoldParams{TaskType: "type1", Now: now, Limit: limit}), limit, false},
		{"next due", s.q.nextDue, "claim_idx", []any{"type1"}, 1, false},
		{"lease sweep", s.q.rescueSel, "lease_idx", []any{us(now), limit}, limit, false},
		{"held by", d.q.heldBy, "lease_idx", []any{"w1"}, 120, false},
		{"worker's tasks", s.q.workerSel, "lease_idx", []any{"w1"}, 120, true},
		{"heartbeat", d.q.heartbeat, "lease_idx", []any{us(now), us(now), "w1"}, 120, false},
		{"retention", s.q.prune, "ended_idx", pruneArgs(now, limit), 48000, false},
	} {
		for _, l := range analyze(c.q, c.args...) {
			if !strings.HasPrefix(l["table"], "smplan_tasks") && l["table"] != "t" {
				continue
			}
			rows, _ := strconv.ParseFloat(l["rows"], 64)
			if r, ok := l["r_rows"]; ok {
				rows, _ = strconv.ParseFloat(r, 64)
			}
			t.Logf("%s: key=%s rows=%s r_rows=%s extra=%s", c.name, l["key"], l["rows"], l["r_rows"], l["Extra"])
			if l["key"] != c.key || strings.Contains(l["Extra"], "filesort") != c.sort || rows > c.most+1 {
				t.Errorf("%s: key %s (want %s), rows %s, r_rows %s, %s", c.name, l["key"], c.key, l["rows"], l["r_rows"], l["Extra"])
			}
		}
	}
}

// A MySQL database made by main's schema before the status columns (the
// last migration) upgrades in place: its pending task is held, its
// processing one is swept when its lease ends, its ended one pruned, each
// through the new columns filled from the rows already there.
func TestMySQLStatusColumnsUpgrade(t *testing.T) {
	ctx := context.Background()
	const p = "supg_"
	old, err := openMySQL(ctx, "mysql://"+testenv.MySQL(t)) // pools and driver, no schema yet
	if err != nil {
		t.Fatal(err)
	}
	old.p = p
	old.DropTables(ctx)
	defer old.Close()
	defer old.DropTables(ctx) // before Close: deferred calls run last first
	before := len(myMigrations) - 1
	for _, step := range myMigrations[:before] {
		for _, stmt := range step {
			if _, err := old.w.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", p)); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := flow.NewTaskIDs(now, 3)
	row := func(id string, st flow.Status) string {
		return fmt.Sprintf("('%s', 't', 'a', %d, 0, 0, 0, 1, 1000, 1000, 'w', 'l', 0, '[]', 0, 0)", id, st)
	}
	for _, q := range []string{
		"CREATE TABLE " + p + "meta (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL)",
		fmt.Sprintf("INSERT INTO %smeta (name, value) VALUES ('schema_version', %d)", p, before),
		"INSERT INTO " + p + "task_types (task_type, schedule_limit, schedule_interval_ms, max_processing_ms, max_retry_num, retry_interval_ms, max_retry_interval_ms, create_time, modify_time)" +
			" VALUES ('t', 10, 1000, 60000, 1, 1000, 1000, 0, 0)",
		"INSERT INTO " + p + "tasks (task_id, task_type, task_stage, status, priority, order_time, crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms," +
			" owner, lease, lease_expiry, schedule_log, create_time, modify_time) VALUES " +
			row(ids[0], flow.StatusPending) + ", " + row(ids[1], flow.StatusProcessing) + ", " + row(ids[2], flow.StatusSuccess),
	} {
		if _, err := old.w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err := Open(ctx, "mysql://"+testenv.MySQL(t), Options{TablePrefix: p})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if due, ok, err := s.NextDue(ctx, "t"); err != nil || !ok || !due.Equal(fromUS(0)) {
		t.Fatalf("next due after the upgrade = %v, %v, %v; want the pending task's", due, ok, err)
	}
	held, err := s.Hold(ctx, HoldParams{TaskType: "t", WorkerID: "w2", Limit: 10, Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute)})
	if err != nil || len(held) != 1 || held[0].TaskID != ids[0] {
		t.Fatalf("hold after the upgrade = %+v, %v; want %s alone", held, err, ids[0])
	}
	if n, err := s.RescueExpired(ctx, now, 10); err != nil || n != 1 {
		t.Fatalf("rescued %d, %v; want the old processing task", n, err)
	}
	if n, err := s.PruneEnded(ctx, now, 10); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the old ended task", n, err)
	}
}
