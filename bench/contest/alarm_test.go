package main

import (
	"testing"
	"time"
)

// The providers' service times end through alarm: every channel closes,
// in the order of its deadline whatever the order of the calls, and a
// closed alarm stops its sleeper.
func TestAlarmClosesInDeadlineOrder(t *testing.T) {
	a, err := newAlarm()
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	delays := []time.Duration{30, 5, 20, 1, 10} // ms, out of order
	order := make(chan int, len(delays))
	for i, d := range delays {
		ch := a.after(d * time.Millisecond)
		go func() {
			<-ch
			order <- i
		}()
	}
	want := []int{3, 1, 4, 2, 0}
	for k, w := range want {
		select {
		case got := <-order:
			if got != w {
				t.Fatalf("closing %d: channel %d (%v), want %d (%v)", k, got, delays[got], w, delays[w])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("closing %d: nothing in 10s", k)
		}
	}
	// A deadline added while the sleeper waits for a later one wakes it.
	late := a.after(time.Hour)
	soon := a.after(time.Millisecond)
	select {
	case <-soon:
	case <-late:
		t.Fatal("the hour's channel closed first")
	case <-time.After(10 * time.Second):
		t.Fatal("an earlier deadline did not wake the sleeper")
	}
}
