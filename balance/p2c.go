package balance

import (
	"math"
	"math/rand/v2"
)

// p2c: power of two choices on a peak-EWMA cost (Finagle, Linkerd): two
// distinct targets drawn at random, the lower latency x (in-flight+1) wins.
// The EWMA jumps up to any slower sample at once (peak) and decays towards
// faster ones with time constant Decay. A target not picked for a whole
// Decay is picked once, so a target that was slow gets re-measured.
type p2cStrategy struct{ tau int64 }

func newP2C(o Options) (Strategy, error) { return p2cStrategy{tau: int64(o.Decay)}, nil }

func (s p2cStrategy) Build(eps []*Endpoint) Picker { return &p2cPicker{eps: eps, tau: s.tau} }

type p2cPicker struct {
	eps []*Endpoint
	tau int64
}

func (*p2cPicker) usesLatency() {}

func (p *p2cPicker) cost(e *Endpoint) float64 {
	return float64(e.s.peak.Load()+1) * float64(e.s.inflight.Load()+1)
}

func (p *p2cPicker) Pick(info PickInfo) *Endpoint {
	n := len(p.eps)
	switch n {
	case 0:
		return nil
	case 1:
		if info.Usable(p.eps[0]) {
			return p.eps[0]
		}
		return nil
	}
	i := rand.IntN(n)
	j := rand.IntN(n - 1)
	if j >= i {
		j++
	}
	a, b := p.eps[i], p.eps[j]
	ua, ub := info.Usable(a), info.Usable(b)
	var pick *Endpoint
	switch {
	case ua && ub:
		// Cost per unit of (warm-up) weight: a heavier target is
		// proportionally cheaper, a cold one dearer.
		if p.cost(a)/info.Weight(a) <= p.cost(b)/info.Weight(b) {
			pick = a
		} else {
			pick, b = b, a
		}
		// Re-measure the loser if it has not been picked for a while.
		now := info.Now()
		if now-b.s.lastPick.Load() > p.tau {
			pick = b
		}
		pick.s.lastPick.Store(now)
		return pick
	case ua:
		return a
	case ub:
		return b
	}
	return weightedAmong(&info, p.eps)
}

func (p *p2cPicker) Observe(e *Endpoint, o Outcome) {
	lat := int64(o.Latency)
	if lat <= 0 {
		return
	}
	prev, at := e.s.peak.Load(), e.s.peakAt.Load()
	if lat > prev {
		e.s.peak.Store(lat)
	} else {
		w := math.Exp(-float64(o.Now-at) / float64(p.tau))
		e.s.peak.Store(int64(float64(prev)*w + float64(lat)*(1-w)))
	}
	e.s.peakAt.Store(o.Now)
}
