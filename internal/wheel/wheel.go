package wheel

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Wheel holds timeouts keyed by K. It is safe for concurrent use; expired
// keys are handed to the callback given to Advance or Run, outside the lock,
// so a callback may Set or Cancel keys again (a poll re-arms itself that way).
//
// Entries live in one slice and link to each other by index, so arming a
// key allocates nothing once the slice has grown, and a caller that keeps
// the Handle that Set returns resets its timeout with no map lookup: one
// index into the slice, one compare, one store.
type Wheel[K comparable] struct {
	mu     sync.Mutex
	tick   time.Duration
	origin time.Time
	cur    int64 // last tick processed
	mask   int64
	heads  []int32 // slot -> first entry, or none
	ents   []entry[K]
	free   []int32 // indexes of unused entries
	index  map[K]int32
	// next: no armed deadline is before this tick (a lower bound, exact
	// after Advance passes it), for Next.
	next int64
}

const none = -1

type entry[K comparable] struct {
	due        int64 // tick at which it fires
	slot       int32 // slot it is linked in
	prev, next int32
	gen        uint32 // bumped when the entry is freed: stale Handles miss
	key        K
}

// Handle names one armed timeout, for Reset and ResetAfter. It goes stale
// when the timeout fires or is cancelled; the zero Handle is always stale.
type Handle struct {
	i   int32
	gen uint32
}

// New returns a wheel ticking every tick, with tick 0 at start. slots is
// rounded up to a power of two; size it to about the longest common timeout
// divided by tick (longer timeouts still work, they just wait out extra
// rotations in their slot).
func New[K comparable](tick time.Duration, slots int, start time.Time) (*Wheel[K], error) {
	if tick <= 0 {
		return nil, fmt.Errorf("wheel: tick must be positive, got %v", tick)
	}
	if slots <= 0 || slots > 1<<30 {
		return nil, fmt.Errorf("wheel: slots must be in [1, 2^30], got %d", slots)
	}
	n := 1
	for n < slots {
		n <<= 1
	}
	heads := make([]int32, n)
	for i := range heads {
		heads[i] = none
	}
	return &Wheel[K]{
		tick:   tick,
		origin: start,
		mask:   int64(n - 1),
		heads:  heads,
		index:  make(map[K]int32),
		next:   math.MaxInt64,
	}, nil
}

// Tick reports the wheel's tick.
func (w *Wheel[K]) Tick() time.Duration { return w.tick }

func (w *Wheel[K]) push(i int32, slot int64) {
	e := &w.ents[i]
	e.slot = int32(slot)
	e.prev = none
	e.next = w.heads[slot]
	if e.next != none {
		w.ents[e.next].prev = i
	}
	w.heads[slot] = i
}

func (w *Wheel[K]) remove(i int32) {
	e := &w.ents[i]
	if e.prev != none {
		w.ents[e.prev].next = e.next
	} else {
		w.heads[e.slot] = e.next
	}
	if e.next != none {
		w.ents[e.next].prev = e.prev
	}
	e.prev, e.next = none, none
}

// Set arms key to fire at the first tick at or after deadline, replacing any
// earlier deadline for key (a reset). A deadline already passed fires at the
// next tick. The Handle resets the same timeout without the key lookup.
func (w *Wheel[K]) Set(key K, deadline time.Time) Handle {
	due := w.tickOf(deadline)
	w.mu.Lock()
	h := w.setLocked(key, due)
	w.mu.Unlock()
	return h
}

// SetAfter arms key to fire d after the wheel's current tick, read without
// a clock: the deadline is one tick past the first tick at or after
// current tick + d, so it is never early as long as the wheel is advanced
// every tick (Run does), and at most two ticks late. It is the cheap reset
// for callers that already advance the wheel on time.
func (w *Wheel[K]) SetAfter(key K, d time.Duration) Handle {
	n := w.ticksIn(d)
	w.mu.Lock()
	h := w.setLocked(key, w.cur+n+1)
	w.mu.Unlock()
	return h
}

// Reset moves h's timeout to deadline, as Set does for its key. It reports
// false, doing nothing, if h is stale (the timeout fired or was cancelled).
func (w *Wheel[K]) Reset(h Handle, deadline time.Time) bool {
	due := w.tickOf(deadline)
	w.mu.Lock()
	ok := w.resetLocked(h, due)
	w.mu.Unlock()
	return ok
}

// ResetAfter moves h's timeout to d after the current tick, as SetAfter
// does for its key; false if h is stale.
func (w *Wheel[K]) ResetAfter(h Handle, d time.Duration) bool {
	n := w.ticksIn(d)
	w.mu.Lock()
	ok := w.resetLocked(h, w.cur+n+1)
	w.mu.Unlock()
	return ok
}

func (w *Wheel[K]) ticksIn(d time.Duration) int64 {
	n := int64(d / w.tick)
	if d%w.tick != 0 {
		n++
	}
	return max(n, 0)
}

func (w *Wheel[K]) resetLocked(h Handle, due int64) bool {
	if h.gen == 0 || int(h.i) >= len(w.ents) || w.ents[h.i].gen != h.gen {
		return false
	}
	w.move(h.i, due)
	return true
}

func (w *Wheel[K]) setLocked(key K, due int64) Handle {
	if i, ok := w.index[key]; ok {
		w.move(i, due)
		return Handle{i, w.ents[i].gen}
	}
	if due <= w.cur {
		due = w.cur + 1
	}
	var i int32
	if n := len(w.free); n > 0 {
		i = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		w.ents = append(w.ents, entry[K]{gen: 1})
		i = int32(len(w.ents) - 1)
	}
	e := &w.ents[i]
	e.key, e.due = key, due
	w.push(i, due&w.mask)
	w.index[key] = i
	w.next = min(w.next, due)
	return Handle{i, e.gen}
}

// move sets an armed entry's deadline. A later deadline only rewrites due:
// the entry moves when the wheel visits its old slot. An earlier one must
// move now, or its slot could be visited too late.
func (w *Wheel[K]) move(i int32, due int64) {
	if due <= w.cur {
		due = w.cur + 1
	}
	e := &w.ents[i]
	if due < e.due && int32(due&w.mask) != e.slot {
		w.remove(i)
		w.push(i, due&w.mask)
	}
	e.due = due
	w.next = min(w.next, due)
}

// Cancel disarms key; it reports whether key was armed.
func (w *Wheel[K]) Cancel(key K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.index[key]
	if !ok {
		return false
	}
	w.unlink(i)
	return true
}

// CancelHandle disarms h's timeout, as Cancel does for its key, without
// the key lookup; it reports false, doing nothing, if h is stale.
func (w *Wheel[K]) CancelHandle(h Handle) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h.gen == 0 || int(h.i) >= len(w.ents) || w.ents[h.i].gen != h.gen {
		return false
	}
	w.unlink(h.i)
	return true
}

// Deadline reports the tick time at which key fires, if armed.
func (w *Wheel[K]) Deadline(key K) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.index[key]
	if !ok {
		return time.Time{}, false
	}
	return w.origin.Add(time.Duration(w.ents[i].due) * w.tick), true
}

// Next reports the earliest time any armed key may fire (a tick time),
// for a caller's own loop to sleep until: never later than the first
// deadline, sometimes earlier (after a cancel or a reset to later). ok is
// false with nothing armed.
func (w *Wheel[K]) Next() (t time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.index) == 0 {
		return time.Time{}, false
	}
	return w.origin.Add(time.Duration(w.next) * w.tick), true
}

// Len reports how many keys are armed.
func (w *Wheel[K]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.index)
}

func (w *Wheel[K]) unlink(i int32) {
	w.remove(i)
	e := &w.ents[i]
	delete(w.index, e.key)
	var zero K
	e.key = zero
	if e.gen++; e.gen == 0 {
		e.gen = 1 // 0 marks the zero Handle
	}
	w.free = append(w.free, i)
}

// Since is t as an offset from the wheel's start, for ResetAt.
func (w *Wheel[K]) Since(t time.Time) time.Duration { return t.Sub(w.origin) }

// ResetAt is Reset with the deadline given as an offset from the wheel's
// start (Since): a caller that keeps its clock as an offset arms a timer
// without time.Time arithmetic.
func (w *Wheel[K]) ResetAt(h Handle, at time.Duration) bool {
	due := w.tickAt(at)
	w.mu.Lock()
	ok := w.resetLocked(h, due)
	w.mu.Unlock()
	return ok
}

// tickOf is the first tick at or after t.
func (w *Wheel[K]) tickOf(t time.Time) int64 { return w.tickAt(t.Sub(w.origin)) }

// tickAt is the first tick at or after the offset d from the start.
func (w *Wheel[K]) tickAt(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / w.tick)
	if d%w.tick != 0 {
		n++
	}
	return n
}

// Advance moves the wheel to now and calls fire, in deadline-slot order, for
// every key whose deadline has passed; fired keys are disarmed before fire
// is called. It returns how many fired. Time never runs backwards: an
// earlier now is a no-op.
func (w *Wheel[K]) Advance(now time.Time, fire func(K)) int {
	d := now.Sub(w.origin)
	if d < 0 {
		return 0
	}
	target := int64(d / w.tick)
	w.mu.Lock()
	if target <= w.cur {
		w.mu.Unlock()
		return 0
	}
	var expired []K
	steps := target - w.cur
	if steps > int64(len(w.heads)) {
		steps = int64(len(w.heads)) // one full rotation visits every slot
	}
	for t := w.cur + 1; t <= w.cur+steps; t++ {
		s := t & w.mask
		for i := w.heads[s]; i != none; {
			e := &w.ents[i]
			next := e.next
			switch {
			case e.due <= target:
				expired = append(expired, e.key)
				w.unlink(i)
			case e.due&w.mask != s:
				// Reset to a later deadline since it was linked here.
				w.remove(i)
				w.push(i, e.due&w.mask)
			}
			i = next
		}
	}
	w.cur = target
	if w.next <= target {
		// Passed: find the earliest deadline left (a walk of the armed
		// entries, once per earliest deadline reached, not per tick).
		w.next = math.MaxInt64
		for _, i := range w.index {
			w.next = min(w.next, w.ents[i].due)
		}
	}
	w.mu.Unlock()
	if fire != nil {
		for _, k := range expired {
			fire(k)
		}
	}
	return len(expired)
}

// Run advances the wheel every tick of the real clock until ctx is done,
// calling fire from this one goroutine.
func (w *Wheel[K]) Run(ctx context.Context, fire func(K)) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.Advance(now, fire)
		}
	}
}
