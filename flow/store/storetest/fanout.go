package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// kidType is the children's type in the fan-out tests, so that holds of
// the parents' type never return a child. No retries: a rescue fails it.
var kidType = flow.TaskType{TaskType: "kid", ScheduleLimit: 1000, ScheduleIntervalMS: 1000, MaxProcessingMS: 30000,
	MaxRetryNum: 0, RetryIntervalMS: 1000, MaxRetryIntervalMS: 3000}

// fanOut is the set that makes held parent wait for kids (of kidType
// when they name no type), with the records the server would build.
func (e *env) fanOut(parent flow.Record, join string, kids ...flow.NewTask) flow.SetTaskRequest {
	req := flow.SetTaskRequest{TaskID: parent.TaskID, Lease: parent.Lease, Status: flow.StatusWaiting, JoinStage: join, Children: kids}
	ids := flow.NewTaskIDs(t0, len(kids))
	for i, k := range kids {
		tt := kidType
		if k.TaskType == "" {
			k.TaskType = kidType.TaskType
			req.Children[i] = k
		} else if k.TaskType == e.tt.TaskType {
			tt = e.tt
		}
		req.ChildRecords = append(req.ChildRecords, flow.NewRecord(ids[i], k, tt, t0))
	}
	return req
}

func (e *env) holdType(s store.Store, typ string, now time.Time, limit int) []flow.Record {
	e.t.Helper()
	recs, err := s.Hold(context.Background(), store.HoldParams{TaskType: typ, WorkerID: "w", Limit: limit,
		Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(30 * time.Second)})
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// holdAll holds every due task of typ, over as many holds as it takes.
func (e *env) holdAll(s store.Store, typ string, now time.Time, n int) []flow.Record {
	e.t.Helper()
	var out []flow.Record
	for len(out) < n {
		h := e.holdType(s, typ, now, n-len(out))
		if len(h) == 0 {
			e.t.Fatalf("held %d of %d %s tasks", len(out), n, typ)
		}
		out = append(out, h...)
	}
	return out
}

func (e *env) counts(id string) map[string]int64 {
	e.t.Helper()
	c, err := e.s.ChildCounts(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func joins(r flow.Record) int {
	n := 0
	for _, l := range r.ScheduleLog {
		if l.Event == flow.EventJoined {
			n++
		}
	}
	return n
}

// newFanOutEnv is an env with the kid type registered and one held
// parent.
func newFanOutEnv(t *testing.T, f Factory, s store.Store) (*env, flow.Record) {
	t.Helper()
	e := &env{t: t, s: s, tt: defType}
	for _, tt := range []flow.TaskType{defType, kidType} {
		if err := s.RegisterType(context.Background(), tt, t0); err != nil {
			t.Fatal(err)
		}
	}
	e.create(flow.NewTask{TaskStage: "split"})
	return e, e.hold(t0, 1, "w")[0]
}

// runFanOut checks fan-out and fan-in: children created with the set, all
// or none; the parent joins exactly once, after its last child ends, however
// the children end and however many servers end them at once; a cancel
// reaches every live descendant; the depth limit.
func runFanOut(t *testing.T, f Factory) {
	ctx := context.Background()
	now := t0.Add(time.Second)

	t.Run("FanOutCreatesChildrenAtomically", func(t *testing.T) {
		t.Parallel()
		e, p := newFanOutEnv(t, f, f.Open(t, Prefix(), store.Options{}))
		kids := make([]flow.NewTask, 50)
		for i := range kids {
			kids[i] = flow.NewTask{TaskStage: "work", TaskContext: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		}
		// A child whose id is taken fails the insert: the whole set is
		// undone, the parent still held and no child left behind.
		bad := e.fanOut(p, "join", kids...)
		bad.ChildRecords[7].TaskID = p.TaskID
		if errs, err := e.s.SetTasks(ctx, []flow.SetTaskRequest{bad}, now); err == nil && errs[0] == nil {
			t.Fatal("a fan-out with a clashing child id was applied")
		}
		if got := e.get(p.TaskID); got.Status != flow.StatusProcessing || got.Lease != p.Lease {
			t.Fatalf("after a failed fan-out the parent is %s (lease %q)", got.Status, got.Lease)
		}
		if c := e.counts(p.TaskID); c != nil {
			t.Fatalf("a failed fan-out left children: %v", c)
		}

		req := e.fanOut(p, "join", kids...)
		if err := e.set(req, now); err != nil {
			t.Fatal(err)
		}
		got := e.get(p.TaskID)
		if got.Status != flow.StatusWaiting || got.Owner != "" || got.Lease != "" || got.TaskStage != "split" {
			t.Fatalf("parent after fan-out: %s stage %s owner %q", got.Status, got.TaskStage, got.Owner)
		}
		if c := e.counts(p.TaskID); len(c) != 1 || c["pending"] != 50 {
			t.Fatalf("counts = %v", c)
		}
		children, err := e.s.TaskChildren(ctx, p.TaskID, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, r := range req.ChildRecords {
			want = append(want, r.TaskID)
		}
		slices.Sort(want)
		if !slices.Equal(ids(children), want) {
			t.Fatalf("children %v\nwant %v", ids(children), want)
		}
		page, _ := e.s.TaskChildren(ctx, p.TaskID, want[9], 5)
		if !slices.Equal(ids(page), want[10:15]) {
			t.Fatalf("page after %s = %v", want[9], ids(page))
		}
		// A waiting parent is held by nobody and cannot be set again.
		if err := e.set(flow.SetTaskRequest{TaskID: p.TaskID, Lease: p.Lease, Status: flow.StatusSuccess}, now); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("set of a waiting parent: %v", err)
		}
		if h := e.hold(now, 10, "w"); len(h) != 0 {
			t.Fatalf("held a waiting parent: %v", ids(h))
		}
		if err := e.s.DeleteTask(ctx, p.TaskID); !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("delete of a waiting parent: %v", err)
		}
		if err := e.s.DeleteTask(ctx, want[0]); !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("delete of a pending child: %v", err)
		}
	})

	t.Run("JoinOnceAfterLastChildConcurrently", func(t *testing.T) {
		t.Parallel()
		prefix := Prefix()
		servers := []store.Store{f.Open(t, prefix, store.Options{}), f.Open(t, prefix, store.Options{})}
		e, p := newFanOutEnv(t, f, servers[0])
		const n = 240
		kids := make([]flow.NewTask, n)
		if err := e.set(e.fanOut(p, "join", kids...), now); err != nil {
			t.Fatal(err)
		}
		held := e.holdAll(e.s, kidType.TaskType, now, n)
		last, held := held[n-1], held[:n-1]
		// 12 goroutines on two servers end the children at once, in
		// batches of 1 to 12 (a batch of one is the fast path's shape),
		// with success, failed and cancel.
		const workers = 12
		var wg sync.WaitGroup
		errc := make(chan error, n)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				s := servers[w%2]
				var mine []flow.Record
				for i := w; i < len(held); i += workers {
					mine = append(mine, held[i])
				}
				for len(mine) > 0 {
					k := min(len(mine), w+1)
					var reqs []flow.SetTaskRequest
					for j, r := range mine[:k] {
						switch (w + j) % 5 {
						case 3:
							reqs = append(reqs, flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusFailed, Error: "boom"})
						case 4:
							if err := s.CancelTask(ctx, r.TaskID, now); err != nil {
								errc <- err
							}
						default:
							reqs = append(reqs, flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess, TaskContext: []byte(`{"ok":true}`)})
						}
					}
					mine = mine[k:]
					if len(reqs) == 0 {
						continue
					}
					errs, err := s.SetTasks(ctx, reqs, now)
					if err != nil {
						errc <- err
						continue
					}
					for _, err := range errs {
						if err != nil {
							errc <- err
						}
					}
				}
			}(w)
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Error(err)
		}
		if got := e.get(p.TaskID); got.Status != flow.StatusWaiting {
			t.Fatalf("parent is %s with one child still processing", got.Status)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: last.TaskID, Lease: last.Lease, Status: flow.StatusSuccess}, now); err != nil {
			t.Fatal(err)
		}
		got := e.get(p.TaskID)
		if got.Status != flow.StatusPending || got.TaskStage != "join" || joins(got) != 1 || got.CrtRetryNum != 0 {
			t.Fatalf("parent after the last child: %s stage %s, %d joins", got.Status, got.TaskStage, joins(got))
		}
		c := e.counts(p.TaskID)
		if c["success"]+c["failed"]+c["cancelled"] != n || c["failed"] == 0 || c["cancelled"] == 0 {
			t.Fatalf("counts = %v", c)
		}
		h := e.hold(now, 10, "w")
		if len(h) != 1 || h[0].TaskID != p.TaskID {
			t.Fatalf("held %v, want the joined parent", ids(h))
		}
		children, _ := e.s.TaskChildren(ctx, p.TaskID, "", 1000)
		for _, k := range children {
			ch := flow.ChildOf(k)
			switch {
			case k.Status == flow.StatusFailed && ch.Error != "boom",
				k.Status == flow.StatusSuccess && k.TaskID != last.TaskID && string(ch.TaskContext) != `{"ok":true}`:
				t.Fatalf("child %+v", ch)
			}
		}
	})

	t.Run("CancelCascades", func(t *testing.T) {
		t.Parallel()
		e, p := newFanOutEnv(t, f, f.Open(t, Prefix(), store.Options{}))
		if err := e.set(e.fanOut(p, "join", flow.NewTask{}, flow.NewTask{}, flow.NewTask{}), now); err != nil {
			t.Fatal(err)
		}
		kids := e.holdAll(e.s, kidType.TaskType, now, 3)
		// kids[0] fans out again (depth 2); kids[1] ends; kids[2] stays held.
		if err := e.set(e.fanOut(kids[0], "join", flow.NewTask{}, flow.NewTask{}), now); err != nil {
			t.Fatal(err)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: kids[1].TaskID, Lease: kids[1].Lease, Status: flow.StatusSuccess}, now); err != nil {
			t.Fatal(err)
		}
		if err := e.s.CancelTask(ctx, p.TaskID, now); err != nil {
			t.Fatal(err)
		}
		if got := e.get(p.TaskID); got.Status != flow.StatusCancelled {
			t.Fatalf("parent is %s", got.Status)
		}
		if c := e.counts(p.TaskID); c["success"] != 1 || c["cancelled"] != 2 || len(c) != 2 {
			t.Fatalf("children = %v", c)
		}
		if c := e.counts(kids[0].TaskID); c["cancelled"] != 2 || len(c) != 1 {
			t.Fatalf("grandchildren = %v", c)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: kids[2].TaskID, Lease: kids[2].Lease, Status: flow.StatusSuccess}, now); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("set of a cancelled child: %v", err)
		}
		if err := e.s.CancelTask(ctx, p.TaskID, now); err != nil {
			t.Fatalf("second cancel: %v", err)
		}
		if h := e.holdType(e.s, kidType.TaskType, now, 10); len(h) != 0 {
			t.Fatalf("held %v after the cancel", ids(h))
		}
	})

	t.Run("ChildCancelRescueAndRetry", func(t *testing.T) {
		t.Parallel()
		e, p := newFanOutEnv(t, f, f.Open(t, Prefix(), store.Options{}))
		req := e.fanOut(p, "join", flow.NewTask{}, flow.NewTask{}, flow.NewTask{})
		if err := e.set(req, now); err != nil {
			t.Fatal(err)
		}
		k0, k1 := req.ChildRecords[0].TaskID, req.ChildRecords[1].TaskID
		// A cancelled child retried while the parent waits counts again.
		if err := e.s.CancelTask(ctx, k0, now); err != nil {
			t.Fatal(err)
		}
		if err := e.s.CancelTask(ctx, k1, now); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.RetryTask(ctx, k0, "", nil, now); err != nil {
			t.Fatal(err)
		}
		// Two held children: one ends, the other's lease runs out with no
		// retry left (a rescue fails it), which is the last.
		held := e.holdAll(e.s, kidType.TaskType, now, 2)
		if err := e.set(flow.SetTaskRequest{TaskID: held[0].TaskID, Lease: held[0].Lease, Status: flow.StatusSuccess}, now); err != nil {
			t.Fatal(err)
		}
		if got := e.get(p.TaskID); got.Status != flow.StatusWaiting {
			t.Fatalf("parent is %s with a child held", got.Status)
		}
		if n, err := e.s.RescueExpired(ctx, now.Add(time.Hour), 100); err != nil || n != 1 {
			for _, id := range []string{p.TaskID, k0, k1, req.ChildRecords[2].TaskID} {
				r := e.get(id)
				t.Logf("%s %s %v", id, r.Status, r.ScheduleLog)
			}
			t.Fatalf("rescued %d, %v", n, err)
		}
		got := e.get(p.TaskID)
		if got.Status != flow.StatusPending || got.TaskStage != "join" || joins(got) != 1 {
			t.Fatalf("parent after the rescue: %s stage %s, %d joins", got.Status, got.TaskStage, joins(got))
		}
		// After the join a child may not run again.
		if _, err := e.s.RetryTask(ctx, k1, "", nil, now); !errors.Is(err, flow.ErrConflict) {
			t.Fatalf("retry of a child after the join: %v", err)
		}
	})

	t.Run("DepthLimit", func(t *testing.T) {
		t.Parallel()
		e, p := newFanOutEnv(t, f, f.Open(t, Prefix(), store.Options{}))
		cur := p
		for depth := 0; depth < flow.MaxFanOutDepth; depth++ {
			if err := e.set(e.fanOut(cur, "join", flow.NewTask{}), now); err != nil {
				t.Fatalf("fan-out at depth %d: %v", depth, err)
			}
			cur = e.holdAll(e.s, kidType.TaskType, now, 1)[0]
		}
		err := e.set(e.fanOut(cur, "join", flow.NewTask{}), now)
		var fe *flow.FieldError
		if !errors.As(err, &fe) || fe.Field != "children" {
			t.Fatalf("fan-out at depth %d: %v", flow.MaxFanOutDepth, err)
		}
		if got := e.get(cur.TaskID); got.Status != flow.StatusProcessing || e.counts(cur.TaskID) != nil {
			t.Fatalf("a refused fan-out changed the task: %s", got.Status)
		}
	})
}
