package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// Factory opens stores of one database for the suite.
type Factory struct {
	// Open opens a store on the tables named by prefix, creating them if
	// needed, and arranges for them to be dropped when t ends. Calling it
	// twice with one prefix gives two stores (two "servers") on one set of
	// tables.
	Open func(t testing.TB, prefix string, opts store.Options) store.Store
}

// Prefix returns a table prefix unique to this run.
func Prefix() string {
	var b [5]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:]) + "_"
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

var defType = flow.TaskType{TaskType: "video", ScheduleLimit: 10, ScheduleIntervalMS: 1000, MaxProcessingMS: 30000,
	MaxRetryNum: 2, RetryIntervalMS: 1000, MaxRetryIntervalMS: 3000}

type env struct {
	t  *testing.T
	s  store.Store
	tt flow.TaskType
}

func newEnv(t *testing.T, f Factory, opts store.Options) *env {
	t.Helper()
	s := f.Open(t, Prefix(), opts)
	e := &env{t: t, s: s, tt: defType}
	if err := s.RegisterType(context.Background(), defType, t0); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) create(nts ...flow.NewTask) []string {
	e.t.Helper()
	ids := flow.NewTaskIDs(t0, len(nts))
	recs := make([]flow.Record, len(nts))
	for i, nt := range nts {
		if nt.TaskType == "" {
			nt.TaskType = e.tt.TaskType
		}
		recs[i] = flow.NewRecord(ids[i], nt, e.tt, t0)
	}
	if err := e.s.CreateTasks(context.Background(), recs); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *env) hold(now time.Time, limit int, worker string) []flow.Record {
	e.t.Helper()
	recs, err := e.s.Hold(context.Background(), store.HoldParams{TaskType: e.tt.TaskType, WorkerID: worker, Limit: limit,
		Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Duration(e.tt.MaxProcessingMS) * time.Millisecond)})
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func (e *env) get(id string) flow.Record {
	e.t.Helper()
	r, err := e.s.GetTask(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) set(req flow.SetTaskRequest, now time.Time) error {
	e.t.Helper()
	errs, err := e.s.SetTasks(context.Background(), []flow.SetTaskRequest{req}, now)
	if err != nil {
		e.t.Fatal(err)
	}
	return errs[0]
}

func ids(recs []flow.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.TaskID
	}
	return out
}

// Run runs the whole suite.
func Run(t *testing.T, f Factory) {
	ctx := context.Background()

	t.Run("TaskTypes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		got, err := e.s.GetType(ctx, "video")
		if err != nil || !reflect.DeepEqual(got, defType) {
			t.Fatalf("GetType = %+v, %v; want %+v", got, err, defType)
		}
		upd := defType
		upd.ScheduleLimit = 3
		if err := e.s.RegisterType(ctx, upd, t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.s.GetType(ctx, "video"); got.ScheduleLimit != 3 {
			t.Fatalf("after update schedule_limit = %d, want 3", got.ScheduleLimit)
		}
		other := defType
		other.TaskType = "audio"
		if err := e.s.RegisterType(ctx, other, t0); err != nil {
			t.Fatal(err)
		}
		list, err := e.s.ListTypes(ctx)
		if err != nil || len(list) != 2 || list[0].TaskType != "audio" || list[1].TaskType != "video" {
			t.Fatalf("ListTypes = %+v, %v", list, err)
		}
		if _, err := e.s.GetType(ctx, "nope"); !errors.Is(err, flow.ErrUnknownType) {
			t.Fatalf("GetType(nope) err = %v, want ErrUnknownType", err)
		}
	})

	t.Run("CreateGet", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		idv := e.create(
			flow.NewTask{TaskStage: "download", TaskContext: json.RawMessage(`{"SourceUrl":"http://v/1","n":[1,2]}`), Priority: 5},
			flow.NewTask{TaskStage: "", DelayMS: 1500},
		)
		a := e.get(idv[0])
		if a.Status != flow.StatusPending || a.TaskStage != "download" || string(a.TaskContext) != `{"SourceUrl":"http://v/1","n":[1,2]}` ||
			a.Priority != 5 || !a.OrderTime.Equal(t0.Add(-5*time.Second)) || a.MaxRetryNum != 2 || !a.CreateTime.Equal(t0) ||
			a.RetryIntervalMS != 1000 || a.MaxRetryIntervalMS != 3000 || a.Lease != "" || a.LeaseExpiry != nil {
			t.Fatalf("task a = %+v", a)
		}
		if len(a.ScheduleLog) != 1 || a.ScheduleLog[0].Event != flow.EventCreated || !a.ScheduleLog[0].At.Equal(t0) {
			t.Fatalf("log = %+v", a.ScheduleLog)
		}
		b := e.get(idv[1])
		if b.TaskContext != nil || !b.OrderTime.Equal(t0.Add(1500*time.Millisecond)) {
			t.Fatalf("task b = %+v", b)
		}
		if _, err := e.s.GetTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("missing task err = %v", err)
		}
		// A batch with a duplicate id stores nothing.
		dup := flow.NewRecord(idv[0], flow.NewTask{TaskType: "video"}, defType, t0)
		fresh := flow.NewRecord(flow.NewTaskIDs(t0, 1)[0], flow.NewTask{TaskType: "video"}, defType, t0)
		if err := e.s.CreateTasks(ctx, []flow.Record{fresh, dup}); err == nil {
			t.Fatal("duplicate id accepted")
		}
		if _, err := e.s.GetTask(ctx, fresh.TaskID); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("half a failed batch was stored: %v", err)
		}
	})

	// A batch's rows come back as they went in, whether a column's value is
	// the same in every row (PostgreSQL sends it once) or not.
	t.Run("CreateBatchRoundTrips", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
		same := func(n int) []flow.Record {
			ids := flow.NewTaskIDs(t0, n)
			recs := make([]flow.Record, n)
			for i := range recs {
				recs[i] = flow.NewRecord(ids[i], flow.NewTask{TaskType: "video", TaskStage: "s", TaskContext: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}, defType, t0)
			}
			return recs
		}
		varied := same(4)
		for i := range varied {
			r := &varied[i]
			if i%2 == 1 {
				r.TaskType, r.TaskStage, r.Status, r.Priority = "other", "t", flow.StatusSuccess, 7
				r.OrderTime, r.CrtRetryNum, r.MaxRetryNum, r.RetryIntervalMS, r.MaxRetryIntervalMS = at(5), 1, 9, 11, 22
				r.Owner, r.Lease, r.CreateTime, r.ModifyTime = "w", "l", at(-3), at(4)
				r.ScheduleLog = append(r.ScheduleLog, flow.LogEntry{At: at(4), Worker: "w", Stage: "t", Event: flow.EventSuccess})
			}
			if i == 3 {
				r.TaskContext = nil
			}
		}
		for _, batch := range [][]flow.Record{same(3), varied, same(1)} {
			if err := e.s.CreateTasks(ctx, batch); err != nil {
				t.Fatal(err)
			}
			for _, want := range batch {
				got := e.get(want.TaskID)
				if got.TaskType != want.TaskType || got.TaskStage != want.TaskStage || got.Status != want.Status ||
					string(got.TaskContext) != string(want.TaskContext) || (got.TaskContext == nil) != (want.TaskContext == nil) ||
					got.Priority != want.Priority || !got.OrderTime.Equal(want.OrderTime) || got.CrtRetryNum != want.CrtRetryNum ||
					got.MaxRetryNum != want.MaxRetryNum || got.RetryIntervalMS != want.RetryIntervalMS ||
					got.MaxRetryIntervalMS != want.MaxRetryIntervalMS || got.Owner != want.Owner || got.Lease != want.Lease ||
					!got.CreateTime.Equal(want.CreateTime) || !got.ModifyTime.Equal(want.ModifyTime) || len(got.ScheduleLog) != len(want.ScheduleLog) {
					t.Fatalf("task %s:\n got %+v\nwant %+v", want.TaskID, got, want)
				}
				for k, l := range want.ScheduleLog {
					g := got.ScheduleLog[k]
					if !g.At.Equal(l.At) || g.Worker != l.Worker || g.Stage != l.Stage || g.Event != l.Event || g.Error != l.Error {
						t.Fatalf("task %s log[%d] = %+v, want %+v", want.TaskID, k, g, l)
					}
				}
			}
		}
	})

	t.Run("HoldOrderLimitAndDue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		idv := e.create(
			flow.NewTask{TaskStage: "s"},                 // order t0
			flow.NewTask{TaskStage: "s", Priority: 10},   // t0-10s: first
			flow.NewTask{TaskStage: "s", DelayMS: 60000}, // not due until t0+60s
			flow.NewTask{TaskStage: "s", DelayMS: 2000},  // t0+2s
		)
		other := defType
		other.TaskType = "other"
		if err := e.s.RegisterType(ctx, other, t0); err != nil {
			t.Fatal(err)
		}
		oid := flow.NewTaskIDs(t0, 1)[0]
		if err := e.s.CreateTasks(ctx, []flow.Record{flow.NewRecord(oid, flow.NewTask{TaskType: "other"}, other, t0)}); err != nil {
			t.Fatal(err)
		}
		now := t0.Add(5 * time.Second)
		got := e.hold(now, 2, "w1")
		if fmt.Sprint(ids(got)) != fmt.Sprint([]string{idv[1], idv[0]}) {
			t.Fatalf("first hold = %v, want [%s %s]", ids(got), idv[1], idv[0])
		}
		for _, r := range got {
			if r.Status != flow.StatusProcessing || r.Owner != "w1" || len(r.Lease) < 16 || r.LeaseExpiry == nil ||
				!r.LeaseExpiry.Equal(now.Add(30*time.Second)) || !r.ModifyTime.Equal(now) {
				t.Fatalf("held record = %+v", r)
			}
			last := r.ScheduleLog[len(r.ScheduleLog)-1]
			if last.Event != flow.EventHeld || last.Worker != "w1" || last.Stage != "s" || !last.At.Equal(now) {
				t.Fatalf("held log = %+v", r.ScheduleLog)
			}
			if st := e.get(r.TaskID); st.Status != flow.StatusProcessing || st.Lease != r.Lease || st.Owner != "w1" {
				t.Fatalf("stored after hold = %+v", st)
			}
		}
		if got := e.hold(now, 10, "w2"); fmt.Sprint(ids(got)) != fmt.Sprint([]string{idv[3]}) {
			t.Fatalf("second hold = %v, want [%s]", ids(got), idv[3])
		}
		if got := e.hold(now, 10, "w2"); len(got) != 0 {
			t.Fatalf("third hold = %v, want none (one task is delayed)", ids(got))
		}
		if got := e.hold(t0.Add(61*time.Second), 10, "w2"); fmt.Sprint(ids(got)) != fmt.Sprint([]string{idv[2]}) {
			t.Fatalf("hold after the delay = %v, want [%s]", ids(got), idv[2])
		}
		if r := e.get(oid); r.Status != flow.StatusPending {
			t.Fatalf("a hold of video took a task of type other: %+v", r)
		}
	})

	t.Run("SetTransitions", func(t *testing.T) {
		t.Parallel()
		now := t0.Add(time.Second)
		later := now.Add(time.Second)
		cases := []struct {
			name    string
			retries int // crt_retry_num before the set
			req     flow.SetTaskRequest
			wantErr error
			check   func(t *testing.T, r flow.Record)
		}{
			{"next stage", 1, flow.SetTaskRequest{Status: flow.StatusPending, TaskStage: "encode", TaskContext: json.RawMessage(`{"k":2}`), DelayMS: 500}, nil,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusPending || r.TaskStage != "encode" || string(r.TaskContext) != `{"k":2}` || r.CrtRetryNum != 0 ||
						!r.OrderTime.Equal(later.Add(500*time.Millisecond)) || r.Owner != "" || r.Lease != "" || r.LeaseExpiry != nil {
						t.Fatalf("%+v", r)
					}
				}},
			{"same stage again keeps retries", 1, flow.SetTaskRequest{Status: flow.StatusPending}, nil,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusPending || r.TaskStage != "download" || string(r.TaskContext) != `{"k":1}` || r.CrtRetryNum != 1 || !r.OrderTime.Equal(later) {
						t.Fatalf("%+v", r)
					}
				}},
			{"success", 0, flow.SetTaskRequest{Status: flow.StatusSuccess, TaskContext: json.RawMessage(`{"done":true}`)}, nil,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusSuccess || string(r.TaskContext) != `{"done":true}` || r.Lease != "" {
						t.Fatalf("%+v", r)
					}
				}},
			{"failed without error ends", 0, flow.SetTaskRequest{Status: flow.StatusFailed}, nil,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusFailed || r.CrtRetryNum != 0 {
						t.Fatalf("%+v", r)
					}
				}},
			{"error retries with backoff", 1, flow.SetTaskRequest{Status: flow.StatusPending, Error: "boom"}, nil,
				func(t *testing.T, r flow.Record) {
					// second retry: 1000ms * 2
					if r.Status != flow.StatusPending || r.CrtRetryNum != 2 || !r.OrderTime.Equal(later.Add(2*time.Second)) {
						t.Fatalf("%+v", r)
					}
					last := r.ScheduleLog[len(r.ScheduleLog)-1]
					if last.Event != flow.EventRetry || last.Error != "boom" || last.Worker != "w" {
						t.Fatalf("log %+v", r.ScheduleLog)
					}
				}},
			{"failed with error ends and keeps the reason", 0, flow.SetTaskRequest{Status: flow.StatusFailed, Error: "bad input"}, nil,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusFailed || r.CrtRetryNum != 0 {
						t.Fatalf("%+v", r)
					}
					if last := r.ScheduleLog[len(r.ScheduleLog)-1]; last.Event != flow.EventFailed || last.Error != "bad input" {
						t.Fatalf("log %+v", r.ScheduleLog)
					}
				}},
			{"error with retries exhausted fails", 2, flow.SetTaskRequest{Status: flow.StatusPending, Error: "again"}, nil,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusFailed || r.CrtRetryNum != 2 {
						t.Fatalf("%+v", r)
					}
					if last := r.ScheduleLog[len(r.ScheduleLog)-1]; last.Event != flow.EventFailed || last.Error != "again" {
						t.Fatalf("log %+v", r.ScheduleLog)
					}
				}},
			{"wrong lease", 0, flow.SetTaskRequest{Status: flow.StatusSuccess, Lease: "not-the-lease"}, flow.ErrStaleLease,
				func(t *testing.T, r flow.Record) {
					if r.Status != flow.StatusProcessing || r.Owner != "w" {
						t.Fatalf("a refused set changed the task: %+v", r)
					}
				}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e := newEnv(t, f, store.Options{})
				id := e.create(flow.NewTask{TaskStage: "download", TaskContext: json.RawMessage(`{"k":1}`)})[0]
				for i := 0; i < c.retries; i++ { // reach crt_retry_num through real retries
					h := e.hold(t0.Add(time.Hour*time.Duration(i)), 1, "w")
					if err := e.set(flow.SetTaskRequest{TaskID: id, Lease: h[0].Lease, Status: flow.StatusPending, Error: "warm"}, t0.Add(time.Hour*time.Duration(i))); err != nil {
						t.Fatal(err)
					}
				}
				// Re-read: hold needs order_time <= now.
				r := e.get(id)
				h := e.hold(r.OrderTime.Add(0), 1, "w")
				if len(h) != 1 {
					t.Fatalf("hold got %d tasks", len(h))
				}
				req := c.req
				req.TaskID = id
				if req.Lease == "" {
					req.Lease = h[0].Lease
				}
				_ = now
				err := e.set(req, later)
				if !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
					t.Fatalf("set err = %v, want %v", err, c.wantErr)
				}
				c.check(t, e.get(id))
			})
		}
	})

	t.Run("SetBatchAndFencing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		idv := e.create(flow.NewTask{TaskStage: "a"}, flow.NewTask{TaskStage: "a"}, flow.NewTask{TaskStage: "a"})
		h := e.hold(t0, 3, "w1")
		if len(h) != 3 {
			t.Fatalf("held %d", len(h))
		}
		lease := map[string]string{}
		for _, r := range h {
			lease[r.TaskID] = r.Lease
		}
		missing := "01ARZ3NDEKTSV4RRFFQ69G5FAV"
		reqs := []flow.SetTaskRequest{
			{TaskID: idv[0], Lease: lease[idv[0]], Status: flow.StatusSuccess},
			{TaskID: idv[1], Lease: "stale", Status: flow.StatusSuccess},
			{TaskID: missing, Lease: "x", Status: flow.StatusSuccess},
			{TaskID: idv[2], Lease: lease[idv[2]], Status: flow.StatusPending, TaskStage: "b"},
			{TaskID: idv[2], Lease: lease[idv[2]], Status: flow.StatusSuccess}, // the lease was used up by the entry before
		}
		errs, err := e.s.SetTasks(ctx, reqs, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want := []error{nil, flow.ErrStaleLease, flow.ErrNotFound, nil, flow.ErrStaleLease}
		for i := range want {
			if !errors.Is(errs[i], want[i]) || (want[i] == nil && errs[i] != nil) {
				t.Fatalf("errs[%d] = %v, want %v", i, errs[i], want[i])
			}
		}
		if r := e.get(idv[0]); r.Status != flow.StatusSuccess {
			t.Fatalf("0: %+v", r)
		}
		if r := e.get(idv[1]); r.Status != flow.StatusProcessing || r.Lease != lease[idv[1]] {
			t.Fatalf("1 changed by a stale set: %+v", r)
		}
		if r := e.get(idv[2]); r.Status != flow.StatusPending || r.TaskStage != "b" {
			t.Fatalf("2: %+v", r)
		}

		// Lease expires, the task is rescued and held again: the first
		// holder's lease is fenced out, the new one works.
		exp := t0.Add(time.Minute)
		if n, err := e.s.RescueExpired(ctx, exp, 100); err != nil || n != 1 {
			t.Fatalf("rescue = %d, %v; want 1", n, err)
		}
		r := e.get(idv[1])
		if r.Status != flow.StatusPending || r.CrtRetryNum != 1 || !r.OrderTime.Equal(exp.Add(time.Second)) || r.ScheduleLog[len(r.ScheduleLog)-1].Event != flow.EventExpired {
			t.Fatalf("rescued: %+v", r)
		}
		h2 := e.hold(exp.Add(time.Hour), 10, "w2")
		var again flow.Record
		for _, x := range h2 {
			if x.TaskID == idv[1] {
				again = x
			}
		}
		if again.TaskID == "" || again.Lease == lease[idv[1]] {
			t.Fatalf("re-hold = %+v", h2)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: idv[1], Lease: lease[idv[1]], Status: flow.StatusSuccess}, exp.Add(time.Hour)); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("old holder's set err = %v, want stale", err)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: idv[1], Lease: again.Lease, Status: flow.StatusSuccess}, exp.Add(time.Hour)); err != nil {
			t.Fatalf("new holder's set: %v", err)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: idv[1], Lease: again.Lease, Status: flow.StatusFailed}, exp.Add(time.Hour)); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("set after the task ended err = %v, want stale", err)
		}
	})

	t.Run("RescueExhaustsRetries", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		id := e.create(flow.NewTask{TaskStage: "a"})[0]
		now := t0
		for i := 0; i < 3; i++ {
			h := e.hold(now, 1, "w")
			if len(h) != 1 {
				t.Fatalf("round %d: held %d", i, len(h))
			}
			now = h[0].LeaseExpiry.Add(time.Microsecond)
			if n, err := e.s.RescueExpired(ctx, now, 10); err != nil || n != 1 {
				t.Fatalf("round %d: rescue = %d, %v", i, n, err)
			}
			now = now.Add(time.Hour)
		}
		r := e.get(id)
		if r.Status != flow.StatusFailed || r.CrtRetryNum != 2 {
			t.Fatalf("after 3 expiries with max_retry_num 2: %+v", r)
		}
		if n, err := e.s.RescueExpired(ctx, now, 10); err != nil || n != 0 {
			t.Fatalf("rescue of nothing = %d, %v", n, err)
		}
	})

	t.Run("RenewLease", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		id := e.create(flow.NewTask{})[0]
		h := e.hold(t0, 1, "w")
		exp := t0.Add(10 * time.Minute)
		if err := e.s.RenewLease(ctx, id, h[0].Lease, exp); err != nil {
			t.Fatal(err)
		}
		if r := e.get(id); r.LeaseExpiry == nil || !r.LeaseExpiry.Equal(exp) {
			t.Fatalf("expiry = %v, want %v", r.LeaseExpiry, exp)
		}
		if n, _ := e.s.RescueExpired(ctx, t0.Add(time.Minute), 10); n != 0 {
			t.Fatal("a renewed lease was rescued before its new expiry")
		}
		if err := e.s.RenewLease(ctx, id, "wrong", exp); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("wrong lease err = %v", err)
		}
		if err := e.s.RenewLease(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "x", exp); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("missing task err = %v", err)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		idv := e.create(flow.NewTask{}, flow.NewTask{}, flow.NewTask{})
		h := e.hold(t0, 2, "w")
		if err := e.s.CancelTask(ctx, h[0].TaskID, t0); err != nil {
			t.Fatal(err)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: h[0].TaskID, Lease: h[0].Lease, Status: flow.StatusSuccess}, t0); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("set of a cancelled task err = %v", err)
		}
		if err := e.s.CancelTask(ctx, h[0].TaskID, t0); err != nil {
			t.Fatalf("cancelling twice: %v", err)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: h[1].TaskID, Lease: h[1].Lease, Status: flow.StatusSuccess}, t0); err != nil {
			t.Fatal(err)
		}
		if err := e.s.CancelTask(ctx, h[1].TaskID, t0); !errors.Is(err, flow.ErrStaleLease) {
			t.Fatalf("cancel of a finished task err = %v", err)
		}
		var pendingID string
		for _, id := range idv {
			if id != h[0].TaskID && id != h[1].TaskID {
				pendingID = id
			}
		}
		if err := e.s.CancelTask(ctx, pendingID, t0); err != nil {
			t.Fatal(err)
		}
		r := e.get(pendingID)
		if r.Status != flow.StatusCancelled || r.ScheduleLog[len(r.ScheduleLog)-1].Event != flow.EventCancelled {
			t.Fatalf("%+v", r)
		}
		if got := e.hold(t0.Add(time.Hour), 10, "w"); len(got) != 0 {
			t.Fatalf("held a cancelled task: %v", ids(got))
		}
		if err := e.s.CancelTask(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV", t0); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("missing err = %v", err)
		}
	})

	t.Run("ListStatsNextDue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		if _, ok, err := e.s.NextDue(ctx, "video"); ok || err != nil {
			t.Fatalf("NextDue of empty = %v, %v", ok, err)
		}
		var all []string
		for i := 0; i < 7; i++ {
			all = append(all, e.create(flow.NewTask{TaskStage: []string{"a", "b"}[i%2], DelayMS: int64(1000 * (i + 1))})...)
		}
		if due, ok, err := e.s.NextDue(ctx, "video"); !ok || err != nil || !due.Equal(t0.Add(time.Second)) {
			t.Fatalf("NextDue = %v %v %v", due, ok, err)
		}
		e.hold(t0.Add(2*time.Second), 10, "w") // the first two become processing
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			page, err := e.s.ListTasks(ctx, store.ListFilter{TaskType: "video", After: after, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(page)...)
			if len(page) < 3 {
				break
			}
			after = page[len(page)-1].TaskID
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
		}
		if len(got) != 7 {
			t.Fatalf("pages gave %d tasks: %v", len(got), got)
		}
		for i := 1; i < len(got); i++ {
			if got[i-1] >= got[i] {
				t.Fatalf("pages out of order: %v", got)
			}
		}
		byStatus, _ := e.s.ListTasks(ctx, store.ListFilter{Status: flow.StatusProcessing, Limit: 100})
		if len(byStatus) != 2 {
			t.Fatalf("processing = %v", ids(byStatus))
		}
		byStage, _ := e.s.ListTasks(ctx, store.ListFilter{TaskStage: "a", Status: flow.StatusPending, Limit: 100})
		if len(byStage) != 3 { // a at i=0,2,4,6; i=0 is processing
			t.Fatalf("stage a pending = %v", ids(byStage))
		}
		if none, _ := e.s.ListTasks(ctx, store.ListFilter{TaskType: "nope", Limit: 100}); len(none) != 0 {
			t.Fatal("filter by type ignored")
		}
		other := defType
		other.TaskType = "empty"
		e.s.RegisterType(ctx, other, t0)
		st, err := e.s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := `[{empty map[cancelled:0 failed:0 pending:0 processing:0 success:0 waiting:0] false} {video map[cancelled:0 failed:0 pending:5 processing:2 success:0 waiting:0] false}]`
		if fmt.Sprint(st) != want {
			t.Fatalf("stats = %v\nwant    %s", st, want)
		}
	})

	// get_task_list of one type, by every status and by none, with and
	// without a stage, page by page: PostgreSQL answers these from a
	// partial index per status, merged by id when no status is given.
	t.Run("ListByTypeInEveryStatus", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		audio := defType
		audio.TaskType = "audio"
		if err := e.s.RegisterType(ctx, audio, t0); err != nil {
			t.Fatal(err)
		}
		var video []string
		for i := 0; i < 12; i++ {
			video = append(video, e.create(flow.NewTask{TaskStage: []string{"a", "b"}[i%2]})...)
			e.create(flow.NewTask{TaskType: "audio", TaskStage: "a"})
		}
		h := e.hold(t0, 7, "w")
		outcomes := []flow.SetTaskRequest{{Status: flow.StatusSuccess}, {Status: flow.StatusSuccess}, {Status: flow.StatusFailed, Error: "x"},
			{Status: flow.StatusPending, TaskStage: "b"}, {Status: flow.StatusSuccess}}
		for i, o := range outcomes {
			o.TaskID, o.Lease = h[i].TaskID, h[i].Lease
			if err := e.set(o, t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		// One waits for a child of the other type.
		if err := e.set(e.fanOut(h[5], "join", flow.NewTask{TaskType: "audio", TaskStage: "c"}), t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		for _, id := range video { // cancel one still pending
			if e.get(id).Status == flow.StatusPending {
				if err := e.s.CancelTask(ctx, id, t0); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		byStatus := map[string]flow.Record{}
		for _, id := range video {
			byStatus[id] = e.get(id)
		}
		seen := map[flow.Status]int{}
		for _, r := range byStatus {
			seen[r.Status]++
		}
		for _, st := range flow.AllStatuses() {
			if seen[st] == 0 {
				t.Fatalf("no video task is %v: %v", st, seen)
			}
		}
		sorted := slices.Sorted(slices.Values(video)) // created in one millisecond: the ids' random part orders them
		for _, st := range append([]flow.Status{0}, flow.AllStatuses()...) {
			for _, stage := range []string{"", "a"} {
				var want []string
				for _, id := range sorted { // list order
					r := byStatus[id]
					if (st == 0 || r.Status == st) && (stage == "" || r.TaskStage == stage) {
						want = append(want, id)
					}
				}
				var got []string
				after := ""
				for pages := 0; pages < 20; pages++ {
					page, err := e.s.ListTasks(ctx, store.ListFilter{TaskType: "video", Status: st, TaskStage: stage, After: after, Limit: 2})
					if err != nil {
						t.Fatalf("status %v stage %q: %v", st, stage, err)
					}
					for _, r := range page {
						if r.TaskType != "video" || (st != 0 && r.Status != st) || (stage != "" && r.TaskStage != stage) {
							t.Fatalf("status %v stage %q listed %+v", st, stage, r)
						}
					}
					got = append(got, ids(page)...)
					if len(page) < 2 {
						break
					}
					after = page[len(page)-1].TaskID
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("status %v stage %q:\n got %v\nwant %v", st, stage, got, want)
				}
			}
		}
	})

	// A hold asked to leave the logs out hands out the same tasks, every
	// other field as a hold with logs gives it, and still records its
	// entry. Holds of one and of several take different statements.
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("HoldOmitLog/tasks=%d", n), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, f, store.Options{})
			e.create(make([]flow.NewTask, n)...)
			got, err := e.s.Hold(ctx, store.HoldParams{TaskType: e.tt.TaskType, WorkerID: "w", Limit: n, Lease: flow.NewLease(), Now: t0,
				LeaseExpiry: t0.Add(time.Minute), OmitLog: true})
			if err != nil || len(got) != n {
				t.Fatalf("held %d, %v; want %d", len(got), err, n)
			}
			for _, r := range got {
				if r.ScheduleLog != nil {
					t.Fatalf("hold without logs gave %+v", r.ScheduleLog)
				}
				stored := e.get(r.TaskID)
				if len(stored.ScheduleLog) != 2 || stored.ScheduleLog[1].Event != flow.EventHeld || stored.ScheduleLog[1].Worker != "w" {
					t.Fatalf("stored log %+v, want created then held by w", stored.ScheduleLog)
				}
				stored.ScheduleLog = nil
				if !reflect.DeepEqual(r, stored) {
					t.Fatalf("held  %+v\nstored %+v", r, stored)
				}
			}
		})
	}

	t.Run("Prune", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		idv := e.create(flow.NewTask{}, flow.NewTask{}, flow.NewTask{})
		h := e.hold(t0, 2, "w")
		e.set(flow.SetTaskRequest{TaskID: h[0].TaskID, Lease: h[0].Lease, Status: flow.StatusSuccess}, t0.Add(time.Second))
		e.set(flow.SetTaskRequest{TaskID: h[1].TaskID, Lease: h[1].Lease, Status: flow.StatusFailed}, t0.Add(time.Hour))
		n, err := e.s.PruneEnded(ctx, t0.Add(time.Minute), 100)
		if err != nil || n != 1 {
			t.Fatalf("prune = %d, %v; want 1", n, err)
		}
		if _, err := e.s.GetTask(ctx, h[0].TaskID); !errors.Is(err, flow.ErrNotFound) {
			t.Fatal("an old finished task survived the prune")
		}
		if n, _ := e.s.PruneEnded(ctx, t0.Add(2*time.Hour), 100); n != 1 {
			t.Fatalf("second prune = %d, want 1", n)
		}
		for _, id := range idv {
			if id != h[0].TaskID && id != h[1].TaskID {
				e.get(id) // the pending one stays
			}
		}
	})

	// One task (the stores' statements for a single hold and outcome) and
	// two (those for batches).
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("ScheduleLogKeepsLastEntries/tasks=%d", n), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, f, store.Options{})
			// The worker ids hold JSON that a log kept as text must
			// escape: a quote, a backslash and the text an entry begins
			// with.
			nts := make([]flow.NewTask, n)
			for k := range nts {
				nts[k] = flow.NewTask{TaskStage: "s0"}
			}
			tasks := e.create(nts...)
			worker := func(i int) string { return fmt.Sprintf(`w%d "{"at":\\`, i) }
			now := t0
			for i := 0; i < 8; i++ { // 1 created + 8 x (held, pending) = 17 entries
				h := e.hold(now, n, worker(i))
				if len(h) != n {
					t.Fatalf("round %d: held %d", i, len(h))
				}
				reqs := make([]flow.SetTaskRequest, len(h))
				for j, r := range h {
					reqs[j] = flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusPending, TaskStage: fmt.Sprintf("s%d", i+1)}
				}
				errs, err := e.s.SetTasks(context.Background(), reqs, now)
				if err != nil {
					t.Fatal(err)
				}
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				now = now.Add(time.Second)
			}
			for _, id := range tasks {
				r := e.get(id)
				if len(r.ScheduleLog) != flow.ScheduleLogSize {
					t.Fatalf("log has %d entries, want %d: %+v", len(r.ScheduleLog), flow.ScheduleLogSize, r.ScheduleLog)
				}
				// The last five rounds, oldest first: held by worker i at
				// stage s<i>, then pending at stage s<i+1>.
				for k, l := range r.ScheduleLog {
					i := 3 + k/2
					want := flow.LogEntry{At: t0.Add(time.Duration(i) * time.Second), Worker: worker(i), Stage: fmt.Sprintf("s%d", i), Event: flow.EventHeld}
					if k%2 == 1 {
						want.Stage, want.Event = fmt.Sprintf("s%d", i+1), flow.EventPending
					}
					if !l.At.Equal(want.At) || l.Worker != want.Worker || l.Stage != want.Stage || l.Event != want.Event {
						t.Fatalf("entry %d = %+v, want %+v (log %+v)", k, l, want, r.ScheduleLog)
					}
				}
			}
		})
	}
	t.Run("OnDue", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var got []string
		e := newEnv(t, f, store.Options{OnDue: func(tt string) { mu.Lock(); got = append(got, tt); mu.Unlock() }})
		reset := func() []string { mu.Lock(); defer mu.Unlock(); g := got; got = nil; return g }
		e.create(flow.NewTask{}, flow.NewTask{})
		if g := reset(); fmt.Sprint(g) != "[video]" {
			t.Fatalf("after create OnDue got %v", g)
		}
		h := e.hold(t0, 2, "w")
		reset()
		e.set(flow.SetTaskRequest{TaskID: h[0].TaskID, Lease: h[0].Lease, Status: flow.StatusSuccess}, t0)
		if g := reset(); len(g) != 0 {
			t.Fatalf("success made something due: %v", g)
		}
		e.set(flow.SetTaskRequest{TaskID: h[1].TaskID, Lease: h[1].Lease, Status: flow.StatusPending, TaskStage: "next"}, t0)
		if g := reset(); fmt.Sprint(g) != "[video]" {
			t.Fatalf("after handing to a stage OnDue got %v", g)
		}
	})

	t.Run("ConcurrentStartMigrates", func(t *testing.T) {
		t.Parallel()
		p := Prefix()
		var wg sync.WaitGroup
		stores := make([]store.Store, 4)
		for i := range stores {
			wg.Add(1)
			go func() { defer wg.Done(); stores[i] = f.Open(t, p, store.Options{}) }()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if err := stores[0].RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := stores[3].GetType(ctx, "video"); err != nil {
			t.Fatalf("stores do not share tables: %v", err)
		}
	})

	t.Run("SetMatchesApplySet", func(t *testing.T) {
		t.Parallel()
		setModel(t, f)
	})

	t.Run("SetRacesCancel", func(t *testing.T) {
		t.Parallel()
		setRacesCancel(t, f)
	})

	t.Run("ConcurrentHoldNoDoubleClaim", func(t *testing.T) {
		t.Parallel()
		StressHold(t, f, store.Options{}, 3, 8, 600)
	})
	// Many one-task holders on two servers: the shape whose holds and sets
	// a store coalesces (one claim, one set batch for many callers).
	t.Run("ManyOneTaskHolders", func(t *testing.T) {
		t.Parallel()
		stressHold(t, f, store.Options{}, 2, 32, 500, func(w int) int { return 1 + w%3 })
	})

	runOperator(t, f)
	runFanOut(t, f)
	runKeys(t, f)
	runFair(t, f)
	runCounts(t, f)
	runCron(t, f)
	runLiveness(t, f)
}

// StressHold runs `servers` stores on one set of tables and `workers`
// goroutines per store that hold small batches and finish every task in two
// stages. It fails if a task is held while another holder has it, if a
// stage runs twice, or if a task is lost.
func StressHold(t *testing.T, f Factory, opts store.Options, servers, workers, tasks int) {
	stressHold(t, f, opts, servers, workers, tasks, func(int) int { return 5 })
}

// stressHold is StressHold with worker w holding up to limit(w) tasks at
// a time; a hold that returns more fails the test.
func stressHold(t *testing.T, f Factory, opts store.Options, servers, workers, tasks int, limit func(w int) int) {
	ctx := context.Background()
	p := Prefix()
	stores := make([]store.Store, servers)
	for i := range stores {
		stores[i] = f.Open(t, p, opts)
	}
	tt := defType
	tt.MaxProcessingMS = int64(time.Hour / time.Millisecond) // no rescue during the test
	if err := stores[0].RegisterType(ctx, tt, t0); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var recs []flow.Record
	for _, id := range flow.NewTaskIDs(now, tasks) {
		recs = append(recs, flow.NewRecord(id, flow.NewTask{TaskType: "video", TaskStage: "one"}, tt, now))
	}
	if err := stores[0].CreateTasks(ctx, recs); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		holding  = map[string]string{} // task -> worker holding it now
		ran      = map[string]int{}    // "task/stage" -> runs
		by       = map[string]string{} // "task/stage" -> the worker that held it
		finished atomic.Int64
	)
	deadline := time.Now().Add(90 * time.Second)
	var wg sync.WaitGroup
	for si, s := range stores {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				me := fmt.Sprintf("s%dw%d", si, w)
				for finished.Load() < int64(tasks) && time.Now().Before(deadline) {
					now := time.Now().UTC()
					lease := flow.NewLease()
					got, err := s.Hold(ctx, store.HoldParams{TaskType: "video", WorkerID: me, Limit: limit(w), Lease: lease, Now: now, LeaseExpiry: now.Add(time.Hour)})
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) > limit(w) {
						t.Errorf("%s asked for %d tasks, got %d", me, limit(w), len(got))
					}
					for _, r := range got {
						if r.Owner != me || r.Lease != lease {
							t.Errorf("%s got task %s with owner %q, lease %q (its lease %q)", me, r.TaskID, r.Owner, r.Lease, lease)
						}
						if n := len(r.ScheduleLog); n == 0 || r.ScheduleLog[n-1].Worker != me || r.ScheduleLog[n-1].Event != flow.EventHeld {
							t.Errorf("%s got task %s whose log ends %+v", me, r.TaskID, r.ScheduleLog[max(n-1, 0):])
						}
					}
					if len(got) == 0 {
						time.Sleep(time.Millisecond) // others hold the rest; poll again
						continue
					}
					var reqs []flow.SetTaskRequest
					mu.Lock()
					for _, r := range got {
						if other, busy := holding[r.TaskID]; busy {
							t.Errorf("task %s held by %s while %s holds it", r.TaskID, me, other)
						}
						holding[r.TaskID] = me
						ran[r.TaskID+"/"+r.TaskStage]++
						by[r.TaskID+"/"+r.TaskStage] = me
						req := flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess}
						if r.TaskStage == "one" {
							req.Status, req.TaskStage = flow.StatusPending, "two"
						}
						reqs = append(reqs, req)
					}
					mu.Unlock()
					// Release our claim in the book before the store does, so
					// a legitimate re-hold of the next stage is not flagged.
					mu.Lock()
					for _, r := range got {
						delete(holding, r.TaskID)
					}
					mu.Unlock()
					errs, err := s.SetTasks(ctx, reqs, time.Now().UTC())
					if err != nil {
						t.Error(err)
						return
					}
					for i, e := range errs {
						if e != nil {
							t.Errorf("set %s: %v", reqs[i].TaskID, e)
						} else if reqs[i].Status == flow.StatusSuccess {
							finished.Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if finished.Load() != int64(tasks) {
		t.Fatalf("finished %d of %d tasks", finished.Load(), tasks)
	}
	for _, r := range recs {
		for _, st := range []string{"one", "two"} {
			if n := ran[r.TaskID+"/"+st]; n != 1 {
				t.Errorf("task %s stage %s ran %d times", r.TaskID, st, n)
			}
		}
		// The stored log names each stage's holder (a coalesced claim
		// writes every holder's own).
		got, err := stores[0].GetTask(ctx, r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range got.ScheduleLog {
			if l.Event == flow.EventHeld && l.Worker != by[r.TaskID+"/"+l.Stage] {
				t.Errorf("task %s: log says stage %s held by %q, it was %q", r.TaskID, l.Stage, l.Worker, by[r.TaskID+"/"+l.Stage])
			}
		}
	}
	st, err := stores[0].Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Counts["success"] != int64(tasks) {
		t.Fatalf("stats after the run: %v", st)
	}
}

// setModel checks SetTasks against flow.ApplySet, the reference: random
// batches (right and wrong leases, every status, stage changes, contexts,
// delays, errors, tasks held twice in one batch, pending, ended and missing
// tasks) must give the per-item errors and the stored records that
// applying ApplySet in request order to the tasks as they were gives. Most
// rounds carry no error and no repeated task, the batches stores may apply
// by a faster path than lock-and-apply.
func setModel(t *testing.T, f Factory) {
	ctx := context.Background()
	e := newEnv(t, f, store.Options{})
	for round := 0; round < 30; round++ {
		seed := uint64(round)
		rng := mrand.New(mrand.NewPCG(seed, 7))
		base := t0.Add(time.Duration(round) * 24 * time.Hour)
		stages := []string{"", "a", "b"}
		nts := make([]flow.NewTask, 7)
		for i := range nts {
			nts[i] = flow.NewTask{TaskStage: stages[rng.IntN(3)]}
			if rng.IntN(2) == 0 {
				nts[i].TaskContext = json.RawMessage(fmt.Sprintf(`{"k":%d}`, i))
			}
		}
		idv := flow.NewTaskIDs(base, len(nts))
		recs := make([]flow.Record, len(nts))
		for i, nt := range nts {
			nt.TaskType = e.tt.TaskType
			recs[i] = flow.NewRecord(idv[i], nt, e.tt, base)
		}
		if err := e.s.CreateTasks(ctx, recs); err != nil {
			t.Fatal(err)
		}
		// Warm up: some tasks get a retry (crt_retry_num 1), one ends.
		h := e.hold(base, 10, "w0")
		var warm []flow.SetTaskRequest
		for i, r := range h {
			switch {
			case i == 0:
				warm = append(warm, flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess})
			case rng.IntN(2) == 0:
				warm = append(warm, flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusPending, Error: "warm"})
			default:
				warm = append(warm, flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusPending})
			}
		}
		if errs, err := e.s.SetTasks(ctx, warm, base); err != nil || errors.Join(errs...) != nil {
			t.Fatalf("round %d warm-up: %v %v", round, err, errs)
		}
		held := e.hold(base.Add(time.Hour), 10, fmt.Sprintf("w%d", round))
		lease := map[string]string{}
		for _, r := range held {
			lease[r.TaskID] = r.Lease
		}
		// One more task stays pending.
		extra := flow.NewRecord(flow.NewTaskIDs(base, 1)[0], flow.NewTask{TaskType: e.tt.TaskType, TaskStage: "a"}, e.tt, base.Add(48*time.Hour))
		if err := e.s.CreateTasks(ctx, []flow.Record{extra}); err != nil {
			t.Fatal(err)
		}
		pool := append(append([]string(nil), idv...), extra.TaskID, "01ARZ3NDEKTSV4RRFFQ69G5FAV")
		withErrors, dups := rng.IntN(4) == 0, rng.IntN(4) == 0
		var reqs []flow.SetTaskRequest
		used := map[string]bool{}
		for k := 1 + rng.IntN(8); k > 0; k-- {
			id := pool[rng.IntN(len(pool))]
			if used[id] && !dups {
				continue
			}
			used[id] = true
			req := flow.SetTaskRequest{TaskID: id, Lease: lease[id], Status: []flow.Status{flow.StatusPending, flow.StatusSuccess, flow.StatusFailed}[rng.IntN(3)],
				TaskStage: []string{"", "a", "b", "z"}[rng.IntN(4)], DelayMS: []int64{0, 1500}[rng.IntN(2)]}
			if req.Lease == "" || rng.IntN(6) == 0 {
				req.Lease = "not-the-lease"
			}
			if rng.IntN(2) == 0 {
				req.TaskContext = json.RawMessage(fmt.Sprintf(`{"set":%d}`, k))
			}
			if withErrors && rng.IntN(2) == 0 {
				req.Error = "boom"
			}
			reqs = append(reqs, req)
		}
		// The model: ApplySet in request order on the tasks as they are.
		want := map[string]*flow.Record{}
		for _, id := range pool {
			if r, err := e.s.GetTask(ctx, id); err == nil {
				r.ScheduleLog = append([]flow.LogEntry(nil), r.ScheduleLog...)
				want[id] = &r
			}
		}
		now := base.Add(2 * time.Hour)
		wantErrs := make([]error, len(reqs))
		for i, req := range reqs {
			r, ok := want[req.TaskID]
			if !ok {
				wantErrs[i] = flow.ErrNotFound
				continue
			}
			c := *r
			c.ScheduleLog = append([]flow.LogEntry(nil), r.ScheduleLog...)
			if err := flow.ApplySet(&c, req, now); err != nil {
				wantErrs[i] = flow.ErrStaleLease
				continue
			}
			*r = c
		}
		errs, err := e.s.SetTasks(ctx, reqs, now)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range reqs {
			if !errors.Is(errs[i], wantErrs[i]) || (wantErrs[i] == nil && errs[i] != nil) {
				t.Errorf("round %d: req %d %+v: err %v, want %v", round, i, reqs[i], errs[i], wantErrs[i])
			}
		}
		for id, w := range want {
			got := e.get(id)
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(w)
			if string(gj) != string(wj) {
				t.Errorf("round %d: task %s after %+v\n got  %s\n want %s", round, id, reqs, gj, wj)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// setRacesCancel sets held tasks success in batches while another goroutine
// cancels the same tasks: the lease is the only thing between them, so for
// every task exactly one wins, and what each was told matches what is
// stored.
func setRacesCancel(t *testing.T, f Factory) {
	ctx := context.Background()
	e := newEnv(t, f, store.Options{})
	const n = 200
	nts := make([]flow.NewTask, n)
	e.create(nts...)
	var held []flow.Record
	for len(held) < n {
		h := e.hold(t0, n, "w")
		if len(h) == 0 {
			t.Fatalf("held %d of %d", len(held), n)
		}
		held = append(held, h...)
	}
	setErr := make([]error, n)
	cancelErr := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i += 20 {
			var reqs []flow.SetTaskRequest
			for _, r := range held[i : i+20] {
				reqs = append(reqs, flow.SetTaskRequest{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess})
			}
			errs, err := e.s.SetTasks(ctx, reqs, t0.Add(time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			copy(setErr[i:], errs)
		}
	}()
	go func() {
		defer wg.Done()
		for i := n - 1; i >= 0; i-- { // from the other end, so they meet
			cancelErr[i] = e.s.CancelTask(ctx, held[i].TaskID, t0.Add(time.Second))
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	won := map[flow.Status]int{}
	for i, r := range held {
		got := e.get(r.TaskID)
		won[got.Status]++
		switch got.Status {
		case flow.StatusSuccess:
			if setErr[i] != nil || !errors.Is(cancelErr[i], flow.ErrStaleLease) {
				t.Errorf("task %s ended success; set err %v, cancel err %v", r.TaskID, setErr[i], cancelErr[i])
			}
		case flow.StatusCancelled:
			if !errors.Is(setErr[i], flow.ErrStaleLease) || cancelErr[i] != nil {
				t.Errorf("task %s ended cancelled; set err %v, cancel err %v", r.TaskID, setErr[i], cancelErr[i])
			}
		default:
			t.Errorf("task %s is %s after a set and a cancel", r.TaskID, got.Status)
		}
	}
	t.Logf("success %d, cancelled %d", won[flow.StatusSuccess], won[flow.StatusCancelled])
}
