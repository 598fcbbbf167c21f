package storetest

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// fairHold holds up to limit tasks of e's type on s as a server would:
// with the type's fair and fairness_weights.
func (e *env) fairHold(s store.Store, now time.Time, limit int) []flow.Record {
	e.t.Helper()
	recs, err := s.Hold(context.Background(), store.HoldParams{TaskType: e.tt.TaskType, WorkerID: "w", Limit: limit,
		Lease: flow.NewLease(), Now: now, LeaseExpiry: now.Add(time.Minute), Fair: e.tt.Fair, FairnessWeights: e.tt.FairnessWeights})
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// fairCount counts recs by fairness key.
func fairCount(recs []flow.Record) map[string]int {
	m := map[string]int{}
	for _, r := range recs {
		m[r.FairnessKey]++
	}
	return m
}

// tasksOf makes n new tasks of one fairness key.
func tasksOf(key string, n int) []flow.NewTask {
	out := make([]flow.NewTask, n)
	for i := range out {
		out[i] = flow.NewTask{TaskStage: "a", FairnessKey: key}
	}
	return out
}

// fairType is a fair type with weights.
func fairType(weights map[string]int) flow.TaskType {
	tt := defType
	tt.TaskType, tt.Fair, tt.FairnessWeights, tt.ScheduleLimit = "fair", true, weights, 100
	return tt
}

// runFair checks fair shares per key (fairness_key on a type registered
// with fair): holds split by weight, a key with few tasks is not starved
// by one with many created before it, tasks without a key fill what the
// keys leave, and a type that is not fair holds by due time alone.
func runFair(t *testing.T, f Factory) {
	ctx := context.Background()

	t.Run("FairSharesByWeight", func(t *testing.T) {
		t.Parallel()
		FairByWeight(t, f, store.Options{})
	})

	// A key with few tasks, created after many of another, gets half of
	// the first holds until it has none due; its unused share goes to the
	// other key; a task without a key waits for a hold the keys leave room
	// in, and a delayed task is not due.
	t.Run("FewNotStarved", func(t *testing.T) {
		t.Parallel()
		e := &env{t: t, s: f.Open(t, Prefix(), store.Options{}), tt: fairType(nil)}
		if err := e.s.RegisterType(ctx, e.tt, t0); err != nil {
			t.Fatal(err)
		}
		e.createAt(e.s, t0, flow.NewTask{TaskStage: "a"})
		e.createAt(e.s, t0.Add(time.Second), tasksOf("big", 6)...)
		e.createAt(e.s, t0.Add(2*time.Second), tasksOf("small", 3)...)
		e.createAt(e.s, t0.Add(2*time.Second), flow.NewTask{TaskStage: "a", FairnessKey: "later", DelayMS: time.Hour.Milliseconds()})
		now := t0.Add(time.Minute)
		if c := fairCount(e.fairHold(e.s, now, 4)); c["big"] != 2 || c["small"] != 2 {
			t.Fatalf("first hold: %v, want big 2, small 2", c)
		}
		if c := fairCount(e.fairHold(e.s, now, 4)); c["big"] != 3 || c["small"] != 1 {
			t.Fatalf("second hold: %v, want big 3, small 1 (small's last, its unused share to big)", c)
		}
		if c := fairCount(e.fairHold(e.s, now, 4)); c["big"] != 1 || c[""] != 1 || len(c) != 2 {
			t.Fatalf("third hold: %v, want big 1 and the unkeyed task", c)
		}
		if h := e.fairHold(e.s, now, 4); len(h) != 0 {
			t.Fatalf("fourth hold: %d tasks, want none (the delayed one is not due)", len(h))
		}
		// The fair claims keep the counts too (they are the writes'
		// own statements, not covered by a trigger).
		checkCounts(t, "after fair holds", e.s, trueCounts(t, e.s))
	})

	// With more keys than a hold reads (twice its size), the keys take
	// turns: 30 keys, holds of 3, every key once in the first 30 tasks,
	// though their tasks were created key after key.
	t.Run("ManyKeysTakeTurns", func(t *testing.T) {
		t.Parallel()
		e := &env{t: t, s: f.Open(t, Prefix(), store.Options{}), tt: fairType(nil)}
		if err := e.s.RegisterType(ctx, e.tt, t0); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 30; k++ {
			e.createAt(e.s, t0.Add(time.Duration(k)*time.Second), tasksOf(fmt.Sprintf("k%02d", k), 3)...)
		}
		var got []flow.Record
		for i := 0; i < 10; i++ {
			got = append(got, e.fairHold(e.s, t0.Add(time.Minute), 3)...)
		}
		if c := fairCount(got); len(c) != 30 {
			t.Fatalf("30 tasks in holds of 3 went to %d keys, want all 30 once: %v", len(c), c)
		}
		checkCounts(t, "after fair holds", e.s, trueCounts(t, e.s))
	})

	// A type that is not fair holds by due time alone, keys or not.
	t.Run("UnfairUnchanged", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, f, store.Options{})
		first := e.createAt(e.s, t0, tasksOf("A", 5)...)
		e.createAt(e.s, t0.Add(time.Second), tasksOf("B", 5)...)
		h := e.fairHold(e.s, t0.Add(time.Minute), 5)
		if c := fairCount(h); c["A"] != 5 {
			t.Fatalf("hold of an unfair type: %v, want the 5 oldest (A)", c)
		}
		if got := e.get(first[0].TaskID); got.FairnessKey != "A" {
			t.Fatalf("fairness_key = %q, want A", got.FairnessKey)
		}
	})
}

// FairByWeight checks that weights 3:1 give 3:1 of every hold of 4, and
// of every 4 holds of one, on each of two stores (opened with opts)
// sharing the tables; the heavy key's tasks were created first and the
// light one's are held all the same.
func FairByWeight(t *testing.T, f Factory, opts store.Options) {
	ctx := context.Background()
	prefix := Prefix()
	s1, s2 := f.Open(t, prefix, opts), f.Open(t, prefix, opts)
	e := &env{t: t, s: s1, tt: fairType(map[string]int{"heavy": 3})}
	if err := s1.RegisterType(ctx, e.tt, t0); err != nil {
		t.Fatal(err)
	}
	got, err := s2.GetType(ctx, e.tt.TaskType)
	if err != nil || !got.Fair || !maps.Equal(got.FairnessWeights, e.tt.FairnessWeights) {
		t.Fatalf("GetType = %+v, %v; want fair with weights %v", got, err, e.tt.FairnessWeights)
	}
	e.createAt(s1, t0, tasksOf("heavy", 100)...)
	e.createAt(s1, t0.Add(time.Second), tasksOf("light", 100)...)
	now := t0.Add(time.Minute)
	for i := 0; i < 5; i++ {
		if c := fairCount(e.fairHold(s1, now, 4)); c["heavy"] != 3 || c["light"] != 1 {
			t.Fatalf("hold %d of 4: %v, want heavy 3, light 1", i, c)
		}
	}
	var ones []flow.Record
	for i := 0; i < 8; i++ {
		ones = append(ones, e.fairHold(s2, now, 1)...)
	}
	if c := fairCount(ones); c["heavy"] != 6 || c["light"] != 2 {
		t.Fatalf("8 holds of 1: %v, want heavy 6, light 2", c)
	}
}
