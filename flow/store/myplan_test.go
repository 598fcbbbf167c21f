package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// On MySQL/MariaDB a listing of one type and status (the funnel's sample,
// get_task_list with both filters) reads list_idx, whose entries for the
// pair are in id order, and so reads about as many rows as it returns.
// Left to itself MariaDB walked the primary key for the most common
// status, filtering out the other types' and statuses' rows (here three
// rows read per row returned, six with a stage), and read the rare ones
// from claim_idx or lease_idx and sorted them.
func TestMySQLListUsesListIndex(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "mysql://"+testenv.MySQL(t), Options{TablePrefix: "lmplan_"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DropTables(context.Background())
		s.Close()
	}()
	// 60,000 tasks of three types, oldest first: mostly succeeded, a few
	// failed, cancelled or held, and the newest fifth pending.
	if _, err := s.w.ExecContext(ctx, `INSERT INTO lmplan_tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
		crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time)
		WITH RECURSIVE g (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 300),
		n (i) AS (SELECT a.i * 300 + b.i - 300 FROM g a, g b WHERE a.i * 300 + b.i - 300 <= 60000)
		SELECT LPAD(HEX(i), 26, '0'), CONCAT('type', i % 3), CONCAT('s', i % 2),
		CASE WHEN i > 48000 THEN 1 WHEN i % 500 = 0 THEN 2 WHEN i % 97 = 0 THEN 4 WHEN i % 89 = 0 THEN 5 ELSE 3 END,
		'{}', 0, i, 0, 1, 1000, 1000, '', '', i, '[]', i, i FROM n`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "ANALYZE TABLE lmplan_tasks"); err != nil {
		t.Fatal(err)
	}
	// ANALYZE runs the query: r_rows is what it read from the table.
	analyze := func(q string, args ...any) []map[string]string {
		t.Helper()
		rows, err := s.r.QueryContext(ctx, "ANALYZE "+q, args...)
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
