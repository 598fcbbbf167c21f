package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// createAt creates nts (of e's type when they name none) at now, in one
// batch: the batch's ids, like its creation times, follow its order.
func (e *env) createAt(s store.Store, now time.Time, nts ...flow.NewTask) []flow.Record {
	e.t.Helper()
	ids := flow.NewTaskIDs(now, len(nts))
	recs := make([]flow.Record, len(nts))
	for i, nt := range nts {
		if nt.TaskType == "" {
			nt.TaskType = e.tt.TaskType
		}
		recs[i] = flow.NewRecord(ids[i], nt, e.tt, now)
	}
	if err := s.CreateTasks(context.Background(), recs); err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func keysOf(recs []flow.Record, key func(flow.Record) string) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = key(r)
	}
	slices.Sort(out)
	return out
}

func seqKey(r flow.Record) string  { return r.SequenceKey }
func rateKey(r flow.Record) string { return r.RateKey }

// runKeys checks order per key (sequence_key) and pausing a key
// (rate_key): the rules hold across stores sharing the database, and
// neither a pause nor a rate limit spends a retry.
func runKeys(t *testing.T, f Factory) {
	ctx := context.Background()

	// One task of a key at a time, in creation order, through a next
	// stage and a retry with backoff; other keys and unkeyed tasks are
	// not held up.
	t.Run("SequenceOrder", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		recs := e.createAt(e.s, t0, flow.NewTask{TaskStage: "a", SequenceKey: "A"}, flow.NewTask{TaskStage: "a", SequenceKey: "B"},
			flow.NewTask{TaskStage: "a", SequenceKey: "A"}, flow.NewTask{TaskStage: "a"}, flow.NewTask{TaskStage: "a", SequenceKey: "B"},
			flow.NewTask{TaskStage: "a", SequenceKey: "A"})
		a1, b1, a2, free, b2, a3 := recs[0].TaskID, recs[1].TaskID, recs[2].TaskID, recs[3].TaskID, recs[4].TaskID, recs[5].TaskID
		now := t0.Add(time.Second)
		held := e.hold(now, 10, "w")
		if got := ids(held); !slices.Equal(keysOf(held, seqKey), []string{"", "A", "B"}) || !slices.Contains(got, a1) || !slices.Contains(got, b1) || !slices.Contains(got, free) {
			t.Fatalf("first hold = %v (keys %v), want %s %s %s", got, keysOf(held, seqKey), a1, b1, free)
		}
		if h := e.hold(now, 10, "w"); len(h) != 0 {
			t.Fatalf("held %v while the heads of A and B are processing", ids(h))
		}
		byID := map[string]flow.Record{}
		for _, r := range held {
			byID[r.TaskID] = r
		}
		// A's head moves to its next stage: still live, still first.
		if err := e.set(flow.SetTaskRequest{TaskID: a1, Lease: byID[a1].Lease, Status: flow.StatusPending, TaskStage: "b"}, now); err != nil {
			t.Fatal(err)
		}
		h := e.hold(now, 10, "w")
		if len(h) != 1 || h[0].TaskID != a1 || h[0].TaskStage != "b" {
			t.Fatalf("after A's head moved to stage b, hold = %v, want %s alone", ids(h), a1)
		}
		// A retry with backoff keeps its place: A2 waits out the backoff too.
		if err := e.set(flow.SetTaskRequest{TaskID: a1, Lease: h[0].Lease, Status: flow.StatusPending, Error: "flaky"}, now); err != nil {
			t.Fatal(err)
		}
		if h := e.hold(now, 10, "w"); len(h) != 0 {
			t.Fatalf("held %v while A's head waits for its retry", ids(h))
		}
		later := now.Add(time.Minute)
		h = e.hold(later, 10, "w")
		if len(h) != 1 || h[0].TaskID != a1 || h[0].CrtRetryNum != 1 {
			t.Fatalf("after the backoff, hold = %+v, want %s (retry 1)", ids(h), a1)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: a1, Lease: h[0].Lease, Status: flow.StatusSuccess}, later); err != nil {
			t.Fatal(err)
		}
		// B's head fails: ended, B2 is next.
		if err := e.set(flow.SetTaskRequest{TaskID: b1, Lease: byID[b1].Lease, Status: flow.StatusFailed}, later); err != nil {
			t.Fatal(err)
		}
		h = e.hold(later, 10, "w")
		if got := ids(h); len(got) != 2 || !slices.Contains(got, a2) || !slices.Contains(got, b2) {
			t.Fatalf("after both heads ended, hold = %v, want %s and %s", got, a2, b2)
		}
		// A cancel ends a head too.
		if err := e.s.CancelTask(ctx, a2, later); err != nil {
			t.Fatal(err)
		}
		if h := e.hold(later, 10, "w"); len(h) != 1 || h[0].TaskID != a3 {
			t.Fatalf("after A2 was cancelled, hold = %v, want %s", ids(h), a3)
		}
	})

	// A child with its waiting parent's type and sequence key would wait
	// for the parent forever: refused, nothing created.
	t.Run("SequenceFanOutCycle", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		if err := e.s.RegisterType(ctx, kidType, t0); err != nil {
			t.Fatal(err)
		}
		e.createAt(e.s, t0, flow.NewTask{TaskStage: "split", SequenceKey: "K"})
		p := e.hold(t0, 1, "w")[0]
		req := e.fanOut(p, "join", flow.NewTask{TaskStage: "a"}, flow.NewTask{TaskType: e.tt.TaskType, TaskStage: "a", SequenceKey: "K"})
		err := e.set(req, t0)
		var fe *flow.FieldError
		if !errors.As(err, &fe) || fe.Field != "children[1].sequence_key" {
			t.Fatalf("fan-out into the parent's own key: %v, want a field error on children[1].sequence_key", err)
		}
		if r := e.get(p.TaskID); r.Status != flow.StatusProcessing {
			t.Fatalf("parent after the refused fan-out: %s", r.Status)
		}
		// Another key, or the same key of another type, is fine.
		req = e.fanOut(p, "join", flow.NewTask{TaskStage: "a", SequenceKey: "K"}, flow.NewTask{TaskType: e.tt.TaskType, TaskStage: "a", SequenceKey: "L"})
		if err := e.set(req, t0); err != nil {
			t.Fatal(err)
		}
	})

	// A task created after a newer one of its key was held (an older id
	// whose create committed late) waits while the other is processing.
	t.Run("SequenceOneProcessing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		newer := e.createAt(e.s, t0.Add(time.Second), flow.NewTask{TaskStage: "a", SequenceKey: "K"})[0]
		h := e.hold(t0.Add(time.Minute), 10, "w")
		if len(h) != 1 || h[0].TaskID != newer.TaskID {
			t.Fatalf("hold = %v, want %s", ids(h), newer.TaskID)
		}
		older := e.createAt(e.s, t0, flow.NewTask{TaskStage: "a", SequenceKey: "K"})[0]
		if got := e.hold(t0.Add(time.Minute), 10, "w"); len(got) != 0 {
			t.Fatalf("held %v while %s of the same key is processing", ids(got), newer.TaskID)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: newer.TaskID, Lease: h[0].Lease, Status: flow.StatusSuccess}, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got := e.hold(t0.Add(time.Minute), 10, "w"); len(got) != 1 || got[0].TaskID != older.TaskID {
			t.Fatalf("hold = %v, want %s", ids(got), older.TaskID)
		}
	})

	// Two stores on one database, four holders on each, random limits:
	// never two tasks of a key in a worker's hands at once, and each key's
	// tasks run in creation order.
	t.Run("SequenceAcrossStores", func(t *testing.T) {
		t.Parallel()
		prefix := Prefix()
		stores := []store.Store{f.Open(t, prefix, store.Options{}), f.Open(t, prefix, store.Options{})}
		e := &env{t: t, s: stores[0], tt: defType}
		if err := e.s.RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		const keys, perKey = 8, 12
		var nts []flow.NewTask
		for i := 0; i < keys*perKey; i++ {
			nts = append(nts, flow.NewTask{TaskStage: "a", SequenceKey: fmt.Sprintf("k%d", i%keys)})
		}
		recs := e.createAt(e.s, t0, nts...)
		want := map[string][]string{}
		for _, r := range recs {
			want[r.SequenceKey] = append(want[r.SequenceKey], r.TaskID)
		}
		var mu sync.Mutex
		ran := map[string][]string{}
		busy := map[string]*atomic.Bool{}
		for k := range want {
			busy[k] = new(atomic.Bool)
		}
		var done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		now := t0.Add(time.Second)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				s := stores[w%2]
				for idle := 0; done.Load() < keys*perKey; {
					if idle > 100000 {
						errs <- fmt.Errorf("worker %d: nothing held in 100,000 holds with %d of %d tasks done", w, done.Load(), keys*perKey)
						return
					}
					held, err := s.Hold(ctx, store.HoldParams{TaskType: defType.TaskType, WorkerID: fmt.Sprintf("w%d", w), Limit: 1 + w%3,
						Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Hour)})
					if err != nil {
						errs <- err
						return
					}
					if len(held) == 0 {
						idle++
						runtime.Gosched()
						continue
					}
					idle = 0
					for _, r := range held {
						if !busy[r.SequenceKey].CompareAndSwap(false, true) {
							errs <- fmt.Errorf("%s of key %s handed out while another task of the key is processing", r.TaskID, r.SequenceKey)
							return
						}
						mu.Lock()
						ran[r.SequenceKey] = append(ran[r.SequenceKey], r.TaskID)
						mu.Unlock()
						busy[r.SequenceKey].Store(false) // before the set commits: the next may be held once it has
						es, err := s.SetTasks(ctx, []flow.SetTaskRequest{{TaskID: r.TaskID, Lease: r.Lease, Status: flow.StatusSuccess}}, now)
						if err == nil {
							err = es[0]
						}
						if err != nil {
							errs <- err
							return
						}
						done.Add(1)
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for k, w := range want {
			if !slices.Equal(ran[k], w) {
				t.Errorf("key %s ran %v, want creation order %v", k, ran[k], w)
			}
		}
	})

	// A worker's 429: set pending with pause_rate_key_ms on one store
	// keeps the key's tasks, old and new, from every store's holds until
	// the pause ends; other keys go on; the task runs again after the
	// pause with its retries untouched.
	t.Run("PauseAcrossStores", func(t *testing.T) {
		t.Parallel()
		prefix := Prefix()
		s1, s2 := f.Open(t, prefix, store.Options{}), f.Open(t, prefix, store.Options{})
		e := &env{t: t, s: s1, tt: defType}
		if err := s1.RegisterType(ctx, defType, t0); err != nil {
			t.Fatal(err)
		}
		first := e.createAt(s1, t0, flow.NewTask{TaskStage: "call", RateKey: "api", Priority: 10})[0]
		e.createAt(s1, t0, flow.NewTask{TaskStage: "call", RateKey: "api"}, flow.NewTask{TaskStage: "call", RateKey: "api"},
			flow.NewTask{TaskStage: "call", RateKey: "other"}, flow.NewTask{TaskStage: "call"})
		now := t0.Add(time.Second)
		h := e.holdType(s1, defType.TaskType, now, 1)
		if len(h) != 1 || h[0].TaskID != first.TaskID {
			t.Fatalf("hold = %v, want %s (its priority)", ids(h), first.TaskID)
		}
		if err := e.set(flow.SetTaskRequest{TaskID: first.TaskID, Lease: h[0].Lease, Status: flow.StatusPending, PauseRateKeyMS: 30000, Error: "429"}, now); err != nil {
			t.Fatal(err)
		}
		during := e.createAt(s2, now, flow.NewTask{TaskStage: "call", RateKey: "api"})[0]
		got := e.holdType(s2, defType.TaskType, now.Add(time.Second), 10)
		if keys := keysOf(got, rateKey); !slices.Equal(keys, []string{"", "other"}) {
			t.Fatalf("during the pause s2 held keys %v, want only other and the unkeyed task", keys)
		}
		pk, err := s2.PausedKeys(ctx, defType.TaskType, now.Add(time.Second), 100)
		if err != nil || len(pk) != 1 || pk[0].RateKey != "api" || !pk[0].Until.Equal(now.Add(30*time.Second)) {
			t.Fatalf("PausedKeys = %+v, %v; want api until %v", pk, err, now.Add(30*time.Second))
		}
		r, err := s2.GetTask(ctx, first.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		last := r.ScheduleLog[len(r.ScheduleLog)-1]
		if r.Status != flow.StatusPending || r.CrtRetryNum != 0 || !r.OrderTime.Equal(now.Add(30*time.Second)) || last.Event != flow.EventPaused || last.Error != "429" {
			t.Fatalf("paused task = %s, retries %d, due %v, last log %+v; want pending, 0 retries, due at the pause's end, event paused", r.Status, r.CrtRetryNum, r.OrderTime, last)
		}
		if got := e.holdType(s1, defType.TaskType, now.Add(29*time.Second), 10); len(got) != 0 {
			t.Fatalf("held %v before the pause ended", ids(got))
		}
		after := e.holdType(s1, defType.TaskType, now.Add(30*time.Second), 10)
		if len(after) != 4 || !slices.Contains(ids(after), first.TaskID) || !slices.Contains(ids(after), during.TaskID) {
			t.Fatalf("after the pause held %v, want the 4 api tasks", ids(after))
		}
		if pk, _ := s2.PausedKeys(ctx, defType.TaskType, now.Add(30*time.Second), 100); len(pk) != 0 {
			t.Fatalf("PausedKeys after the pause = %+v", pk)
		}
	})

	// A pause needs a rate key and status pending; a refused set changes
	// nothing.
	t.Run("PauseRefused", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		e.createAt(e.s, t0, flow.NewTask{TaskStage: "a"})
		h := e.hold(t0, 1, "w")[0]
		err := e.set(flow.SetTaskRequest{TaskID: h.TaskID, Lease: h.Lease, Status: flow.StatusPending, PauseRateKeyMS: 1000}, t0)
		var fe *flow.FieldError
		if !errors.As(err, &fe) || fe.Field != "pause_rate_key_ms" {
			t.Fatalf("pause of a task without a rate key: %v, want a field error on pause_rate_key_ms", err)
		}
		if r := e.get(h.TaskID); r.Status != flow.StatusProcessing || r.Lease != h.Lease {
			t.Fatalf("after the refused set: %s lease %q", r.Status, r.Lease)
		}
	})

	// rate_limit_per_second caps each key's holds across stores, a burst
	// of one second's worth; the tasks over it are given back with their
	// retries untouched and the key shows as paused until it admits again.
	t.Run("RateLimit", func(t *testing.T) {
		t.Parallel()
		prefix := Prefix()
		s1, s2 := f.Open(t, prefix, store.Options{}), f.Open(t, prefix, store.Options{})
		tt := defType
		tt.RateLimitPerSecond = 2
		e := &env{t: t, s: s1, tt: tt}
		if err := s1.RegisterType(ctx, tt, t0); err != nil {
			t.Fatal(err)
		}
		if got, err := s2.GetType(ctx, tt.TaskType); err != nil || got.RateLimitPerSecond != 2 {
			t.Fatalf("GetType = %+v, %v; want rate_limit_per_second 2", got, err)
		}
		var nts []flow.NewTask
		for i := 0; i < 6; i++ {
			nts = append(nts, flow.NewTask{TaskStage: "a", RateKey: "k"})
		}
		nts = append(nts, flow.NewTask{TaskStage: "a", RateKey: "j"}, flow.NewTask{TaskStage: "a"})
		e.createAt(s1, t0, nts...)
		now := t0.Add(time.Second)
		h := e.holdType(s1, tt.TaskType, now, 10)
		if keys := keysOf(h, rateKey); !slices.Equal(keys, []string{"", "j", "k", "k"}) {
			t.Fatalf("first hold: keys %v, want a burst of 2 of k, j and the unkeyed task", keys)
		}
		if got := e.holdType(s2, tt.TaskType, now, 10); len(got) != 0 {
			t.Fatalf("s2 held %v with k over its limit", ids(got))
		}
		pk, err := s2.PausedKeys(ctx, tt.TaskType, now, 10)
		if err != nil || len(pk) != 1 || pk[0].RateKey != "k" || !pk[0].Until.Equal(now.Add(500*time.Millisecond)) {
			t.Fatalf("PausedKeys = %+v, %v; want k until %v", pk, err, now.Add(500*time.Millisecond))
		}
		if got := e.holdType(s2, tt.TaskType, now.Add(500*time.Millisecond), 10); len(got) != 1 {
			t.Fatalf("half a second on, s2 held %d, want 1 (2 a second)", len(got))
		}
		rest := e.holdType(s1, tt.TaskType, now.Add(time.Minute), 10)
		if len(rest) != 2 {
			t.Fatalf("a minute on, held %d, want a burst of 2", len(rest))
		}
		for _, r := range rest {
			if r.CrtRetryNum != 0 {
				t.Fatalf("%s given back by the limit has crt_retry_num %d, want 0", r.TaskID, r.CrtRetryNum)
			}
		}
	})
}
