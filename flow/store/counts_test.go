package store

import (
	"context"
	"maps"
	"path/filepath"
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
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "u.db") },
			[]string{"DROP TRIGGER {p}count_ins", "DROP TRIGGER {p}count_del", "DROP TRIGGER {p}count_upd"}},
		{"postgres", func(t *testing.T) string { return testenv.Postgres(t) },
			[]string{"DROP FUNCTION {p}count_ins(), {p}count_del(), {p}count_upd() CASCADE"}},
		{"mysql", func(t *testing.T) string { return "mysql://" + testenv.MySQL(t) },
			[]string{"DROP TRIGGER {p}count_ins", "DROP TRIGGER {p}count_del", "DROP TRIGGER {p}count_upd"}},
	} {
		t.Run(db.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := db.dsn(t)
			opts := Options{TablePrefix: "upc_" + db.name + "_"}
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
			// Back to the schema before the counts: no triggers, no
			// counts, the version before theirs.
			for _, q := range append(db.undo, "DROP TABLE {p}counts", "DROP TABLE IF EXISTS {p}count_deltas",
				"DELETE FROM {p}meta WHERE name = 'counts_filled'") {
				if _, err := s.w.ExecContext(ctx, strings.ReplaceAll(q, "{p}", s.p)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.w.ExecContext(ctx, s.drv.rebind("UPDATE "+s.p+"meta SET value = ? WHERE name = 'schema_version'"), len(s.drv.migrations())-1-stepsAfterCounts); err != nil {
				t.Fatal(err)
			}
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
