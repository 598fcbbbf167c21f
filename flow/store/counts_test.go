package store

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// A database made before the counts (tasks in it, created, held and
// ended) gets them at the first start of a server that keeps them, and
// they are exact: the counts' migration and the first start's fill.
func TestCountsFilledOnUpgrade(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(t *testing.T) string
		// undo removes the triggers, as a database made before them.
		undo []string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "u.db") }, nil},
		{"postgres", func(t *testing.T) string { return testenv.Postgres(t) },
			nil},
		{"mysql", func(t *testing.T) string { return "mysql://" + testenv.MySQL(t) },
			[]string{"DROP TRIGGER {p}count_del"}},
	} {
		t.Run(db.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := db.dsn(t)
			// A prefix of this run's own: another checkout's tests on the
			// same database must not meet these tables mid-upgrade.
			opts := Options{TablePrefix: "upc_" + db.name + "_" + strconv.FormatInt(time.Now().UnixNano()%1e12, 36) + "_"}
			s, err := Open(ctx, dsn, opts)
			if err != nil {
				t.Fatal(err)
			}
			s.DropTables(ctx)
			s.Close()
			if s, err = Open(ctx, dsn, opts); err != nil {
				t.Fatal(err)
			}
			defer func() { s.DropTables(ctx); s.Close() }()
			tt := flow.TaskType{TaskType: "video", ScheduleLimit: 10, MaxProcessingMS: 30000, MaxRetryNum: 1, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
			now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := s.RegisterType(ctx, tt, now); err != nil {
				t.Fatal(err)
			}
			ids := flow.NewTaskIDs(now, 12)
			recs := make([]flow.Record, len(ids))
			for i := range ids {
				recs[i] = flow.NewRecord(ids[i], flow.NewTask{TaskType: "video", TaskStage: []string{"a", "b"}[i%2]}, tt, now)
			}
			if err := s.CreateTasks(ctx, recs); err != nil {
				t.Fatal(err)
			}
			held, err := s.Hold(ctx, HoldParams{TaskType: "video", WorkerID: "w", Limit: 5, Lease: "l", Now: now, LeaseExpiry: now.Add(time.Minute)})
			if err != nil || len(held) != 5 {
				t.Fatalf("held %d: %v", len(held), err)
			}
			if errs, err := s.SetTasks(ctx, []flow.SetTaskRequest{{TaskID: held[0].TaskID, Lease: "l", Status: flow.StatusSuccess}}, now); err != nil || errs[0] != nil {
				t.Fatal(err, errs)
			}
			// Back to the schema before the counts (the tasks stay): no
			// triggers, no counts, the version before theirs.
			for _, q := range append(db.undo, "DROP TABLE {p}counts", "DROP TABLE IF EXISTS {p}count_deltas",
				"DELETE FROM {p}meta WHERE name = 'counts_filled'") {
				if _, err := s.w.ExecContext(ctx, strings.ReplaceAll(q, "{p}", s.p)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.w.ExecContext(ctx, s.drv.rebind("UPDATE "+s.p+"meta SET value = ? WHERE name = 'schema_version'"), len(s.drv.migrations())-1-stepsAfterCounts(s)); err != nil {
				t.Fatal(err)
			}
			s.Close()

			if s, err = Open(ctx, dsn, opts); err != nil {
				t.Fatal(err)
			}
			want := map[Count]bool{}
			got := map[Count]bool{}
			all, err := s.ListTasks(ctx, ListFilter{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			tally := map[[3]string]int64{}
			for _, r := range all {
				tally[[3]string{r.TaskType, r.TaskStage, r.Status.String()}]++
			}
			for k, n := range tally {
				st, _ := flow.ParseStatus(k[2])
				want[Count{TaskType: k[0], TaskStage: k[1], Status: st, N: n}] = true
			}
			cs, err := s.Counts(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				got[c] = true
			}
			if len(all) != 12 || !maps.Equal(got, want) {
				t.Fatalf("counts after the upgrade %v, want %v (%d tasks)", cs, want, len(all))
			}
		})
	}
}

// A SQLite database whose counts row triggers kept (the version before
// the writes kept them) loses the triggers at the first start of a
// server that counts in its writes, and nothing is counted twice.
func TestLiteCountTriggersDropped(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "trg.db")
	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TRIGGER {p}count_ins AFTER INSERT ON {p}tasks BEGIN
			INSERT INTO {p}counts (task_type, task_stage, status, n) VALUES (NEW.task_type, NEW.task_stage, NEW.status, 1)
				ON CONFLICT (task_type, task_stage, status) DO UPDATE SET n = n + 1; END`,
		`CREATE TRIGGER {p}count_upd AFTER UPDATE OF task_type, task_stage, status ON {p}tasks
			WHEN NEW.status <> OLD.status OR NEW.task_stage <> OLD.task_stage OR NEW.task_type <> OLD.task_type BEGIN
			UPDATE {p}counts SET n = n - 1 WHERE task_type = OLD.task_type AND task_stage = OLD.task_stage AND status = OLD.status;
			INSERT INTO {p}counts (task_type, task_stage, status, n) VALUES (NEW.task_type, NEW.task_stage, NEW.status, 1)
				ON CONFLICT (task_type, task_stage, status) DO UPDATE SET n = n + 1; END`,
		`UPDATE {p}meta SET value = value - 1 WHERE name = 'schema_version'`,
	} {
		if _, err := s.w.ExecContext(ctx, strings.ReplaceAll(q, "{p}", s.p)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if s, err = Open(ctx, dsn, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	if err := s.w.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d triggers left after the upgrade (%v)", n, err)
	}
	tt := flow.TaskType{TaskType: "video", ScheduleLimit: 10, MaxProcessingMS: 30000, MaxRetryNum: 1, RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.RegisterType(ctx, tt, now); err != nil {
		t.Fatal(err)
	}
	ids := flow.NewTaskIDs(now, 4)
	recs := make([]flow.Record, len(ids))
	for i := range ids {
		recs[i] = flow.NewRecord(ids[i], flow.NewTask{TaskType: "video", TaskStage: "a"}, tt, now)
	}
	if err := s.CreateTasks(ctx, recs); err != nil {
		t.Fatal(err)
	}
	held, err := s.Hold(ctx, HoldParams{TaskType: "video", WorkerID: "w", Limit: 3, Lease: "l", Now: now, LeaseExpiry: now.Add(time.Minute)})
	if err != nil || len(held) != 3 {
		t.Fatalf("held %d: %v", len(held), err)
	}
	cs, err := s.Counts(ctx, "video")
	if err != nil {
		t.Fatal(err)
	}
	want := []Count{{"video", "a", flow.StatusPending, 1}, {"video", "a", flow.StatusProcessing, 3}}
	if !slices.Equal(cs, want) {
		t.Fatalf("counts %v, want %v", cs, want)
	}
}
