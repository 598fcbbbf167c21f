package worker

import (
	"sync"
	"testing"
)

// Several reporters share one outbox: a burst pushed with one
// notification is taken whole, without loss or repeat, and closing the
// outbox ends every reporter (one left asleep would hang the worker's
// shutdown).
func TestOutboxFeedsAndEndsEveryReporter(t *testing.T) {
	var o outbox
	o.init()
	const n = 1000
	for range n {
		o.items = append(o.items, &outcome{}) // as push does, without the task bookkeeping
	}
	o.notify <- struct{}{} // one notification for the whole burst

	var mu sync.Mutex
	got := map[*outcome]int{}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := o.take(64)
				if b == nil {
					return
				}
				mu.Lock()
				for _, x := range b {
					got[x]++
				}
				full := len(got) == n
				mu.Unlock()
				if full {
					o.close()
				}
			}
		}()
	}
	wg.Wait() // returns only if close woke every reporter
	if len(got) != n {
		t.Fatalf("reporters took %d distinct outcomes, want %d", len(got), n)
	}
	for x, c := range got {
		if c != 1 {
			t.Fatalf("outcome %p taken %d times", x, c)
		}
	}
}
