package balance

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every strategy draws from Options.Rand: two balancers given the same seed
// pick the same sequence, so a seeded simulation repeats; for the
// strategies that draw, another seed picks another sequence (the draws do
// come from the option, not from the global source).
func TestSeededRandRepeatsPicks(t *testing.T) {
	start := time.Unix(1000, 0)
	picks := func(strategy string, seed uint64) []string {
		var now time.Duration
		b, err := New(strategy, Options{Rand: rand.NewPCG(seed, 1), Clock: func() time.Time { return start.Add(now) }})
		if err != nil {
			t.Fatal(err)
		}
		// Unequal weights (the alias table), one target still warming up
		// (the weighted slow path).
		if err := b.Update([]Target{{Addr: "a", Weight: 3}, {Addr: "b", Weight: 1}, {Addr: "c", Weight: 1}, {Addr: "d", Weight: 2, Warmup: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		var out []string
		var held []Pick
		for i := range 300 {
			p, err := b.Pick("")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.Addr())
			held = append(held, p)
			now += time.Millisecond
			if i%3 == 2 { // keep some in flight, so the load-aware strategies see ties and differences
				for _, h := range held[:2] {
					h.Done(nil)
				}
				held = held[2:]
			}
		}
		for _, h := range held {
			h.Done(nil)
		}
		return out
	}
	for _, name := range NewRegistry().Names() {
		t.Run(name, func(t *testing.T) {
			if a, b := picks(name, 1), picks(name, 1); !slices.Equal(a, b) {
				t.Fatalf("one seed, two sequences:\n%v\n%v", a, b)
			}
			if name == "random" || name == "p2c" {
				if a, b := picks(name, 1), picks(name, 2); slices.Equal(a, b) {
					t.Fatalf("seeds 1 and 2 picked the same 300 targets: the draws do not come from Options.Rand")
				}
			}
		})
	}
}
