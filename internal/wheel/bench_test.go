package wheel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkReset compares resetting one of n live timeouts (30 s out, as a
// worker's report does), keys visited in random order, in pairs that do the
// same work:
//
//   - by key (a server receives an id): wheel/SetAfter (deadline from the
//     wheel's tick, no clock read) and wheel/Set (deadline from time.Now())
//     against AfterFunc/bykey (the *time.Timer found in a map, then Reset);
//
//   - by handle (the caller kept what arming returned): wheel/ResetAfter and
//     wheel/Reset against AfterFunc/handle (the *time.Timer in hand).
//
//     go test -run '^$' -bench Reset -benchmem ./internal/wheel/
func BenchmarkReset(b *testing.B) {
	const timeout = 30 * time.Second
	for _, n := range []int{100_000, 1_000_000} {
		order := rand.New(rand.NewPCG(1, 2)).Perm(n)
		wheel := func(b *testing.B, reset func(w *Wheel[int], hs []Handle, k int)) {
			w, err := New[int](time.Second, 64, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go w.Run(ctx, func(int) {})
			hs := make([]Handle, n)
			for i := range n {
				hs[i] = w.Set(i, time.Now().Add(timeout))
			}
			i := 0
			for b.Loop() {
				reset(w, hs, order[i])
				if i++; i == n {
					i = 0
				}
			}
		}
		b.Run(fmt.Sprintf("bykey/wheel.SetAfter/live=%d", n), func(b *testing.B) {
			wheel(b, func(w *Wheel[int], _ []Handle, k int) { w.SetAfter(k, timeout) })
		})
		b.Run(fmt.Sprintf("bykey/wheel.Set/live=%d", n), func(b *testing.B) {
			wheel(b, func(w *Wheel[int], _ []Handle, k int) { w.Set(k, time.Now().Add(timeout)) })
		})
		b.Run(fmt.Sprintf("bykey/AfterFunc/live=%d", n), func(b *testing.B) {
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
		b.Run(fmt.Sprintf("handle/wheel.ResetAfter/live=%d", n), func(b *testing.B) {
			wheel(b, func(w *Wheel[int], hs []Handle, k int) {
				if !w.ResetAfter(hs[k], timeout) {
					b.Fatal("stale handle")
				}
			})
		})
		b.Run(fmt.Sprintf("handle/wheel.Reset/live=%d", n), func(b *testing.B) {
			wheel(b, func(w *Wheel[int], hs []Handle, k int) { w.Reset(hs[k], time.Now().Add(timeout)) })
		})
		b.Run(fmt.Sprintf("handle/AfterFunc/live=%d", n), func(b *testing.B) {
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
