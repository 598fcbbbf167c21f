package main

import (
	"sync"
	"testing"
	"time"
)

// The providers' permits go back through alarm: every end runs, in the
// order of its deadline whatever the order of the calls, before its
// channel closes; an earlier deadline wakes a sleeper waiting for a later
// one; and on a closed alarm an end runs at once.
func TestAlarmEndsInDeadlineOrder(t *testing.T) {
	a, err := newAlarm()
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	var mu sync.Mutex
	var ended []int
	delays := []time.Duration{30, 5, 20, 1, 10} // ms, out of order
	chans := make([]<-chan struct{}, len(delays))
	now := time.Now()
	for i, d := range delays {
		chans[i] = a.at(now.Add(d*time.Millisecond), func() {
			mu.Lock()
			ended = append(ended, i)
			mu.Unlock()
		})
	}
	for i, ch := range chans {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("channel %d (%v) not closed in 10s", i, delays[i])
		}
		mu.Lock()
		found := false
		for _, e := range ended {
			found = found || e == i
		}
		mu.Unlock()
		if !found {
			t.Fatalf("channel %d closed before its end ran", i)
		}
	}
	want := []int{3, 1, 4, 2, 0}
	mu.Lock()
	defer mu.Unlock()
	for k := range want {
		if ended[k] != want[k] {
			t.Fatalf("ends ran in the order %v, want %v (delays %v ms)", ended, want, delays)
		}
	}
	// A deadline added while the sleeper waits for a later one wakes it.
	late := a.at(time.Now().Add(time.Hour), nil)
	soon := a.at(time.Now().Add(time.Millisecond), nil)
	select {
	case <-soon:
	case <-late:
		t.Fatal("the hour's channel closed first")
	case <-time.After(10 * time.Second):
		t.Fatal("an earlier deadline did not wake the sleeper")
	}
	a.close()
	ran := false
	select {
	case <-a.at(time.Now().Add(time.Hour), func() { ran = true }):
	default:
		t.Fatal("on a closed alarm the channel is not closed at once")
	}
	if !ran {
		t.Fatal("on a closed alarm the end did not run")
	}
}
