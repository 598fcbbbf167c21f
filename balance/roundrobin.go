package balance

import (
	"sync"
	"sync/atomic"
)

// round_robin: nginx's smooth weighted round robin. Each pick adds every
// weight to its current value, takes the largest and subtracts the total
// from it; weights 5,1,1 give a a b a c a a.
//
// In steady state the sequence of one period is precomputed and a pick is
// one atomic increment, so picks never contend on a lock. While a target
// warms up (weights change with time), or when the period would be too
// long to store, picks run nginx's algorithm under a mutex.
type roundRobinStrategy struct{}

func newRoundRobin(s Settings) (Strategy, error) {
	if err := noSettings(s); err != nil {
		return nil, err
	}
	return roundRobinStrategy{}, nil
}

// maxPeriod bounds the precomputed sequence (entries).
const maxPeriod = 1 << 20

func (roundRobinStrategy) Build(eps []*Endpoint) Picker {
	p := &rrPicker{eps: eps, cur: make([]float64, len(eps))}
	if len(eps) == 0 {
		return p
	}
	g := 0
	total := 0
	for _, e := range eps {
		g = gcd(g, e.Weight())
	}
	for _, e := range eps {
		total += e.Weight() / g
	}
	if total <= maxPeriod {
		p.seq = smoothSequence(eps, g, total)
	}
	return p
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// smoothSequence runs nginx's algorithm for one period.
func smoothSequence(eps []*Endpoint, g, total int) []int32 {
	seq := make([]int32, total)
	cur := make([]int, len(eps))
	for k := range seq {
		best := -1
		for i, e := range eps {
			cur[i] += e.Weight() / g
			if best < 0 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		seq[k] = int32(best)
	}
	return seq
}

type rrPicker struct {
	eps []*Endpoint
	seq []int32
	// ctr is written by every pick: keep it off the cache line of the
	// read-only fields above, or each pick would evict them on other cores.
	_   [64]byte
	ctr atomic.Uint64
	_   [56]byte

	mu  sync.Mutex
	cur []float64
}

func (p *rrPicker) Pick(info PickInfo) *Endpoint {
	if len(p.eps) == 0 {
		return nil
	}
	if p.seq != nil && !info.Warming() {
		n := uint64(len(p.seq))
		i := p.ctr.Add(1) - 1
		e := p.eps[p.seq[i%n]]
		if info.Usable(e) {
			return e
		}
		// Skip unusable ones the way nginx does: the next in the sequence.
		for k := uint64(1); k < n && k <= uint64(2*len(p.eps)); k++ {
			if e := p.eps[p.seq[(i+k)%n]]; info.Usable(e) {
				return e
			}
		}
	}
	return p.smooth(&info)
}

// smooth is nginx's algorithm over the usable endpoints with their current
// (warm-up) weights.
func (p *rrPicker) smooth(info *PickInfo) *Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	var total float64
	for i, e := range p.eps {
		if !info.Usable(e) {
			continue
		}
		w := info.Weight(e)
		p.cur[i] += w
		total += w
		if best < 0 || p.cur[i] > p.cur[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	p.cur[best] -= total
	return p.eps[best]
}
