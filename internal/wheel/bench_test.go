package wheel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkReset compares resetting one of n live timeouts (30 s out, as a
// worker's report does), keys visited in random order:
//
//   - wheel/Set: the deadline computed from time.Now() on every reset;
//
//   - wheel/SetAfter: measured from the wheel's current tick, no clock read;
//
//   - AfterFunc/bykey: one time.AfterFunc per key, found by key in a map, as
//     a server that receives an id must do;
//
//   - AfterFunc/handle: the *time.Timer already in hand (a lower bound).
//
//     go test -run '^$' -bench Reset -benchmem ./internal/wheel/
func BenchmarkReset(b *testing.B) {
	const timeout = 30 * time.Second
	for _, n := range []int{100_000, 1_000_000} {
		order := rand.New(rand.NewPCG(1, 2)).Perm(n)
		wheel := func(b *testing.B, reset func(w *Wheel[int], k int)) {
			w, err := New[int](time.Second, 64, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go w.Run(ctx, func(int) {})
			for i := range n {
				w.Set(i, time.Now().Add(timeout))
			}
			i := 0
			for b.Loop() {
				reset(w, order[i])
				if i++; i == n {
					i = 0
				}
			}
		}
		b.Run(fmt.Sprintf("wheel/Set/live=%d", n), func(b *testing.B) {
			wheel(b, func(w *Wheel[int], k int) { w.Set(k, time.Now().Add(timeout)) })
		})
		b.Run(fmt.Sprintf("wheel/SetAfter/live=%d", n), func(b *testing.B) {
			wheel(b, func(w *Wheel[int], k int) { w.SetAfter(k, timeout) })
		})
		b.Run(fmt.Sprintf("AfterFunc/bykey/live=%d", n), func(b *testing.B) {
			timers := make(map[int]*time.Timer, n)
			for i := range n {
				timers[i] = time.AfterFunc(timeout, func() {})
			}
			defer func() {
				for _, t := range timers {
					t.Stop()
				}
			}()
			i := 0
			for b.Loop() {
				timers[order[i]].Reset(timeout)
				if i++; i == n {
					i = 0
				}
			}
		})
		b.Run(fmt.Sprintf("AfterFunc/handle/live=%d", n), func(b *testing.B) {
			timers := make([]*time.Timer, n)
			for i := range timers {
				timers[i] = time.AfterFunc(timeout, func() {})
			}
			defer func() {
				for _, t := range timers {
					t.Stop()
				}
			}()
			i := 0
			for b.Loop() {
				timers[order[i]].Reset(timeout)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}
