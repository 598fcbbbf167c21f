package balance

import "math/rand/v2"

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
// estimates 0 and is tried.
type shortestResponseStrategy struct{ half int64 }

func newShortestResponse(o Options) (Strategy, error) {
	return shortestResponseStrategy{half: int64(o.Window / 2)}, nil
}

func (s shortestResponseStrategy) Build(eps []*Endpoint) Picker {
	half := s.half
	return &latencyScorePicker{scorePicker{eps: eps, needNow: true, score: func(e *Endpoint, now int64) int64 {
		avg := e.s.win.avg(now, half)
		if avg < 0 {
			return 0
		}
		return avg * (e.s.inflight.Load() + 1)
	}}}
}

type latencyScorePicker struct{ scorePicker }

func (latencyScorePicker) usesLatency() {}

// scorePicker picks the usable endpoint of lowest score, weighted random
// among ties, in one pass (weighted reservoir sampling).
type scorePicker struct {
	eps     []*Endpoint
	needNow bool
	score   func(e *Endpoint, now int64) int64
}

func (p *scorePicker) Pick(info PickInfo) *Endpoint {
	var now int64
	if p.needNow {
		now = info.Now()
	}
	var best *Endpoint
	var bestScore int64
	var tieWeight float64
	for _, e := range p.eps {
		if !info.Usable(e) {
			continue
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
	return best
}
