package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// stepsAfterCounts is how many migrations follow the counts' (the fair
// shares', then the one that drops the count triggers the writes
// replaced, on PostgreSQL the key probes' function, on MySQL the
// status indexes' generated columns), which TestCountsFilledOnUpgrade
// runs again after its rewind.
func stepsAfterCounts(s *SQLStore) int {
	if s.drv.name() == "sqlite" {
		return 2
	}
	return 3
}

// share splits by weight with the remainders carried: holds of one go to
// each key in turn (by weight), and every hold hands out all it may.
func TestFairShare(t *testing.T) {
	st := &fairState{credit: map[string]float64{}}
	keys := []string{"a", "b", "c"}
	got := map[string]int{}
	for i := 0; i < 60; i++ {
		alloc := st.share(keys, map[string]int{"a": 4}, 1)
		n := 0
		for k, a := range alloc {
			got[keys[k]] += a
			n += a
		}
		if n != 1 {
			t.Fatalf("hold %d handed out %d, want 1", i, n)
		}
	}
	if got["a"] != 40 || got["b"] != 10 || got["c"] != 10 {
		t.Fatalf("60 holds of one: %v, want a 40, b 10, c 10", got)
	}
	if alloc := st.share(keys, nil, 7); slices.Max(alloc)-slices.Min(alloc) > 1 || alloc[0]+alloc[1]+alloc[2] != 7 {
		t.Fatalf("equal weights, hold of 7: %v", alloc)
	}
}

// A fair hold's walk of the keys and its claim of one key probe the fair
// index, never scan: on a table where one key has 50,000 pending tasks,
// another 100, and 20,000 more have no key.
func TestPostgresFairHoldUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.Postgres(t), Options{TablePrefix: "fplan_"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DropTables(context.Background())
		s.Close()
	}()
	if _, err := s.w.ExecContext(ctx, `INSERT INTO fplan_tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
		crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time, fairness_key)
		SELECT lpad(to_hex(i), 26, '0'), 'type1', 'a', 1, '{}', 0, i, 0, 1, 1000, 1000, '', '', 0, '[]', i, i,
		CASE WHEN i <= 50000 THEN 'A' WHEN i <= 50100 THEN 'B' ELSE '' END FROM generate_series(1, 70100) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "ANALYZE fplan_tasks"); err != nil {
		t.Fatal(err)
	}
	explain := func(q string, args ...any) string {
		t.Helper()
		rows, err := s.r.QueryContext(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			rows.Scan(&l)
			lines = append(lines, l)
		}
		return strings.Join(lines, "\n")
	}
	now := int64(1 << 40)
	for name, p := range map[string]string{
		"walk":  explain(s.q.fairWalk, "type1", "", "type1", fairWalkMax, "type1"),
		"claim": explain(s.drv.(*pgDriver).q.holdKeys, "w", "lease", int64(1), int64(1), "2026-11-25T00:00:00Z", "w", []string{"A", "B"}, []int32{5, 5}, "type1", now, "type1", now),
	} {
		if strings.Contains(p, "Seq Scan on fplan_tasks") || !strings.Contains(p, "fplan_tasks_fair") {
			t.Errorf("fair %s does not probe fplan_tasks_fair:\n%s", name, p)
		}
		if name == "claim" && !strings.Contains(p, "Tid Scan") {
			t.Errorf("fair claim does not find its rows again by address:\n%s", p)
		}
	}
}

// TestMySQLFairHoldUsesIndexes is TestPostgresFairHoldUsesIndexes on
// MySQL/MariaDB: the walk and the claim of one key read fair_idx.
func TestMySQLFairHoldUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "mysql://"+testenv.MySQL(t), Options{TablePrefix: "fmplan_"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DropTables(context.Background())
		s.Close()
	}()
	if _, err := s.w.ExecContext(ctx, `INSERT INTO fmplan_tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
		crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time, fairness_key)
		WITH RECURSIVE g (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 300),
		n (i) AS (SELECT a.i * 300 + b.i - 300 FROM g a, g b WHERE a.i * 300 + b.i - 300 <= 70100)
		SELECT LPAD(HEX(i), 26, '0'), 'type1', 'a', 1, '{}', 0, i, 0, 1, 1000, 1000, '', '', 0, '[]', i, i,
		CASE WHEN i <= 50000 THEN 'A' WHEN i <= 50100 THEN 'B' ELSE '' END FROM n`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "ANALYZE TABLE fmplan_tasks"); err != nil {
		t.Fatal(err)
	}
	explain := func(q string, args ...any) string {
		t.Helper()
		rows, err := s.r.QueryContext(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var lines []string
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			rows.Scan(ptrs...)
			var parts []string
			for i, v := range vals {
				parts = append(parts, cols[i]+"="+v.String)
			}
			lines = append(lines, strings.Join(parts, " "))
		}
		return strings.Join(lines, "\n")
	}
	now := int64(1 << 40)
	for name, p := range map[string]string{
		"walk":  explain(s.q.fairWalk, "type1", "", fairWalkMax),
		"claim": explain(s.drv.(*myDriver).q.holdSelFair, "type1", "B", now, "type1", now, 10),
	} {
		t.Logf("fair %s:\n%s", name, p)
		for _, l := range strings.Split(p, "\n") {
			if strings.Contains(l, "table=fmplan_tasks ") {
				if !strings.Contains(l, "key=fair_idx") || name == "walk" && !strings.Contains(l, "Using index for group-by") {
					t.Errorf("fair %s reads the tasks without fair_idx: %s", name, l)
				}
			}
		}
	}
}
