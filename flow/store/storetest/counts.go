package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// countKey is a (type, stage, status) of Store.Counts.
type countKey struct {
	typ, stage string
	status     flow.Status
}

// trueCounts counts every task by listing them all.
func trueCounts(t *testing.T, s store.Store) map[countKey]int64 {
	t.Helper()
	out := map[countKey]int64{}
	after := ""
	for {
		recs, err := s.ListTasks(context.Background(), store.ListFilter{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out[countKey{r.TaskType, r.TaskStage, r.Status}]++
		}
		if len(recs) < 1000 {
			return out
		}
		after = recs[len(recs)-1].TaskID
	}
}

// checkCounts compares s's Counts (all types and each type) and Stats
// with want.
func checkCounts(t *testing.T, when string, s store.Store, want map[countKey]int64) {
	t.Helper()
	ctx := context.Background()
	got := map[countKey]int64{}
	cs, err := s.Counts(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		got[countKey{c.TaskType, c.TaskStage, c.Status}] += c.N
	}
	if !maps.Equal(got, want) {
		t.Fatalf("%s: counts\n%v\nwant (listed)\n%v", when, got, want)
	}
	for _, typ := range []string{defType.TaskType, kidType.TaskType} {
		cs, err := s.Counts(ctx, typ)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.TaskType != typ || c.N != want[countKey{c.TaskType, c.TaskStage, c.Status}] {
				t.Fatalf("%s: Counts(%q) has %+v; want %d of that key", when, typ, c, want[countKey{c.TaskType, c.TaskStage, c.Status}])
			}
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range st {
		for _, status := range flow.AllStatuses() {
			var n int64
			for k, v := range want {
				if k.typ == ts.TaskType && k.status == status {
					n += v
				}
			}
			if ts.Counts[status.String()] != n {
				t.Fatalf("%s: Stats %s %s = %d, want %d", when, ts.TaskType, status, ts.Counts[status.String()], n)
			}
		}
	}
}

// runCounts checks the task counts behind Stats, the funnel and the
// metrics: exact after creates, holds, sets (to another stage, success,
// failure, a fan-out and its join), cancels, rescues, retries, deletes
// and prunes running at once through two stores on one database, with
// folds running among them on both; and a count that drifted comes
// right again with RebuildCounts.
func runCounts(t *testing.T, f Factory) {
	t.Run("CountsExactAcrossStores", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		p := Prefix()
		a, b := f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{})
		for _, tt := range []flow.TaskType{defType, kidType} {
			if err := a.RegisterType(ctx, tt, t0); err != nil {
				t.Fatal(err)
			}
		}
		e := &env{t: t, s: a, tt: defType}
		const workers, rounds = 4, 12
		errc := make(chan error, workers)
		for w := 0; w < workers; w++ {
			go func(w int) { errc <- countsWorker(ctx, e, []store.Store{a, b}[w%2], w, rounds) }(w)
		}
		for w := 0; w < workers; w++ {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		want := trueCounts(t, a)
		if len(want) < 5 {
			t.Fatalf("the workload left only %v; it should spread over stages and statuses", want)
		}
		checkCounts(t, "after the workload", a, want)
		checkCounts(t, "after the workload, the other store", b, want)
		for _, s := range []store.Store{a, b} {
			if _, err := s.FoldCounts(ctx); err != nil {
				t.Fatal(err)
			}
		}
		checkCounts(t, "after folds", b, want)

		// A count that drifted (here set wrong by hand) is repaired.
		db, ok := a.(interface {
			DB() *sql.DB
			TablePrefix() string
		})
		if !ok {
			return
		}
		if _, err := db.DB().ExecContext(ctx, "UPDATE "+db.TablePrefix()+"counts SET n = n + 7"); err != nil {
			t.Fatal(err)
		}
		cs, err := a.Counts(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		drifted := map[countKey]int64{}
		for _, c := range cs {
			drifted[countKey{c.TaskType, c.TaskStage, c.Status}] = c.N
		}
		if maps.Equal(drifted, want) {
			t.Fatal("the hand-made drift does not show")
		}
		if err := b.RebuildCounts(ctx); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, "after a rebuild", a, want)
	})

	// One set_tasks call carries many outcomes: the counts move for each
	// (a driver may write one batch's deltas in one statement, and choose
	// its text by what the batch carries: PostgreSQL's set without a move
	// to another stage, postgres.go pgSetFast).
	t.Run("CountsExactAfterBatchedSets", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := f.Open(t, Prefix(), store.Options{})
		if err := s.RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		now := t0.Add(time.Second)
		ids := flow.NewTaskIDs(t0, 16)
		recs := make([]flow.Record, len(ids))
		for i := range ids {
			recs[i] = flow.NewRecord(ids[i], flow.NewTask{TaskType: defType.TaskType, TaskStage: []string{"fetch", "resize"}[i%2]}, defType, t0)
		}
		if err := s.CreateTasks(ctx, recs); err != nil {
			t.Fatal(err)
		}
		batch := func(outcome func(i int, r *flow.SetTaskRequest)) {
			t.Helper()
			held, err := s.Hold(ctx, store.HoldParams{TaskType: defType.TaskType, WorkerID: "w", Limit: 8, Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != 8 {
				t.Fatalf("held %d of 8", len(held))
			}
			reqs := make([]flow.SetTaskRequest, len(held))
			for i, h := range held {
				reqs[i] = flow.SetTaskRequest{TaskID: h.TaskID, Lease: h.Lease}
				outcome(i, &reqs[i])
			}
			errs, err := s.SetTasks(ctx, reqs, now)
			if err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("set %d: %v", i, err)
				}
			}
			for i, r := range reqs { // each task where its request put it
				got, err := s.GetTask(ctx, r.TaskID)
				if err != nil {
					t.Fatal(err)
				}
				stage := held[i].TaskStage
				if r.TaskStage != "" {
					stage = r.TaskStage
				}
				if got.Status != r.Status || got.TaskStage != stage {
					t.Fatalf("set %d (%v, stage %q) left the task %v at %q; want %v at %q", i, r.Status, r.TaskStage, got.Status, got.TaskStage, r.Status, stage)
				}
			}
			checkCounts(t, "after a batched set", s, trueCounts(t, s))
		}
		// No move to another stage: success, failed, pending in place.
		batch(func(i int, r *flow.SetTaskRequest) {
			r.Status = []flow.Status{flow.StatusSuccess, flow.StatusFailed, flow.StatusPending, flow.StatusSuccess}[i%4]
		})
		// Moves among them: to another stage, to the stage it is in.
		batch(func(i int, r *flow.SetTaskRequest) {
			switch i % 4 {
			case 0:
				r.Status = flow.StatusSuccess
			case 1:
				r.Status, r.TaskStage = flow.StatusPending, "upload"
			case 2:
				r.Status, r.TaskStage = flow.StatusPending, "fetch"
			case 3:
				r.Status = flow.StatusPending
			}
		})
	})

	t.Run("CountsRebuildWhileWriting", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		p := Prefix()
		a, b := f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{})
		for _, tt := range []flow.TaskType{defType, kidType} {
			if err := a.RegisterType(ctx, tt, t0); err != nil {
				t.Fatal(err)
			}
		}
		e := &env{t: t, s: a, tt: defType}
		errc := make(chan error, 3)
		go func() { errc <- countsWorker(ctx, e, a, 0, 10) }()
		go func() { errc <- countsWorker(ctx, e, b, 1, 10) }()
		go func() {
			for i := 0; i < 5; i++ {
				if err := []store.Store{a, b}[i%2].RebuildCounts(ctx); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for i := 0; i < 3; i++ {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		checkCounts(t, "rebuilds among writes", b, trueCounts(t, a))
	})
}

// countsWorker runs rounds of every kind of change through s. Holds may
// meet another worker's tasks: each worker acts only on what it held.
func countsWorker(ctx context.Context, e *env, s store.Store, w, rounds int) error {
	now := t0.Add(time.Second)
	worker := fmt.Sprint("w", w)
	hold := func(typ string, limit int, expiry time.Time) ([]flow.Record, error) {
		return s.Hold(ctx, store.HoldParams{TaskType: typ, WorkerID: worker, Limit: limit, Lease: flow.NewLease(), Now: now, LeaseExpiry: expiry})
	}
	set := func(reqs ...flow.SetTaskRequest) error {
		errs, err := s.SetTasks(ctx, reqs, now)
		if err != nil {
			return err
		}
		for _, err := range errs { // another worker cancelled, deleted or pruned the task: either is fine
			if err != nil && !errors.Is(err, flow.ErrStaleLease) && !errors.Is(err, flow.ErrNotFound) {
				return err
			}
		}
		return nil
	}
	for r := 0; r < rounds; r++ {
		ids := flow.NewTaskIDs(t0, 6)
		recs := make([]flow.Record, len(ids))
		for i := range ids {
			recs[i] = flow.NewRecord(ids[i], flow.NewTask{TaskType: defType.TaskType, TaskStage: []string{"fetch", "resize"}[i%2]}, defType, t0)
		}
		if err := s.CreateTasks(ctx, recs); err != nil {
			return err
		}
		held, err := hold(defType.TaskType, 5, now.Add(time.Minute))
		if err != nil {
			return err
		}
		for i, h := range held {
			req := flow.SetTaskRequest{TaskID: h.TaskID, Lease: h.Lease}
			switch i % 5 {
			case 0:
				req.Status = flow.StatusSuccess
			case 1:
				req.Status, req.TaskStage = flow.StatusPending, "upload"
			case 2:
				req.Status, req.Error = flow.StatusFailed, "bad input"
			case 3:
				req = e.fanOut(h, "join", flow.NewTask{TaskStage: "part"}, flow.NewTask{TaskStage: "part"})
			case 4:
				continue // left processing
			}
			if err := set(req); err != nil {
				return fmt.Errorf("set %d: %w", i%5, err)
			}
		}
		// Children: finish what this worker holds, so parents join.
		kids, err := hold(kidType.TaskType, 3, now.Add(time.Minute))
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := set(flow.SetTaskRequest{TaskID: k.TaskID, Lease: k.Lease, Status: flow.StatusSuccess}); err != nil {
				return err
			}
		}
		// A cancel (of a task another worker may hold or have ended:
		// either outcome is fine), a delete of what it cancelled.
		if err := s.CancelTask(ctx, ids[5], now); err == nil {
			if err := s.DeleteTask(ctx, ids[5]); err != nil && !errors.Is(err, flow.ErrConflict) && !errors.Is(err, flow.ErrNotFound) {
				return err
			}
		} else if !errors.Is(err, flow.ErrStaleLease) && !errors.Is(err, flow.ErrNotFound) { // ended, or ended and pruned, by another
			return err
		}
		// A lease that has run out, rescued; a failed task retried.
		if _, err := hold(defType.TaskType, 1, t0); err != nil {
			return err
		}
		if _, err := s.RescueExpired(ctx, now, 10); err != nil {
			return err
		}
		if len(held) > 2 { // failed above, unless pruned since
			if _, err := s.RetryTask(ctx, held[2].TaskID, "", nil, now); err != nil && !errors.Is(err, flow.ErrConflict) && !errors.Is(err, flow.ErrNotFound) {
				return err
			}
		}
		if r%4 == 3 {
			if _, err := s.PruneEnded(ctx, now.Add(time.Hour), 5); err != nil {
				return err
			}
		}
		if _, err := s.FoldCounts(ctx); err != nil {
			return err
		}
	}
	return nil
}
