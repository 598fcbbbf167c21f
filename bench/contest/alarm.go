package main

import (
	"container/heap"
	"sync"
	"time"
)

// alarm ends the providers' service times on time, whoever balances.
//
// A Go timer fires when the runtime next looks at its timers. A process
// whose threads are all idle sleeps in epoll_wait, whose timeout is whole
// milliseconds (runtime/netpoll_epoll.go rounds up below 1 ms and down
// above it), so in this harness a 50 ms service time held its permit
// about 0.5 ms longer than drawn, but less the busier the process was. A
// balancer that sprays the providers with attempts they refuse kept the
// process busy, and its draws ran shorter: nginx round robin's requests
// overran by 390 µs, the oracle's (whose forwarder waits, quietly) by
// 500 µs, 0.2 % of the score on every scenario that keeps the permits
// full. One thread of our own sleeps with nanosecond timeouts (ppoll, no
// timer slack) until the earliest deadline and runs what is due there:
// the provider gives the permit back on that thread, not on the
// request's goroutine, which waits its turn behind a sprayer's refusals.
type alarm struct {
	mu    sync.Mutex
	due   dueHeap
	armed int64      // the deadline the sleeper sleeps towards; 0 when none
	done  bool       // closed: the sleeper ends
	wake  func()     // called with mu held, never after done is set
	fired []dueEntry // the sleeper's scratch: the entries due
}

type dueEntry struct {
	at  int64  // unix ns
	end func() // run by the sleeper when due, before ch closes
	ch  chan struct{}
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// at runs end at t, on the sleeper's thread, and then closes the channel
// it returns. end runs however busy the process is with other work (it
// need not wait for the caller's goroutine to be scheduled), so it should
// be short; a caller that stops waiting leaves the channel to be closed
// unread.
//
// On a closed alarm end runs at once: a provider's handler may outlive
// the server's Close.
func (a *alarm) at(t time.Time, end func()) <-chan struct{} {
	ch := make(chan struct{})
	at := t.UnixNano()
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		if end != nil {
			end()
		}
		close(ch)
		return ch
	}
	heap.Push(&a.due, dueEntry{at, end, ch})
	if a.armed == 0 || at < a.armed {
		a.armed = at
		a.wake()
	}
	a.mu.Unlock()
	return ch
}

// close ends the sleeper; channels not yet due stay open. A second close
// does nothing.
func (a *alarm) close() {
	a.mu.Lock()
	if !a.done {
		a.done = true
		a.wake()
	}
	a.mu.Unlock()
}

// fire runs the ends due by now, closes their channels, and returns the
// next deadline (0: none), which the sleeper then sleeps towards; -1 once
// the alarm is closed (no wake comes after that, so the sleeper may
// release what wake uses).
func (a *alarm) fire(now int64) int64 {
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		return -1
	}
	due := a.fired[:0]
	for len(a.due) > 0 && a.due[0].at <= now {
		due = append(due, heap.Pop(&a.due).(dueEntry))
	}
	a.armed = 0
	if len(a.due) > 0 {
		a.armed = a.due[0].at
	}
	next := a.armed
	a.mu.Unlock()
	for i, e := range due {
		if e.end != nil {
			e.end()
		}
		close(e.ch)
		due[i] = dueEntry{}
	}
	a.fired = due[:0]
	return next
}
