package poolbench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Jeffail/tunny"
	"github.com/alitto/pond/v2"
	"github.com/fulcrum-lb/fulcrum/pool"
	"github.com/gammazero/workerpool"
	"github.com/panjf2000/ants/v2"
)

// Every pool gets the same number of workers. Our runners run one function
// at a time, so this is the same concurrency everywhere.
const workers = 4

// batch is how many tasks the batch shapes submit before waiting.
const batch = 1000

// sink keeps the work from being optimised away.
var sink atomic.Uint64

// work is a small task: a few dozen nanoseconds of arithmetic.
func work() {
	x := uint64(88172645463325252)
	for range 32 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	if x == 0 {
		sink.Add(1)
	}
}

func workCtx(context.Context) error { work(); return nil }

// impl is one pool under test. start builds it and returns bind (which
// makes, for one submitter's completion callback, a submit that runs work
// asynchronously and then calls done), run (runs work and waits) and stop.
// Task closures are built once per submitter, so the figures measure the
// pools, not the adapters.
type impl struct {
	name  string
	start func() (bind func(done func()) (submit func()), run, stop func())
}

func impls() []impl {
	return []impl{
		{"ours", func() (func(func()) func(), func(), func()) {
			p := pool.New(workers)
			ctx := context.Background()
			return func(done func()) func() {
					doneErr := func(error) { done() }
					return func() { _ = p.Go(ctx, pool.DefaultLoad, workCtx, doneErr) }
				},
				func() { _ = p.Run(ctx, workCtx) },
				func() { _ = p.Close(ctx) }
		}},
		{"ants", func() (func(func()) func(), func(), func()) {
			p, err := ants.NewPool(workers)
			if err != nil {
				panic(err)
			}
			return func(done func()) func() {
					task := func() { work(); done() }
					return func() { _ = p.Submit(task) }
				},
				func() {
					c := make(chan struct{})
					_ = p.Submit(func() { work(); close(c) })
					<-c
				}, p.Release
		}},
		{"pond", func() (func(func()) func(), func(), func()) {
			p := pond.NewPool(workers)
			return func(done func()) func() {
					task := func() { work(); done() }
					return func() { _ = p.Go(task) }
				},
				func() { _ = p.Submit(work).Wait() },
				p.StopAndWait
		}},
		{"tunny", func() (func(func()) func(), func(), func()) {
			p := tunny.NewFunc(workers, func(any) any { work(); return nil })
			// tunny is synchronous only: fanning out takes a goroutine per task.
			return func(done func()) func() {
					return func() { go func() { p.Process(nil); done() }() }
				},
				func() { p.Process(nil) },
				p.Close
		}},
		{"workerpool", func() (func(func()) func(), func(), func()) {
			p := workerpool.New(workers)
			return func(done func()) func() {
					task := func() { work(); done() }
					return func() { p.Submit(task) }
				},
				func() { p.SubmitWait(work) },
				p.StopWait
		}},
	}
}

// BenchmarkPool/batch-serial: one submitter submits 1000 small tasks and
// waits for all of them; ns/op is per task.
// BenchmarkPool/batch-parallel: every P submits its own batches.
// BenchmarkPool/sync-parallel: every P runs one task at a time and waits.
// BenchmarkPool/batch-load-serial: as batch-serial, with varied load
// figures for ours (the peers have no load figure and run the plain batch).
func BenchmarkPool(b *testing.B) {
	for _, im := range impls() {
		b.Run("batch-serial/"+im.name, func(b *testing.B) {
			bind, _, stop := im.start()
			defer stop()
			var wg sync.WaitGroup
			submit := bind(wg.Done)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				wg.Add(n)
				for range n {
					submit()
				}
				wg.Wait()
			}
		})
	}
	for _, im := range impls() {
		b.Run("batch-parallel/"+im.name, func(b *testing.B) {
			bind, _, stop := im.start()
			defer stop()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// One pool; each submitter waits for its own batches.
				var wg sync.WaitGroup
				submit := bind(wg.Done)
				for {
					n := 0
					for n < batch && pb.Next() {
						n++
					}
					if n == 0 {
						return
					}
					wg.Add(n)
					for range n {
						submit()
					}
					wg.Wait()
				}
			})
		})
	}
	for _, im := range impls() {
		b.Run("sync-parallel/"+im.name, func(b *testing.B) {
			_, run, stop := im.start()
			defer stop()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					run()
				}
			})
		})
	}
	b.Run("batch-load-serial/ours", func(b *testing.B) {
		p := pool.New(workers)
		ctx := context.Background()
		defer p.Close(ctx)
		var wg sync.WaitGroup
		done := func(error) { wg.Done() }
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += batch {
			n := min(batch, b.N-i)
			wg.Add(n)
			for j := range n {
				_ = p.Go(ctx, 50+(j%7)*25, workCtx, done)
			}
			wg.Wait()
		}
	})
	for _, im := range impls()[1:] {
		b.Run("batch-load-serial/"+im.name, func(b *testing.B) {
			bind, _, stop := im.start()
			defer stop()
			var wg sync.WaitGroup
			submit := bind(wg.Done)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				wg.Add(n)
				for range n {
					submit()
				}
				wg.Wait()
			}
		})
	}
}
