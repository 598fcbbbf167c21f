package balance

import (
	"math/rand/v2"
	"sync/atomic"
)

// least_active: the fewest in-flight picks wins; ties are broken by
// weighted random (seed 001, Dubbo). O(n) per pick.
type leastActiveStrategy struct{}

func newLeastActive(Options) (Strategy, error) { return leastActiveStrategy{}, nil }

func (leastActiveStrategy) Build(eps []*Endpoint) Picker {
	return &scorePicker{eps: eps, score: func(e *Endpoint, _ int64) int64 { return e.s.inflight.Load() }}
}

// shortest_response: the seed's estimate, mean success latency over a
// sliding window x in-flight, lowest wins, weighted random among ties. The
// estimate uses in-flight+1 (as Dubbo does), so that an idle slow target
// does not tie with an idle fast one. A target with no sample in the window
// estimates 0 and is tried. A target not picked in the last 16 x n picks is
// picked once, so one slow sample cannot starve a target that has since
// become fast (without it, the window would keep it out for up to a whole
// window while its fast peers took everything).
type shortestResponseStrategy struct{ half int64 }

func newShortestResponse(o Options) (Strategy, error) {
	return shortestResponseStrategy{half: int64(o.Window / 2)}, nil
}

func (s shortestResponseStrategy) Build(eps []*Endpoint) Picker {
	half := s.half
	return &latencyScorePicker{scorePicker{eps: eps, needNow: true, forceAfter: int64(16 * max(len(eps), 1)), score: func(e *Endpoint, now int64) int64 {
		avg := e.s.win.avg(now, half)
		if avg < 0 {
			return 0
		}
		return avg * (e.s.inflight.Load() + 1)
	}}}
}

type latencyScorePicker struct{ scorePicker }

func (*latencyScorePicker) usesLatency() {}

// scorePicker picks the usable endpoint of lowest score, weighted random
// among ties, in one pass (weighted reservoir sampling).
type scorePicker struct {
	eps     []*Endpoint
	needNow bool
	score   func(e *Endpoint, now int64) int64

	// forceAfter > 0 re-measures a target left unpicked that many picks.
	forceAfter int64
	picks      atomic.Int64
}

func (p *scorePicker) Pick(info PickInfo) *Endpoint {
	var now int64
	if p.needNow {
		now = info.Now()
	}
	var n int64
	if p.forceAfter > 0 {
		n = p.picks.Add(1)
	}
	var best *Endpoint
	var bestScore int64
	var tieWeight float64
	for _, e := range p.eps {
		if !info.Usable(e) {
			continue
		}
		if n != 0 {
			last := e.s.lastPick.Load()
			if last == 0 {
				// First sight: start counting from here.
				e.s.lastPick.CompareAndSwap(0, n)
			} else if n-last > p.forceAfter {
				e.s.lastPick.Store(n)
				return e
			}
		}
		sc := p.score(e, now)
		w := info.Weight(e)
		switch {
		case best == nil || sc < bestScore:
			best, bestScore, tieWeight = e, sc, w
		case sc == bestScore:
			tieWeight += w
			if rand.Float64()*tieWeight < w {
				best = e
			}
		}
	}
	if n != 0 && best != nil && best.s.lastPick.Load() != n {
		best.s.lastPick.Store(n)
	}
	return best
}
