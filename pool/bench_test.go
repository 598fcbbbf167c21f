package pool

import (
	"context"
	"sync"
	"testing"
)

func nop(context.Context) error { return nil }

// BenchmarkRun measures a synchronous Run of an empty function.
func BenchmarkRun(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		p := New(4)
		defer p.Close(ctx)
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Run(ctx, nop)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := New(4)
		defer p.Close(ctx)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = p.Run(ctx, nop)
			}
		})
	})
}

// BenchmarkHandoff compares the runner design (a reused goroutine fed by a
// channel) with spawning a goroutine per call, the alternative it replaces.
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	b.Run("reused-goroutine", func(b *testing.B) {
		p := New(1)
		defer p.Close(ctx)
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Run(ctx, nop)
		}
	})
	b.Run("goroutine-per-call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			errc := make(chan error, 1)
			go func() { errc <- nop(ctx) }()
			<-errc
		}
	})
}

// BenchmarkGo measures submitting 1000 empty functions and waiting for all.
func BenchmarkGo(b *testing.B) {
	ctx := context.Background()
	p := New(4)
	defer p.Close(ctx)
	var wg sync.WaitGroup
	done := func(error) { wg.Done() }
	b.ReportAllocs()
	for b.Loop() {
		wg.Add(1000)
		for range 1000 {
			_ = p.Go(ctx, DefaultLoad, nop, done)
		}
		wg.Wait()
	}
}
