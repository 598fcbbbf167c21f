package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// runOperator checks what River and Asynq users expect beyond the core:
// unique tasks, pausing a type, and the operator's retry and delete.
func runOperator(t *testing.T, f Factory) {
	ctx := context.Background()

	t.Run("UniqueKey", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		mk := func(key string) flow.Record {
			return flow.NewRecord(flow.NewTaskIDs(t0, 1)[0], flow.NewTask{TaskType: "video", TaskStage: "s", UniqueKey: key}, e.tt, t0)
		}
		// A batch: a new key, the same key again, no key.
		batch := []flow.Record{mk("a"), mk("a"), mk("")}
		first := batch[0].TaskID
		if err := e.s.CreateTasks(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if batch[0].Existing || batch[0].TaskID != first || !batch[1].Existing || batch[1].TaskID != first || batch[2].Existing {
			t.Fatalf("batch = %+v", batch)
		}
		if got := e.get(first); got.UniqueKey != "a" {
			t.Fatalf("stored unique_key %q", got.UniqueKey)
		}
		// Still live while processing.
		held := e.hold(t0, 10, "w")
		if len(held) != 2 {
			t.Fatalf("held %d, want 2 (one per distinct task)", len(held))
		}
		again := []flow.Record{mk("a")}
		if err := e.s.CreateTasks(ctx, again); err != nil || !again[0].Existing || again[0].TaskID != first {
			t.Fatalf("create while processing: %+v %v", again[0], err)
		}
		// Another type may use the same key.
		other := e.tt
		other.TaskType = "audio"
		if err := e.s.RegisterType(ctx, other, t0); err != nil {
			t.Fatal(err)
		}
		oa := []flow.Record{flow.NewRecord(flow.NewTaskIDs(t0, 1)[0], flow.NewTask{TaskType: "audio", UniqueKey: "a"}, other, t0)}
		if err := e.s.CreateTasks(ctx, oa); err != nil || oa[0].Existing {
			t.Fatalf("same key, other type: %+v %v", oa[0], err)
		}
		// Once the task ended, the key is free again.
		for _, r := range held {
			if r.TaskID == first {
				if err := e.set(flow.SetTaskRequest{TaskID: first, Lease: r.Lease, Status: flow.StatusSuccess}, t0); err != nil {
					t.Fatal(err)
				}
			}
		}
		fresh := []flow.Record{mk("a")}
		if err := e.s.CreateTasks(ctx, fresh); err != nil || fresh[0].Existing || fresh[0].TaskID == first {
			t.Fatalf("create after the task ended: %+v %v", fresh[0], err)
		}
		// A cancelled task with key b cannot come back while another live
		// task holds b.
		b1 := []flow.Record{mk("b")}
		if err := e.s.CreateTasks(ctx, b1); err != nil {
			t.Fatal(err)
		}
		if err := e.s.CancelTask(ctx, b1[0].TaskID, t0); err != nil {
			t.Fatal(err)
		}
		b2 := []flow.Record{mk("b")}
		if err := e.s.CreateTasks(ctx, b2); err != nil || b2[0].Existing {
			t.Fatalf("create b after cancel: %+v %v", b2[0], err)
		}
		if _, err := e.s.RetryTask(ctx, b1[0].TaskID, "", nil, t0); !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("retry while the key is taken: %v, want ErrConflict", err)
		}
		// Only failed or cancelled tasks are retried.
		_, err := e.s.RetryTask(ctx, first, "", nil, t0)
		if !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("retry of a success: %v, want ErrConflict", err)
		}
	})

	t.Run("UniqueKeyConcurrentServers", func(t *testing.T) {
		t.Parallel()
		// Three stores on one set of tables, eight goroutines each, all
		// creating the same 20 keys at once: exactly one task per key.
		p := Prefix()
		stores := []store.Store{f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{})}
		if err := stores[0].RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		const keys = 20
		var mu sync.Mutex
		idOf := map[string]map[string]bool{} // key -> ids answered
		created := 0
		var wg sync.WaitGroup
		for _, s := range stores {
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < keys; k++ {
						key := fmt.Sprintf("k%d", (k+g)%keys)
						recs := []flow.Record{flow.NewRecord(flow.NewTaskIDs(t0, 1)[0], flow.NewTask{TaskType: "video", UniqueKey: key}, defType, t0)}
						if err := s.CreateTasks(ctx, recs); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if idOf[key] == nil {
							idOf[key] = map[string]bool{}
						}
						idOf[key][recs[0].TaskID] = true
						if !recs[0].Existing {
							created++
						}
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		if created != keys {
			t.Errorf("%d creates made a new task, want %d (one per key)", created, keys)
		}
		for k, ids := range idOf {
			if len(ids) != 1 {
				t.Errorf("key %s answered with %d different ids", k, len(ids))
			}
		}
		st, err := stores[0].Stats(ctx)
		if err != nil || len(st) != 1 || st[0].Counts["pending"] != keys {
			t.Fatalf("stats %+v %v, want %d pending", st, err, keys)
		}
	})

	t.Run("PauseResume", func(t *testing.T) {
		t.Parallel()
		p := Prefix()
		a, b := f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{})
		if err := a.RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		e := &env{t: t, s: a, tt: defType}
		e.create(flow.NewTask{TaskStage: "s"}, flow.NewTask{TaskStage: "s"})
		if err := a.SetPaused(ctx, "video", true, t0); err != nil {
			t.Fatal(err)
		}
		// Through the other store too: the pause is in the database.
		eb := &env{t: t, s: b, tt: defType}
		if got := eb.hold(t0, 10, "w"); len(got) != 0 {
			t.Fatalf("paused type held %d tasks", len(got))
		}
		if tt, err := b.GetType(ctx, "video"); err != nil || !tt.Paused {
			t.Fatalf("GetType after pause: %+v %v", tt, err)
		}
		st, err := b.Stats(ctx)
		if err != nil || len(st) != 1 || !st[0].Paused || st[0].Counts["pending"] != 2 {
			t.Fatalf("stats while paused: %+v %v", st, err)
		}
		// Registering again does not resume it.
		if err := a.RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		if got := eb.hold(t0, 10, "w"); len(got) != 0 {
			t.Fatalf("re-registered paused type held %d tasks", len(got))
		}
		if err := b.SetPaused(ctx, "video", false, t0); err != nil {
			t.Fatal(err)
		}
		if got := e.hold(t0, 10, "w"); len(got) != 2 {
			t.Fatalf("after resume held %d, want 2", len(got))
		}
		if err := a.SetPaused(ctx, "nope", true, t0); !errors.Is(err, flow.ErrUnknownType) {
			t.Fatalf("pause of an unknown type: %v", err)
		}
		// Pausing twice is no error.
		if err := a.SetPaused(ctx, "video", true, t0); err != nil {
			t.Fatal(err)
		}
		if err := a.SetPaused(ctx, "video", true, t0); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("RetryAndDelete", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		first := e.create(flow.NewTask{TaskStage: "one", TaskContext: json.RawMessage(`{"n":1}`)})[0]
		held := e.hold(t0, 1, "w")[0]
		// Fail it with retries used up: two retries, then failed.
		now := t0
		for i := 0; i < 3; i++ {
			if err := e.set(flow.SetTaskRequest{TaskID: held.TaskID, Lease: held.Lease, Status: flow.StatusPending, Error: "boom"}, now); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Hour)
			if i < 2 {
				held = e.hold(now, 1, "w")[0]
			}
		}
		if got := e.get(first); got.Status != flow.StatusFailed || got.CrtRetryNum != 2 {
			t.Fatalf("before retry: %+v", got)
		}
		idv := append([]string{first}, e.create(flow.NewTask{TaskStage: "one"}, flow.NewTask{TaskStage: "one"})...)
		// Retry keeps stage and context when none are given.
		later := now.Add(time.Minute)
		r, err := e.s.RetryTask(ctx, held.TaskID, "", nil, later)
		if err != nil {
			t.Fatal(err)
		}
		got := e.get(held.TaskID)
		if got.Status != flow.StatusPending || got.CrtRetryNum != 0 || got.TaskStage != "one" || string(got.TaskContext) != `{"n":1}` ||
			!got.OrderTime.Equal(later) || got.ScheduleLog[len(got.ScheduleLog)-1].Event != flow.EventRetried || r.TaskID != got.TaskID {
			t.Fatalf("after retry: %+v", got)
		}
		// A cancelled task, retried with a new stage and context.
		if err := e.s.CancelTask(ctx, idv[2], later); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.RetryTask(ctx, idv[2], "two", json.RawMessage(`{"n":2}`), later); err != nil {
			t.Fatal(err)
		}
		if got := e.get(idv[2]); got.Status != flow.StatusPending || got.TaskStage != "two" || string(got.TaskContext) != `{"n":2}` {
			t.Fatalf("cancelled then retried: %+v", got)
		}
		// Only failed and cancelled tasks are retried.
		if _, err := e.s.RetryTask(ctx, idv[1], "", nil, later); !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("retry of a pending task: %v, want ErrConflict", err)
		}
		if _, err := e.s.RetryTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "", nil, later); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("retry of a missing task: %v", err)
		}
		// Delete: not while held; otherwise gone.
		h := e.hold(later, 1, "w")[0]
		if err := e.s.DeleteTask(ctx, h.TaskID); !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("delete of a held task: %v, want ErrConflict", err)
		}
		for _, id := range idv {
			if id == h.TaskID {
				continue
			}
			if err := e.s.DeleteTask(ctx, id); err != nil && !errors.Is(err, flow.ErrNotFound) {
				t.Fatal(err)
			}
			if _, err := e.s.GetTask(ctx, id); !errors.Is(err, flow.ErrNotFound) {
				t.Fatalf("deleted task %s still there: %v", id, err)
			}
		}
		if err := e.s.DeleteTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("delete of a missing task: %v", err)
		}
	})
}

// runLiveness checks worker heartbeats and declaring a worker gone.
func runLiveness(t *testing.T, f Factory) {
	ctx := context.Background()
	t.Run("HeartbeatAndWorkerGone", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		short := defType
		short.TaskType, short.MaxProcessingMS = "short", 1000
		if err := e.s.RegisterType(ctx, short, t0); err != nil {
			t.Fatal(err)
		}
		e.create(flow.NewTask{TaskStage: "s"}, flow.NewTask{TaskStage: "s"}, flow.NewTask{TaskStage: "s"})
		sid := flow.NewTaskIDs(t0, 1)[0]
		if err := e.s.CreateTasks(ctx, []flow.Record{flow.NewRecord(sid, flow.NewTask{TaskType: "short"}, short, t0)}); err != nil {
			t.Fatal(err)
		}
		mine := e.hold(t0, 2, "w1")
		other := e.hold(t0, 1, "w2")
		sh, err := e.s.Hold(ctx, store.HoldParams{TaskType: "short", WorkerID: "w1", Limit: 1, Lease: flow.NewLease(), Now: t0, LeaseExpiry: t0.Add(time.Second)})
		if err != nil || len(sh) != 1 {
			t.Fatalf("hold short: %v %v", sh, err)
		}
		later := t0.Add(10 * time.Second)
		got, err := e.s.Heartbeat(ctx, "w1", later)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]flow.HeldLease{}
		for _, r := range mine {
			want[r.TaskID] = flow.HeldLease{TaskID: r.TaskID, Lease: r.Lease, LeaseExpiry: later.Add(30 * time.Second)}
		}
		want[sid] = flow.HeldLease{TaskID: sid, Lease: sh[0].Lease, LeaseExpiry: later.Add(time.Second)}
		if len(got) != len(want) {
			t.Fatalf("heartbeat renewed %d leases, want %d: %+v", len(got), len(want), got)
		}
		for _, l := range got {
			w := want[l.TaskID]
			if l.Lease != w.Lease || !l.LeaseExpiry.Equal(w.LeaseExpiry) {
				t.Errorf("renewed %+v, want %+v", l, w)
			}
			if r := e.get(l.TaskID); r.LeaseExpiry == nil || !r.LeaseExpiry.Equal(w.LeaseExpiry) {
				t.Errorf("stored expiry of %s = %v, want %v", l.TaskID, r.LeaseExpiry, w.LeaseExpiry)
			}
		}
		if r := e.get(other[0].TaskID); !r.LeaseExpiry.Equal(t0.Add(30 * time.Second)) {
			t.Errorf("w2's task renewed by w1's heartbeat: %v", r.LeaseExpiry)
		}
		if got, err := e.s.Heartbeat(ctx, "nobody", later); err != nil || len(got) != 0 {
			t.Fatalf("heartbeat of a worker with nothing: %v %v", got, err)
		}
		// w1 declared gone: its tasks go back to pending now (a retry
		// counted), long before their leases would expire; w2's stay.
		n, err := e.s.RescueWorker(ctx, "w1", later)
		if err != nil || n != 3 {
			t.Fatalf("rescue w1: %d %v, want 3", n, err)
		}
		for _, r := range mine {
			g := e.get(r.TaskID)
			if g.Status != flow.StatusPending || g.Owner != "" || g.CrtRetryNum != 1 || g.ScheduleLog[len(g.ScheduleLog)-1].Event != flow.EventExpired {
				t.Errorf("after worker gone: %+v", g)
			}
		}
		if g := e.get(other[0].TaskID); g.Status != flow.StatusProcessing || g.Owner != "w2" {
			t.Errorf("w2's task touched: %+v", g)
		}
		// The old lease is dead.
		if err := e.set(flow.SetTaskRequest{TaskID: mine[0].TaskID, Lease: mine[0].Lease, Status: flow.StatusSuccess}, later); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("set on the gone worker's lease: %v", err)
		}
	})
}

// runCron checks periodic types: every tick of the schedule creates exactly
// one task, however many stores fire it and whichever of them stops.
func runCron(t *testing.T, f Factory) {
	ctx := context.Background()
	t.Run("CronExactlyOnce", func(t *testing.T) {
		t.Parallel()
		for round, expr := range []string{"* * * * *", "*/7 * * * *", "0,15,30,45 * * * *", "5 */2 * * *"} {
			cronRound(t, ctx, f, round, expr)
		}
	})
}

func cronRound(t *testing.T, ctx context.Context, f Factory, round int, expr string) {
	sch, err := flow.ParseCron(expr)
	if err != nil {
		t.Fatal(err)
	}
	p := Prefix()
	stores := []store.Store{f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{}), f.Open(t, p, store.Options{})}
	tt := defType
	tt.Cron, tt.CronStage, tt.CronContext = expr, "tick", json.RawMessage(`{"periodic":true}`)
	if err := stores[0].RegisterType(ctx, tt, t0); err != nil {
		t.Fatal(err)
	}
	end := t0.Add(6 * time.Hour)
	rng := mrand.New(mrand.NewPCG(uint64(round), 11))
	var wg sync.WaitGroup
	for i, s := range stores {
		steps := make([]time.Duration, 0, 64) // each store's clock advances at its own pace
		for d := time.Duration(0); d < end.Sub(t0); {
			d += time.Duration(rng.IntN(40)+1) * time.Minute
			steps = append(steps, min(d, end.Sub(t0)))
		}
		killAt := -1
		if i == 2 {
			killAt = len(steps) / 3 // the third store stops a third of the way
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k, d := range steps {
				if k == killAt {
					s.Close() // in the middle of the others' firing
					return
				}
				mk := func(tick time.Time) flow.Record {
					now := t0.Add(d)
					rec := flow.NewRecord(flow.NewTaskIDs(now, 1)[0], flow.NewTask{TaskType: "video", TaskStage: tt.CronStage, TaskContext: tt.CronContext}, tt, now)
					rec.OrderTime = tick
					return rec
				}
				if _, err := s.FireCron(ctx, "video", t0.Add(d), sch.Next, mk); err != nil {
					t.Errorf("store %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var want []time.Time
	for tick := sch.Next(t0); !tick.After(end); tick = sch.Next(tick) {
		want = append(want, tick)
	}
	var got []time.Time
	after := ""
	for {
		recs, err := stores[0].ListTasks(ctx, store.ListFilter{TaskType: "video", After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.TaskStage != "tick" || string(r.TaskContext) != `{"periodic":true}` {
				t.Fatalf("cron task %+v", r)
			}
			got = append(got, r.OrderTime)
		}
		if len(recs) < 1000 {
			break
		}
		after = recs[len(recs)-1].TaskID
	}
	slices.SortFunc(got, func(a, b time.Time) int { return a.Compare(b) })
	if len(got) != len(want) {
		t.Fatalf("cron %q: %d tasks for %d ticks", expr, len(got), len(want))
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("cron %q: task %d due %v, tick %v (a tick missed or doubled)", expr, i, got[i], want[i])
		}
	}
}
