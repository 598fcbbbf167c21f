package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// waitFor polls cond until it holds or a generous deadline passes.
// tb is what the helpers need from *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func allZero(p *Pool) func() bool {
	return func() bool { return slices.Equal(p.Loads(), make([]int, p.Len())) }
}

func closePool(t testing.TB, p *Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// checkHeap asserts the heap invariant and that every runner is in the heap
// exactly once at the position it records.
func checkHeap(t tb, p *Pool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.heap) != len(p.entries) {
		t.Fatalf("heap holds %d of %d runners", len(p.heap), len(p.entries))
	}
	seen := make(map[*entry]bool)
	for i, e := range p.heap {
		if seen[e] {
			t.Fatalf("runner %d twice in heap", e.id)
		}
		seen[e] = true
		if e.idx != i {
			t.Fatalf("runner %d at %d records idx %d", e.id, i, e.idx)
		}
		if i > 0 && p.heap[(i-1)/2].load > e.load {
			t.Fatalf("heap invariant broken at %d: parent load %d > child load %d", i, p.heap[(i-1)/2].load, e.load)
		}
	}
}

func TestRunReturnsFunctionOutcome(t *testing.T) {
	sentinel := errors.New("boom")
	tests := []struct {
		name string
		fn   func(context.Context) error
		want error
	}{
		{"nil", func(context.Context) error { return nil }, nil},
		{"error", func(context.Context) error { return sentinel }, sentinel},
		{"wrapped", func(context.Context) error { return fmt.Errorf("x: %w", sentinel) }, sentinel},
	}
	p := New(2)
	defer closePool(t, p)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Run(context.Background(), tt.fn)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Run = %v, want %v", err, tt.want)
			}
			if got := p.Loads(); !slices.Equal(got, []int{0, 0}) {
				t.Fatalf("loads after run = %v, want all zero", got)
			}
		})
	}
}

func TestRunPlacesOnLeastLoaded(t *testing.T) {
	p := New(3)
	defer closePool(t, p)
	gate := make(chan struct{})
	block := func(ctx context.Context) error { <-gate; return nil }
	ctx := context.Background()
	// Each step: the load to add and the sorted loads expected afterwards.
	steps := []struct {
		load int
		want []int
	}{
		{300, []int{0, 0, 300}},
		{100, []int{0, 100, 300}},
		{100, []int{100, 100, 300}},
		{150, []int{100, 250, 300}},
		{0, []int{100, 250, 300}},
		{60, []int{160, 250, 300}},
		{100, []int{250, 260, 300}},
	}
	var done sync.WaitGroup
	for i, s := range steps {
		done.Add(1)
		if err := p.Go(ctx, s.load, block, func(error) { done.Done() }); err != nil {
			t.Fatalf("step %d: Go: %v", i, err)
		}
		got := p.Loads()
		slices.Sort(got)
		if !slices.Equal(got, s.want) {
			t.Fatalf("step %d (load %d): loads %v, want %v", i, s.load, got, s.want)
		}
		checkHeap(t, p)
	}
	close(gate)
	done.Wait()
	testenv.Eventually(t, "loads back to zero", allZero(p))
	checkHeap(t, p)
}

func TestPanicBecomesErrorAndLoadIsReleased(t *testing.T) {
	errVal := errors.New("an error value")
	tests := []struct {
		name  string
		value any
		is    error
		check func(any) bool
	}{
		{"string", "oops", nil, func(v any) bool { return v == "oops" }},
		{"error", errVal, errVal, func(v any) bool { return v == errVal }},
		{"nil", nil, nil, func(v any) bool { _, ok := v.(*runtime.PanicNilError); return ok }},
	}
	p := New(2)
	defer closePool(t, p)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.RunLoad(context.Background(), 70, func(context.Context) error { panic(tt.value) })
			var pe *PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("Run = %v, want *PanicError", err)
			}
			if !tt.check(pe.Value) {
				t.Fatalf("panic value %#v is not what was panicked", pe.Value)
			}
			if !strings.Contains(string(pe.Stack), "TestPanicBecomesErrorAndLoadIsReleased") {
				t.Fatalf("stack does not name the panicking function:\n%s", pe.Stack)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tt.is)
			}
			testenv.Eventually(t, "loads back to zero", allZero(p))
			// The runner survived: both runners still run work.
			if err := p.RunMultiple(context.Background(), 2, 1, func(context.Context, int) error { return nil }); err != nil {
				t.Fatalf("RunMultiple after panic: %v", err)
			}
			checkHeap(t, p)
		})
	}
	// Panics through Go and RunMultiple too.
	errc := make(chan error, 1)
	if err := p.Go(context.Background(), 5, func(context.Context) error { panic("go") }, func(err error) { errc <- err }); err != nil {
		t.Fatal(err)
	}
	var pe *PanicError
	if err := <-errc; !errors.As(err, &pe) || pe.Value != "go" {
		t.Fatalf("Go done got %v, want *PanicError(go)", err)
	}
	err := p.RunMultiple(context.Background(), 2, 5, func(_ context.Context, r int) error {
		if r == 1 {
			panic("multi")
		}
		return nil
	})
	if !errors.As(err, &pe) || pe.Value != "multi" {
		t.Fatalf("RunMultiple = %v, want *PanicError(multi)", err)
	}
	testenv.Eventually(t, "loads back to zero", allZero(p))
}

func TestCancellation(t *testing.T) {
	t.Run("reaches running function", func(t *testing.T) {
		p := New(1)
		defer closePool(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		var sawCancel atomic.Bool
		errc := make(chan error, 1)
		go func() {
			errc <- p.Run(ctx, func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				sawCancel.Store(true)
				return ctx.Err()
			})
		}()
		<-started
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		testenv.Eventually(t, "loads back to zero", allZero(p))
		if !sawCancel.Load() {
			t.Fatal("function did not see the cancellation")
		}
	})
	t.Run("timeout reaches function", func(t *testing.T) {
		p := New(1)
		defer closePool(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := p.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v, want DeadlineExceeded", err)
		}
		testenv.Eventually(t, "loads back to zero", allZero(p))
	})
	t.Run("function ignoring context keeps its load until it returns", func(t *testing.T) {
		p := New(1)
		defer closePool(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- p.RunLoad(ctx, 40, func(context.Context) error {
				close(started)
				<-release
				close(finished)
				return nil
			})
		}()
		<-started
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		if got := p.Loads(); got[0] != 40 {
			t.Fatalf("load while abandoned function still runs = %v, want [40]", got)
		}
		close(release)
		<-finished
		testenv.Eventually(t, "loads back to zero", allZero(p))
	})
	t.Run("queued function is skipped", func(t *testing.T) {
		p := New(1)
		defer closePool(t, p)
		gate := make(chan struct{})
		var blockerDone sync.WaitGroup
		blockerDone.Add(1)
		if err := p.Go(context.Background(), 100, func(context.Context) error { <-gate; return nil }, func(error) { blockerDone.Done() }); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var ran atomic.Bool
		skipped := make(chan error, 1)
		if err := p.Go(ctx, 30, func(context.Context) error { ran.Store(true); return nil }, func(err error) { skipped <- err }); err != nil {
			t.Fatal(err)
		}
		if got := p.Loads(); got[0] != 130 {
			t.Fatalf("loads = %v, want [130]", got)
		}
		cancel()
		close(gate)
		if err := <-skipped; !errors.Is(err, context.Canceled) {
			t.Fatalf("skipped function reported %v, want context.Canceled", err)
		}
		blockerDone.Wait()
		if ran.Load() {
			t.Fatal("function whose context ended while queued was run")
		}
		testenv.Eventually(t, "loads back to zero", allZero(p))
	})
	t.Run("RunMultiple returns on cancel, loads held until functions end", func(t *testing.T) {
		p := New(3)
		defer closePool(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		release := make(chan struct{})
		var started sync.WaitGroup
		started.Add(2)
		errc := make(chan error, 1)
		go func() {
			errc <- p.RunMultiple(ctx, 2, 10, func(context.Context, int) error {
				started.Done()
				<-release
				return nil
			})
		}()
		started.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("RunMultiple = %v, want context.Canceled", err)
		}
		got := p.Loads()
		slices.Sort(got)
		if !slices.Equal(got, []int{0, 10, 10}) {
			t.Fatalf("loads = %v, want [0 10 10]", got)
		}
		close(release)
		testenv.Eventually(t, "loads back to zero", allZero(p))
	})
}

func TestRunMultipleDistinctRunnersAndJoinedErrors(t *testing.T) {
	p := New(5)
	defer closePool(t, p)
	e1, e3 := errors.New("runner 1"), errors.New("runner 3")
	var mu sync.Mutex
	var seen []int
	err := p.RunMultiple(context.Background(), 5, 10, func(_ context.Context, r int) error {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		switch r {
		case 1:
			return e1
		case 3:
			return e3
		}
		return nil
	})
	if !errors.Is(err, e1) || !errors.Is(err, e3) {
		t.Fatalf("RunMultiple = %v, want both runner errors joined", err)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("ran on runners %v, want each of 0..4 once", seen)
	}
}

func TestInvalidArguments(t *testing.T) {
	p := New(3)
	defer closePool(t, p)
	ctx := context.Background()
	nop := func(context.Context) error { return nil }
	mnop := func(context.Context, int) error { return nil }
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"RunLoad negative", func() error { return p.RunLoad(ctx, -1, nop) }, ErrInvalidLoad},
		{"Go negative", func() error { return p.Go(ctx, -5, nop, nil) }, ErrInvalidLoad},
		{"RunMultiple negative load", func() error { return p.RunMultiple(ctx, 1, -1, mnop) }, ErrInvalidLoad},
		{"RunMultiple k=0", func() error { return p.RunMultiple(ctx, 0, 1, mnop) }, ErrInvalidCount},
		{"RunMultiple k>n", func() error { return p.RunMultiple(ctx, 4, 1, mnop) }, ErrInvalidCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !slices.Equal(p.Loads(), []int{0, 0, 0}) {
				t.Fatalf("rejected call changed loads: %v", p.Loads())
			}
		})
	}
	if _, err := NewWithRunners(nil); !errors.Is(err, ErrNoRunners) {
		t.Fatalf("NewWithRunners(nil) = %v, want ErrNoRunners", err)
	}
	if _, err := NewWithRunners([]Runner{goFuncRunner{}, nil}); !errors.Is(err, ErrNoRunners) || !strings.Contains(err.Error(), "runner 1") {
		t.Fatalf("NewWithRunners with nil = %v, want ErrNoRunners naming runner 1", err)
	}
	if n := New(0).Len(); n != runtime.GOMAXPROCS(0) {
		t.Fatalf("New(0).Len() = %d, want GOMAXPROCS %d", n, runtime.GOMAXPROCS(0))
	}
}

func TestClose(t *testing.T) {
	p := New(2, WithQueueSize(4))
	ctx := context.Background()
	gate := make(chan struct{})
	var finished atomic.Int32
	var accepted sync.WaitGroup
	for range 4 { // two running, two queued
		accepted.Add(1)
		err := p.Go(ctx, 100, func(context.Context) error { <-gate; finished.Add(1); return nil }, func(error) { accepted.Done() })
		if err != nil {
			t.Fatal(err)
		}
	}
	// Close cannot finish while work runs: with an ended context it says so.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Close(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with ended context during work = %v, want context.Canceled", err)
	}
	// New work is refused from the first Close on.
	nop := func(context.Context) error { return nil }
	for name, err := range map[string]error{
		"Run":         p.Run(ctx, nop),
		"Go":          p.Go(ctx, 1, nop, func(error) { t.Error("done called for refused Go") }),
		"RunMultiple": p.RunMultiple(ctx, 1, 1, func(context.Context, int) error { return nil }),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ctx) }()
	close(gate)
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := finished.Load(); n != 4 {
		t.Fatalf("Close returned with %d of 4 accepted functions finished", n)
	}
	accepted.Wait()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// goFuncRunner runs each function on a new goroutine: many at once.
type goFuncRunner struct{}

func (goFuncRunner) Run(ctx context.Context, fn func(context.Context) error) error {
	errc := make(chan error, 1)
	go func() { errc <- fn(ctx) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refusingRunner never calls the function.
type refusingRunner struct{ err error }

func (r refusingRunner) Run(context.Context, func(context.Context) error) error { return r.err }

type closingRunner struct {
	goFuncRunner
	closed *atomic.Int32
	err    error
}

func (r closingRunner) Close(context.Context) error { r.closed.Add(1); return r.err }

func TestForeignRunners(t *testing.T) {
	ctx := context.Background()
	t.Run("refusing runner releases load", func(t *testing.T) {
		refused := errors.New("no capacity")
		p, err := NewWithRunners([]Runner{refusingRunner{refused}})
		if err != nil {
			t.Fatal(err)
		}
		defer closePool(t, p)
		if err := p.Run(ctx, func(context.Context) error { t.Error("refused fn ran"); return nil }); !errors.Is(err, refused) {
			t.Fatalf("Run = %v, want the runner's error", err)
		}
		if got := p.Loads(); got[0] != 0 {
			t.Fatalf("load after refusal = %v", got)
		}
	})
	t.Run("concurrent runner balances and recovers panics", func(t *testing.T) {
		var closed atomic.Int32
		closeErr := errors.New("close failed")
		rs := []Runner{closingRunner{closed: &closed}, closingRunner{closed: &closed, err: closeErr}, goFuncRunner{}}
		p, err := NewWithRunners(rs)
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			if err := p.Go(ctx, 100, func(context.Context) error { <-gate; return nil }, func(error) { wg.Done() }); err != nil {
				t.Fatal(err)
			}
		}
		if got := p.Loads(); !slices.Equal(got, []int{200, 200, 200}) {
			t.Fatalf("loads = %v, want [200 200 200]", got)
		}
		close(gate)
		wg.Wait()
		var pe *PanicError
		if err := p.Run(ctx, func(context.Context) error { panic("foreign") }); !errors.As(err, &pe) {
			t.Fatalf("Run = %v, want *PanicError", err)
		}
		if err := p.RunMultiple(ctx, 3, 1, func(context.Context, int) error { return nil }); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "loads back to zero", allZero(p))
		err = p.Close(ctx)
		if !errors.Is(err, closeErr) || !strings.Contains(err.Error(), "runner 1") {
			t.Fatalf("Close = %v, want runner 1's close error", err)
		}
		if n := closed.Load(); n != 2 {
			t.Fatalf("Close called on %d Closer runners, want 2", n)
		}
		_ = p.Close(ctx)
		if n := closed.Load(); n != 2 {
			t.Fatalf("second pool Close closed runners again (%d calls)", n)
		}
	})
	t.Run("runner returning early keeps load until fn ends", func(t *testing.T) {
		p, err := NewWithRunners([]Runner{goFuncRunner{}})
		if err != nil {
			t.Fatal(err)
		}
		defer closePool(t, p)
		cctx, cancel := context.WithCancel(ctx)
		started, release := make(chan struct{}), make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- p.RunLoad(cctx, 9, func(context.Context) error { close(started); <-release; return nil })
		}()
		<-started
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		if got := p.Loads(); got[0] != 9 {
			t.Fatalf("load = %v, want [9] while fn still runs", got)
		}
		close(release)
		testenv.Eventually(t, "load released", allZero(p))
	})
}

// TestStressCounts hammers a pool from many goroutines and counts: every
// accepted function runs exactly once, no more functions run at once than
// there are one-at-a-time runners, and all loads return to zero.
func TestStressCounts(t *testing.T) {
	const runners, submitters, perSubmitter = 4, 16, 300
	p := New(runners, WithQueueSize(8))
	var active, maxActive, ran atomic.Int64
	var wantRuns atomic.Int64
	fn := func(context.Context) error {
		n := active.Add(1)
		for {
			m := maxActive.Load()
			if n <= m || maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		ran.Add(1)
		runtime.Gosched()
		active.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	for s := range submitters {
		wg.Go(func() {
			ctx := context.Background()
			for i := range perSubmitter {
				load := (s*perSubmitter + i) % 250
				switch i % 3 {
				case 0:
					if err := p.RunLoad(ctx, load, fn); err != nil {
						t.Error(err)
						return
					}
					wantRuns.Add(1)
				case 1:
					var done sync.WaitGroup
					done.Add(1)
					if err := p.Go(ctx, load, fn, func(error) { done.Done() }); err != nil {
						t.Error(err)
						return
					}
					wantRuns.Add(1)
					if i%2 == 0 {
						done.Wait()
					}
				case 2:
					if err := p.RunMultiple(ctx, 1+i%runners, load, func(ctx context.Context, _ int) error { return fn(ctx) }); err != nil {
						t.Error(err)
						return
					}
					wantRuns.Add(int64(1 + i%runners))
				}
			}
		})
	}
	wg.Wait()
	closePool(t, p)
	if got, want := ran.Load(), wantRuns.Load(); got != want {
		t.Fatalf("ran %d functions, accepted %d", got, want)
	}
	if m := maxActive.Load(); m > runners {
		t.Fatalf("%d functions ran at once on %d one-at-a-time runners", m, runners)
	}
	if got := p.Loads(); !slices.Equal(got, make([]int, runners)) {
		t.Fatalf("loads after all work = %v", got)
	}
	checkHeap(t, p)
}
