package wheel

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Wheel holds timeouts keyed by K. It is safe for concurrent use; expired
// keys are handed to the callback given to Advance or Run, outside the lock,
// so a callback may Set or Cancel keys again (a poll re-arms itself that way).
type Wheel[K comparable] struct {
	mu      sync.Mutex
	tick    time.Duration
	origin  time.Time
	cur     int64 // last tick processed
	mask    int64
	slots   []list[K]
	entries map[K]*entry[K]
	pool    []*entry[K] // freed entries, reused to spare the allocator
}

type entry[K comparable] struct {
	key        K
	due        int64 // tick at which it fires
	slot       int64 // slot it is linked in
	prev, next *entry[K]
}

type list[K comparable] struct{ head *entry[K] }

func (l *list[K]) push(e *entry[K]) {
	e.prev = nil
	e.next = l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
}

func (l *list[K]) remove(e *entry[K]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
}

// New returns a wheel ticking every tick, with tick 0 at start. slots is
// rounded up to a power of two; size it to about the longest common timeout
// divided by tick (longer timeouts still work, they just wait out extra
// rotations in their slot).
func New[K comparable](tick time.Duration, slots int, start time.Time) (*Wheel[K], error) {
	if tick <= 0 {
		return nil, fmt.Errorf("wheel: tick must be positive, got %v", tick)
	}
	if slots <= 0 {
		return nil, fmt.Errorf("wheel: slots must be positive, got %d", slots)
	}
	n := 1
	for n < slots {
		n <<= 1
	}
	return &Wheel[K]{
		tick:    tick,
		origin:  start,
		mask:    int64(n - 1),
		slots:   make([]list[K], n),
		entries: make(map[K]*entry[K]),
	}, nil
}

// Tick reports the wheel's tick.
func (w *Wheel[K]) Tick() time.Duration { return w.tick }

// Set arms key to fire at the first tick at or after deadline, replacing any
// earlier deadline for key (a reset). A deadline already passed fires at the
// next tick.
func (w *Wheel[K]) Set(key K, deadline time.Time) {
	due := w.tickOf(deadline)
	w.mu.Lock()
	if due <= w.cur {
		due = w.cur + 1
	}
	if e, ok := w.entries[key]; ok {
		if due < e.due && due&w.mask != e.slot {
			// Earlier than before: it must move now, or its slot could be
			// visited too late. Later deadlines move lazily.
			w.slots[e.slot].remove(e)
			e.slot = due & w.mask
			w.slots[e.slot].push(e)
		}
		e.due = due
		w.mu.Unlock()
		return
	}
	w.arm(key, due)
	w.mu.Unlock()
}

func (w *Wheel[K]) arm(key K, due int64) {
	var e *entry[K]
	if n := len(w.pool); n > 0 {
		e = w.pool[n-1]
		w.pool = w.pool[:n-1]
	} else {
		e = new(entry[K])
	}
	e.key, e.due, e.slot = key, due, due&w.mask
	w.slots[e.slot].push(e)
	w.entries[key] = e
}

// SetAfter arms key to fire d after the wheel's current tick, read without
// a clock: the deadline is one tick past the first tick at or after
// current tick + d, so it is never early as long as the wheel is advanced
// every tick (Run does), and at most two ticks late. It is the cheap reset
// for callers that already advance the wheel on time.
func (w *Wheel[K]) SetAfter(key K, d time.Duration) {
	n := int64(d / w.tick)
	if d%w.tick != 0 {
		n++
	}
	w.mu.Lock()
	due := w.cur + n + 1
	if e, ok := w.entries[key]; ok {
		if due < e.due && due&w.mask != e.slot {
			w.slots[e.slot].remove(e)
			e.slot = due & w.mask
			w.slots[e.slot].push(e)
		}
		e.due = due
		w.mu.Unlock()
		return
	}
	w.arm(key, due)
	w.mu.Unlock()
}

// Cancel disarms key; it reports whether key was armed.
func (w *Wheel[K]) Cancel(key K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[key]
	if !ok {
		return false
	}
	w.unlink(e)
	return true
}

// Deadline reports the tick time at which key fires, if armed.
func (w *Wheel[K]) Deadline(key K) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[key]
	if !ok {
		return time.Time{}, false
	}
	return w.origin.Add(time.Duration(e.due) * w.tick), true
}

// Len reports how many keys are armed.
func (w *Wheel[K]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

func (w *Wheel[K]) unlink(e *entry[K]) {
	w.slots[e.slot].remove(e)
	delete(w.entries, e.key)
	var zero K
	e.key = zero
	w.pool = append(w.pool, e)
}

// tickOf is the first tick at or after t.
func (w *Wheel[K]) tickOf(t time.Time) int64 {
	d := t.Sub(w.origin)
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
	if steps > int64(len(w.slots)) {
		steps = int64(len(w.slots)) // one full rotation visits every slot
	}
	for t := w.cur + 1; t <= w.cur+steps; t++ {
		s := t & w.mask
		for e := w.slots[s].head; e != nil; {
			next := e.next
			switch {
			case e.due <= target:
				expired = append(expired, e.key)
				w.unlink(e)
			case e.due&w.mask != s:
				// Reset to a later deadline since it was linked here.
				w.slots[s].remove(e)
				e.slot = e.due & w.mask
				w.slots[e.slot].push(e)
			}
			e = next
		}
	}
	w.cur = target
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
