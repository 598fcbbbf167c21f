package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// A PostgreSQL database made by the schema before the text log (version
// 5, the log in a jsonb column) upgrades in place: its logs, now jsonb's
// rendering as text, take the next entries, a full one drops its oldest,
// and every log reads back whole.
func TestPostgresUpgradeKeepsJSONBLogs(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	const p = "upg_"
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	drop := func() {
		for _, tbl := range []string{"tasks", "task_types", "meta", "counts", "count_deltas", "rate_keys"} {
			db.Exec("DROP TABLE IF EXISTS " + p + tbl)
		}
		db.Exec("DROP FUNCTION IF EXISTS " + p + "count_ins(), " + p + "count_del(), " + p + "count_upd()")
	}
	drop()
	defer drop()
	const before = 5
	for _, step := range pgMigrations[:before] {
		for _, stmt := range step {
			if _, err := db.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", p)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+p+"meta (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+p+"meta VALUES ('schema_version', $1)", before); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	entry := func(i int) string {
		return fmt.Sprintf(`{"at":%q,"worker":"old-%d","stage":"a","event":"pending"}`, at.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i)
	}
	var full []string
	for i := 0; i < flow.ScheduleLogSize; i++ {
		full = append(full, entry(i))
	}
	ids := flow.NewTaskIDs(at, 2)
	logs := []string{"[" + strings.Join(full, ",") + "]", "[" + entry(0) + "]"}
	for i, id := range ids {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+p+`tasks (task_id, task_type, task_stage, status, task_context, priority, order_time,
			crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, schedule_log, create_time, modify_time)
			VALUES ($1, 't', 'a', 1, '{}', 0, $2, 0, 1, 1000, 1000, $3::jsonb, $2, $2)`, id, at.UnixMicro()+int64(i), logs[i]); err != nil {
			t.Fatal(err)
		}
	}

	s, err := Open(ctx, dsn, Options{TablePrefix: p})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var typ string
	if err := s.r.QueryRowContext(ctx, "SELECT data_type FROM information_schema.columns WHERE table_name = $1 AND column_name = 'schedule_log'", p+"tasks").Scan(&typ); err != nil || typ != "text" {
		t.Fatalf("schedule_log is %q (%v) after the upgrade, want text", typ, err)
	}
	tt := flow.TaskType{TaskType: "t", ScheduleLimit: 10, MaxProcessingMS: 60000, MaxRetryNum: 1, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
	if err := s.RegisterType(ctx, tt, at); err != nil {
		t.Fatal(err)
	}
	now := at.Add(time.Hour)
	held, err := s.Hold(ctx, HoldParams{TaskType: "t", WorkerID: `w "quoted"`, Limit: 2, Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute)})
	if err != nil || len(held) != 2 {
		t.Fatalf("held %d, %v", len(held), err)
	}
	for _, h := range held {
		errs, err := s.SetTasks(ctx, []flow.SetTaskRequest{{TaskID: h.TaskID, Lease: h.Lease, Status: flow.StatusSuccess}}, now.Add(time.Second))
		if err != nil || errs[0] != nil {
			t.Fatalf("set: %v %v", err, errs)
		}
	}
	events := func(l []flow.LogEntry) string {
		var out []string
		for _, e := range l {
			out = append(out, e.Worker+"/"+e.Event)
		}
		return strings.Join(out, " ")
	}
	want := map[string]string{
		ids[0]: `old-2/pending old-3/pending old-4/pending old-5/pending old-6/pending old-7/pending old-8/pending old-9/pending w "quoted"/held w "quoted"/success`,
		ids[1]: `old-0/pending w "quoted"/held w "quoted"/success`,
	}
	for _, id := range ids {
		r, err := s.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := events(r.ScheduleLog); got != want[id] {
			t.Errorf("task %s log:\n got %s\nwant %s", id, got, want[id])
		}
	}
}
