package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// A claim whose snapshot missed an older task of its sequence key (its
// create committed after the claim read) is given back by the check that
// follows the claim, before any worker has the task: pending again, no
// retry spent, a "returned" entry in its log, the older task still first.
// The race itself cannot be timed from a test; the claim's outcome is
// made by hand here.
func TestAdmitGivesBackATaskBehindAnOlderOne(t *testing.T) {
	t.Parallel()
	for _, db := range []struct{ name, dsn string }{
		{"sqlite", "sqlite://" + filepath.Join(t.TempDir(), "k.db")},
		{"postgres", "postgres"},
		{"mysql", "mysql"},
	} {
		t.Run(db.name, func(t *testing.T) {
			dsn := db.dsn
			switch dsn {
			case "postgres":
				dsn = testenv.Postgres(t)
			case "mysql":
				dsn = "mysql://" + testenv.MySQL(t)
			}
			ctx := context.Background()
			s, err := Open(ctx, dsn, Options{TablePrefix: "adm_" + db.name + "_"})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, tbl := range []string{"tasks", "task_types", "meta", "rate_keys"} {
					s.w.Exec("DROP TABLE IF EXISTS " + s.p + tbl)
				}
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
