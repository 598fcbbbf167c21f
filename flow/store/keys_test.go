package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// keyDBs are the databases the keys tests run on, each DSN made in the
// subtest (SQLite's file in its own temporary directory).
var keyDBs = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "keys.db") }},
	{"postgres", func(t *testing.T) string { return testenv.Postgres(t) }},
	{"mysql", func(t *testing.T) string { return "mysql://" + testenv.MySQL(t) }},
}

// A claim whose snapshot missed an older task of its sequence key (its
// create committed after the claim read) is given back by the check that
// follows the claim, before any worker has the task: pending again, no
// retry spent, a "returned" entry in its log, the older task still first.
// The race itself cannot be timed from a test; the claim's outcome is
// made by hand here.
func TestAdmitGivesBackATaskBehindAnOlderOne(t *testing.T) {
	t.Parallel()
	for _, db := range keyDBs {
		t.Run(db.name, func(t *testing.T) {
			dsn := db.dsn(t)
			ctx := context.Background()
			s, err := Open(ctx, dsn, Options{TablePrefix: "adm_" + db.name + "_"})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				s.DropTables(ctx) // the counts' tables too
				s.Close()
			}()
			tt := flow.TaskType{TaskType: "t", ScheduleLimit: 10, MaxProcessingMS: 60000, MaxRetryNum: 1, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			if err := s.RegisterType(ctx, tt, now); err != nil {
				t.Fatal(err)
			}
			ids := flow.NewTaskIDs(now, 2)
			recs := []flow.Record{flow.NewRecord(ids[0], flow.NewTask{TaskType: "t", TaskStage: "a", SequenceKey: "k"}, tt, now),
				flow.NewRecord(ids[1], flow.NewTask{TaskType: "t", TaskStage: "a", SequenceKey: "k"}, tt, now)}
			if err := s.CreateTasks(ctx, recs); err != nil {
				t.Fatal(err)
			}
			// The younger task as a claim that missed the older one leaves it.
			if _, err := s.w.ExecContext(ctx, s.drv.rebind("UPDATE "+s.tasks()+" SET status = 2, owner = 'w', lease = 'L', lease_expiry = 1 WHERE task_id = ?"), ids[1]); err != nil {
				t.Fatal(err)
			}
			young, err := s.GetTask(ctx, ids[1])
			if err != nil {
				t.Fatal(err)
			}
			p := HoldParams{TaskType: "t", WorkerID: "w", Limit: 10, Lease: "L", Now: now, LeaseExpiry: now.Add(time.Minute)}
			out, err := s.admit(ctx, p, []flow.Record{young})
			if err != nil || len(out) != 0 {
				t.Fatalf("admit = %v, %v; want the younger task given back", out, err)
			}
			r, err := s.GetTask(ctx, ids[1])
			if err != nil {
				t.Fatal(err)
			}
			last := r.ScheduleLog[len(r.ScheduleLog)-1]
			if r.Status != flow.StatusPending || r.Lease != "" || r.CrtRetryNum != 0 || last.Event != flow.EventReturned {
				t.Fatalf("given back: %s lease %q retries %d last log %+v", r.Status, r.Lease, r.CrtRetryNum, last)
			}
			held, err := s.Hold(ctx, p)
			if err != nil || len(held) != 1 || held[0].TaskID != ids[0] {
				t.Fatalf("next hold = %v, %v; want the older task %s", held, err, ids[0])
			}
		})
	}
}

// A database made by the schema before the keys (every driver's last
// version but one) upgrades in place: its tasks, with no keys, are held as
// before, and keyed tasks work at once.
func TestKeysUpgradeInPlace(t *testing.T) {
	t.Parallel()
	for _, db := range keyDBs {
		t.Run(db.name, func(t *testing.T) {
			dsn := db.dsn(t)
			ctx := context.Background()
			p := "kupg_" + db.name + "_"
			var open func(context.Context, string) (*SQLStore, error)
			for _, d := range drivers {
				if d.name == db.name {
					open = d.open
				}
			}
			old, err := open(ctx, dsn) // pools and driver, no schema yet
			if err != nil {
				t.Fatal(err)
			}
			old.p = p // for DropTables: the test writes p's tables itself
			drop := func() { old.DropTables(ctx) }
			drop()
			defer old.Close()
			defer drop() // before Close: deferred calls run last first
			migs := old.drv.migrations()
			before := len(migs) - 1
			for _, step := range migs[:before] {
				for _, stmt := range step {
					if _, err := old.w.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", p)); err != nil {
						t.Fatal(err)
					}
				}
			}
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			stmts := []string{
				"CREATE TABLE " + p + "meta (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL)",
				fmt.Sprintf("INSERT INTO %smeta (name, value) VALUES ('schema_version', %d)", p, before),
				"INSERT INTO " + p + "task_types (task_type, schedule_limit, schedule_interval_ms, max_processing_ms, max_retry_num, retry_interval_ms, max_retry_interval_ms, create_time, modify_time)" +
					" VALUES ('t', 10, 1000, 60000, 1, 1000, 1000, 0, 0)",
				"INSERT INTO " + p + "tasks (task_id, task_type, task_stage, status, priority, order_time, crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, schedule_log, create_time, modify_time)" +
					fmt.Sprintf(" VALUES ('%s', 't', 'a', 1, 0, 0, 0, 1, 1000, 1000, '[]', 0, 0)", flow.NewTaskIDs(now, 1)[0]),
			}
			for _, q := range stmts {
				if _, err := old.w.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			s, err := Open(ctx, dsn, Options{TablePrefix: p})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			hp := HoldParams{TaskType: "t", WorkerID: "w", Limit: 10, Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute)}
			if held, err := s.Hold(ctx, hp); err != nil || len(held) != 1 || held[0].SequenceKey != "" {
				t.Fatalf("hold after the upgrade = %+v, %v; want the old task", held, err)
			}
			tt, err := s.GetType(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			ids := flow.NewTaskIDs(now, 2)
			recs := []flow.Record{flow.NewRecord(ids[0], flow.NewTask{TaskType: "t", TaskStage: "a", SequenceKey: "k", RateKey: "r"}, tt, now),
				flow.NewRecord(ids[1], flow.NewTask{TaskType: "t", TaskStage: "a", SequenceKey: "k", RateKey: "r"}, tt, now)}
			if err := s.CreateTasks(ctx, recs); err != nil {
				t.Fatal(err)
			}
			hp.Lease = flow.NewLease()
			if held, err := s.Hold(ctx, hp); err != nil || len(held) != 1 || held[0].TaskID != ids[0] {
				t.Fatalf("keyed hold after the upgrade = %+v, %v; want %s alone", held, err, ids[0])
			}
		})
	}
}
