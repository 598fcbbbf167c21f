package wheel

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew[K comparable](t testing.TB, tick time.Duration, slots int) *Wheel[K] {
	t.Helper()
	w, err := New[K](tick, slots, t0)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestNewRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct {
		tick  time.Duration
		slots int
	}{{0, 8}, {-time.Second, 8}, {time.Second, 0}} {
		if _, err := New[int](tc.tick, tc.slots, t0); err == nil {
			t.Errorf("New(%v, %d) accepted", tc.tick, tc.slots)
		}
	}
}

// A timeout fires at the first tick at or after its deadline.
func TestFiresAtFirstTickAtOrAfterDeadline(t *testing.T) {
	tick := time.Second
	cases := []struct {
		name     string
		deadline time.Duration // from t0
		fireAt   time.Duration // first Advance time at which it fires
	}{
		{"on a tick", 3 * time.Second, 3 * time.Second},
		{"between ticks", 2500 * time.Millisecond, 3 * time.Second},
		{"past", -time.Second, time.Second},
		{"beyond one rotation", 40 * time.Second, 40 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := mustNew[string](t, tick, 8)
			w.Set("k", t0.Add(tc.deadline))
			var fired []string
			for now := tick; now <= 50*time.Second; now += tick {
				w.Advance(t0.Add(now), func(k string) { fired = append(fired, fmt.Sprint(k, "@", now)) })
				if len(fired) > 0 {
					break
				}
			}
			want := fmt.Sprint("k@", tc.fireAt)
			if len(fired) != 1 || fired[0] != want {
				t.Fatalf("fired %v, want [%s]", fired, want)
			}
			if w.Len() != 0 {
				t.Fatalf("Len after firing = %d", w.Len())
			}
		})
	}
}

func TestResetCancelAndJumps(t *testing.T) {
	w := mustNew[int](t, time.Second, 4)
	w.Set(1, t0.Add(3*time.Second))
	w.Set(2, t0.Add(3*time.Second))
	w.Set(3, t0.Add(10*time.Second))
	w.Set(1, t0.Add(9*time.Second)) // later: moves lazily
	w.Set(3, t0.Add(2*time.Second)) // earlier: must move now
	if !w.Cancel(2) || w.Cancel(2) {
		t.Fatal("Cancel should report true once, then false")
	}
	got := map[int]time.Duration{}
	for now := time.Second; now <= 12*time.Second; now += time.Second {
		w.Advance(t0.Add(now), func(k int) { got[k] = now })
	}
	want := map[int]time.Duration{1: 9 * time.Second, 3: 2 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	// A jump over many rotations fires everything due, once.
	for i := range 100 {
		w.Set(i, t0.Add(time.Duration(20+i)*time.Second))
	}
	n := w.Advance(t0.Add(time.Hour), nil)
	if n != 100 || w.Len() != 0 {
		t.Fatalf("jump fired %d, Len %d", n, w.Len())
	}
	// Time going backwards does nothing.
	w.Set(7, t0.Add(2*time.Hour))
	if n := w.Advance(t0, nil); n != 0 {
		t.Fatalf("backwards Advance fired %d", n)
	}
}

// A Handle cancels its own timeout, once, and never another key's that
// reused its entry.
func TestCancelHandle(t *testing.T) {
	w := mustNew[int](t, time.Second, 4)
	h1 := w.Set(1, t0.Add(3*time.Second))
	w.Set(2, t0.Add(3*time.Second))
	if !w.CancelHandle(h1) || w.CancelHandle(h1) || w.CancelHandle(Handle{}) {
		t.Fatal("CancelHandle should report true once, then false, and false for the zero Handle")
	}
	w.Set(3, t0.Add(5*time.Second)) // takes entry 1's slot in ents
	if w.CancelHandle(h1) {
		t.Fatal("a stale Handle cancelled the entry's next key")
	}
	if w.Len() != 2 {
		t.Fatalf("Len %d, want 2", w.Len())
	}
	got := map[int]bool{}
	w.Advance(t0.Add(10*time.Second), func(k int) { got[k] = true })
	if fmt.Sprint(got) != "map[2:true 3:true]" {
		t.Fatalf("fired %v, want 2 and 3", got)
	}
}

// Callbacks may re-arm their key (a poll).
func TestCallbackMayRearm(t *testing.T) {
	w := mustNew[string](t, time.Second, 8)
	w.Set("poll", t0.Add(5*time.Second))
	var at []time.Duration
	for now := time.Second; now <= 30*time.Second; now += time.Second {
		w.Advance(t0.Add(now), func(k string) {
			at = append(at, now)
			w.Set(k, t0.Add(now+5*time.Second))
		})
	}
	if fmt.Sprint(at) != "[5s 10s 15s 20s 25s 30s]" {
		t.Fatalf("poll fired at %v", at)
	}
}

// Model check against a map of deadlines: random sets, cancels and
// advances; every key fires exactly at the first tick >= its deadline.
func TestMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tick := 100 * time.Millisecond
		slots := rapid.IntRange(1, 16).Draw(rt, "slots")
		w, err := New[int](tick, slots, t0)
		if err != nil {
			rt.Fatal(err)
		}
		model := map[int]time.Time{}
		handles := map[int]Handle{} // the last Handle each key got; stale once it fired or was cancelled
		now := time.Duration(0)
		for i := 0; i < 200; i++ {
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); op {
			case 0, 3:
				k := rapid.IntRange(0, 20).Draw(rt, "key")
				d := time.Duration(rapid.IntRange(-500, 5000).Draw(rt, "ms")) * time.Millisecond
				dl := t0.Add(now + d)
				if op == 3 { // reset through a Handle, which may be stale
					_, armed := model[k]
					if got := w.Reset(handles[k], dl); got != armed {
						rt.Fatalf("Reset(handle of %d) = %v, armed: %v", k, got, armed)
					}
					if !armed {
						break
					}
				} else {
					handles[k] = w.Set(k, dl)
				}
				// A deadline at or before the current tick fires at the next one.
				if next := t0.Add(now - now%tick + tick); dl.Before(next) && !dl.After(t0.Add(now-now%tick)) {
					dl = next
				}
				model[k] = dl
			case 1:
				k := rapid.IntRange(0, 20).Draw(rt, "key")
				_, want := model[k]
				if got := w.Cancel(k); got != want {
					rt.Fatalf("Cancel(%d) = %v, model has it: %v", k, got, want)
				}
				delete(model, k)
			case 2:
				now += time.Duration(rapid.IntRange(0, 3000).Draw(rt, "advance ms")) * time.Millisecond
				at := t0.Add(now)
				nowTick := t0.Add(now - now%tick)
				w.Advance(at, func(k int) {
					dl, ok := model[k]
					if !ok {
						rt.Fatalf("key %d fired but is not armed", k)
					}
					if dl.After(at) {
						rt.Fatalf("key %d fired early: deadline %v, now %v", k, dl.Sub(t0), now)
					}
					delete(model, k)
				})
				for k, dl := range model {
					if !dl.After(nowTick) {
						rt.Fatalf("key %d not fired: deadline %v <= tick %v", k, dl.Sub(t0), nowTick.Sub(t0))
					}
				}
			}
			if w.Len() != len(model) {
				rt.Fatalf("Len %d, model %d", w.Len(), len(model))
			}
		}
	})
}

// Run drives the wheel from the real clock; awaited by event, no duration asserted.
func TestRunFiresOnRealClock(t *testing.T) {
	w, err := New[int](time.Millisecond, 64, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 10)
	var fired atomic.Int32
	for i := range 10 {
		w.Set(i, time.Now().Add(time.Duration(i)*time.Millisecond))
	}
	go w.Run(ctx, func(k int) { fired.Add(1); done <- k })
	seen := map[int]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < 10 {
		select {
		case k := <-done:
			if seen[k] {
				t.Fatalf("key %d fired twice", k)
			}
			seen[k] = true
		case <-deadline:
			t.Fatalf("only %d of 10 fired", len(seen))
		}
	}
}

// Next is never after the earliest deadline, is exact once Advance has
// passed an earlier bound, and reports nothing armed.
func TestNext(t *testing.T) {
	start := time.Unix(0, 0)
	w, err := New[int](10*time.Millisecond, 64, start)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Next(); ok {
		t.Fatal("Next with nothing armed")
	}
	w.Set(1, start.Add(50*time.Millisecond))
	w.Set(2, start.Add(2*time.Second)) // past one rotation of 64 ticks
	if n, _ := w.Next(); n.After(start.Add(50 * time.Millisecond)) {
		t.Fatalf("Next %v after the first deadline", n.Sub(start))
	}
	w.Cancel(1)
	if n, _ := w.Next(); n.After(start.Add(50 * time.Millisecond)) {
		t.Fatalf("Next %v moved later on a cancel (it is a lower bound)", n.Sub(start))
	}
	w.Advance(start.Add(60*time.Millisecond), nil)
	if n, _ := w.Next(); !n.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("after passing the bound, Next %v, want 2s", n.Sub(start))
	}
	if fired := w.Advance(start.Add(2*time.Second), nil); fired != 1 {
		t.Fatalf("fired %d at 2s, want 1", fired)
	}
	if _, ok := w.Next(); ok {
		t.Fatal("Next after the last fired")
	}
}

// ResetAt with Since's offset lands where Reset with the time does, on
// and off tick boundaries, and a stale handle is refused alike.
func TestResetAtMatchesReset(t *testing.T) {
	a, b := mustNew[int](t, 10*time.Millisecond, 64), mustNew[int](t, 10*time.Millisecond, 64)
	ha, hb := a.Set(1, t0.Add(time.Second)), b.Set(1, t0.Add(time.Second))
	for _, d := range []time.Duration{-time.Second, 0, 1, 10 * time.Millisecond, 15 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		at := t0.Add(d)
		if !a.Reset(ha, at) || !b.ResetAt(hb, b.Since(at)) {
			t.Fatalf("%v: a live handle refused", d)
		}
		da, _ := a.Deadline(1)
		db, _ := b.Deadline(1)
		if !da.Equal(db) {
			t.Fatalf("%v: ResetAt's deadline %v, Reset's %v", d, db, da)
		}
	}
	b.CancelHandle(hb)
	if b.ResetAt(hb, 0) {
		t.Fatal("ResetAt took a cancelled handle")
	}
}
