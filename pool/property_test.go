package pool

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"pgregory.net/rapid"
)

type modelTask struct {
	load int
	gate chan struct{}
}

// TestPropertyLeastLoaded runs random sequences of Go, RunMultiple and
// finishing work against a model of per-runner loads. After every step the
// heap invariant holds, the loads equal the model, a single run went to a
// least-loaded runner, and RunMultiple took k distinct runners, none more
// loaded than a runner it left out.
func TestPropertyLeastLoaded(t *testing.T) {
	for _, kind := range []string{"goroutine", "foreign"} {
		t.Run(kind, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { propertyRun(rt, kind) })
		})
	}
}

func propertyRun(t *rapid.T, kind string) {
	n := rapid.IntRange(1, 6).Draw(t, "runners")
	var p *Pool
	if kind == "goroutine" {
		p = New(n)
	} else {
		rs := make([]Runner, n)
		for i := range rs {
			rs[i] = goFuncRunner{}
		}
		var err error
		if p, err = NewWithRunners(rs); err != nil {
			t.Fatalf("NewWithRunners: %v", err)
		}
	}
	ctx := context.Background()
	queues := make([][]modelTask, n) // per runner, in the order placed
	model := func() []int {
		out := make([]int, n)
		for r, q := range queues {
			for _, task := range q {
				out[r] += task.load
			}
		}
		return out
	}
	var multis sync.WaitGroup
	var multiErrs sync.Map
	// started records the gates of tasks whose function has begun: the
	// order in which a runner takes its queue is fixed when the task is
	// handed over, after the load is counted, so a RunMultiple placed first
	// can still reach its runner after a later Go.
	var started sync.Map
	var gates []chan struct{}

	t.Repeat(map[string]func(*rapid.T){
		"run": func(t *rapid.T) {
			load := rapid.IntRange(0, 300).Draw(t, "load")
			prior := p.Loads()
			gate := make(chan struct{})
			gates = append(gates, gate)
			if load == 0 { // goes to the top without moving it; not tracked
				close(gate)
			}
			if err := p.Go(ctx, load, func(context.Context) error { started.Store(gate, true); <-gate; return nil }, nil); err != nil {
				t.Fatalf("Go: %v", err)
			}
			after := p.Loads()
			if load == 0 {
				if !slices.Equal(prior, after) {
					t.Fatalf("load 0 changed loads %v -> %v", prior, after)
				}
				return
			}
			r := -1
			for i := range after {
				switch d := after[i] - prior[i]; {
				case d == load && r < 0:
					r = i
				case d != 0:
					t.Fatalf("Go(load %d): loads %v -> %v", load, prior, after)
				}
			}
			if r < 0 {
				t.Fatalf("Go(load %d) placed nowhere: %v -> %v", load, prior, after)
			}
			if prior[r] != slices.Min(prior) {
				t.Fatalf("Go placed on runner %d with load %d, minimum was %d (%v)", r, prior[r], slices.Min(prior), prior)
			}
			queues[r] = append(queues[r], modelTask{load, gate})
		},
		"multi": func(t *rapid.T) {
			k := rapid.IntRange(1, n).Draw(t, "k")
			load := rapid.IntRange(1, 300).Draw(t, "load")
			prior := p.Loads()
			rgates := make([]chan struct{}, n)
			for i := range rgates {
				rgates[i] = make(chan struct{})
			}
			id := len(gates)
			multis.Add(1)
			go func() {
				defer multis.Done()
				err := p.RunMultiple(ctx, k, load, func(_ context.Context, r int) error { started.Store(rgates[r], true); <-rgates[r]; return nil })
				multiErrs.Store(id, err)
			}()
			want := 0
			for _, l := range prior {
				want += l
			}
			want += k * load
			testenv.Eventually(t, "RunMultiple to place its work", func() bool {
				got := 0
				for _, l := range p.Loads() {
					got += l
				}
				return got == want
			})
			after := p.Loads()
			var chosen, others []int
			for i := range after {
				switch after[i] - prior[i] {
				case load:
					chosen = append(chosen, i)
				case 0:
					others = append(others, i)
				default:
					t.Fatalf("RunMultiple(k %d, load %d): loads %v -> %v", k, load, prior, after)
				}
			}
			if len(chosen) != k {
				t.Fatalf("RunMultiple(k %d) took %d distinct runners: %v -> %v", k, len(chosen), prior, after)
			}
			for _, c := range chosen {
				for _, o := range others {
					if prior[c] > prior[o] {
						t.Fatalf("RunMultiple took runner %d (load %d) over runner %d (load %d)", c, prior[c], o, prior[o])
					}
				}
				queues[c] = append(queues[c], modelTask{load, rgates[c]})
			}
			for _, r := range others { // gates of runners not chosen are never used
				close(rgates[r])
			}
			gates = append(gates, nil)
		},
		"finish": func(t *rapid.T) {
			var busy []int
			for r, q := range queues {
				if len(q) > 0 {
					busy = append(busy, r)
				}
			}
			if len(busy) == 0 {
				t.Skip("nothing running")
			}
			r := rapid.SampledFrom(busy).Draw(t, "runner")
			var i int
			if kind == "foreign" {
				i = rapid.IntRange(0, len(queues[r])-1).Draw(t, "task")
			} else {
				// A one-at-a-time runner runs one task: finish that one.
				testenv.Eventually(t, "a task to start on the runner", func() bool {
					for j, m := range queues[r] {
						if _, ok := started.Load(m.gate); ok {
							i = j
							return true
						}
					}
					return false
				})
			}
			close(queues[r][i].gate)
			queues[r] = slices.Delete(queues[r], i, i+1)
			want := model()
			testenv.Eventually(t, "load released", func() bool { return slices.Equal(p.Loads(), want) })
		},
		"": func(t *rapid.T) {
			checkHeap(t, p)
			if got, want := p.Loads(), model(); !slices.Equal(got, want) {
				t.Fatalf("loads %v, model %v", got, want)
			}
		},
	})

	for _, q := range queues {
		for _, task := range q {
			close(task.gate)
		}
	}
	multis.Wait()
	multiErrs.Range(func(k, v any) bool {
		if v != nil {
			t.Fatalf("RunMultiple %v: %v", k, v)
		}
		return true
	})
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := p.Loads(); !slices.Equal(got, make([]int, n)) {
		t.Fatalf("loads after Close: %v", got)
	}
	checkHeap(t, p)
}
