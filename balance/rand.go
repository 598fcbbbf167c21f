package balance

import (
	"math/rand/v2"
	"sync"
)

// randSource is where a balancer's strategies draw random numbers: the
// runtime's (no lock, the default), or Options.Rand under a lock, so a
// seeded simulation draws the same sequence every run.
type randSource struct {
	mu sync.Mutex
	r  *rand.Rand // nil: the runtime's
}

func newRandSource(src rand.Source) *randSource {
	if src == nil {
		return &randSource{}
	}
	return &randSource{r: rand.New(src)}
}

func (s *randSource) uint64() uint64 {
	if s == nil || s.r == nil {
		return rand.Uint64()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Uint64()
}

func (s *randSource) intN(n int) int {
	if s == nil || s.r == nil {
		return rand.IntN(n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.IntN(n)
}

func (s *randSource) float64() float64 {
	if s == nil || s.r == nil {
		return rand.Float64()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Float64()
}

// rnd is the pick's balancer's source; nil (the runtime's) for a picker
// called directly.
func (in *PickInfo) rnd() *randSource {
	if in.snap == nil {
		return nil
	}
	return in.snap.b.rnd
}

// IntN returns a random int in [0, n) from the balancer's random source
// (Options.Rand): a strategy draws through it, never from the global
// source, so a seeded run repeats. It panics if n <= 0, as rand.IntN does.
func (in *PickInfo) IntN(n int) int { return in.rnd().intN(n) }

// Float64 returns a random float64 in [0, 1) from the balancer's source.
func (in *PickInfo) Float64() float64 { return in.rnd().float64() }

// Uint64 returns a random uint64 from the balancer's source.
func (in *PickInfo) Uint64() uint64 { return in.rnd().uint64() }
