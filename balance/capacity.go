package balance

import "math"

// capacity: seed 004's backpressure. Each target's permits are its max
// concurrency; a pick takes a permit and its outcome returns it. The pick
// goes to the target with the most remaining capacity scaled by observed
// latency (Little's law: free permits / latency is the rate the target can
// still absorb); when no permit is free, Wait blocks until one returns.
type capacityStrategy struct{}

func newCapacity(Options) (Strategy, error) { return capacityStrategy{}, nil }

func (capacityStrategy) Build(eps []*Endpoint) Picker { return &capacityPicker{eps: eps} }

type capacityPicker struct{ eps []*Endpoint }

func (*capacityPicker) usesLatency() {}

func (p *capacityPicker) Pick(info PickInfo) *Endpoint {
	var best *Endpoint
	bestRate := -1.0
	for _, e := range p.eps {
		if !info.Usable(e) {
			continue
		}
		free := float64(e.Remaining())
		if free == math.MaxInt64 {
			free = 1 << 20
		}
		lat := float64(e.s.ewma.Load())
		if lat <= 0 {
			lat = 1
		}
		rate := free * info.Weight(e) / lat
		if rate > bestRate {
			best, bestRate = e, rate
		}
	}
	return best
}
