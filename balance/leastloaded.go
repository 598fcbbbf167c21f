package balance

import (
	"container/heap"
	"sync"
)

// least_loaded: seed 003's min-heap of targets ordered by explicit load
// units (PickInfo.Load, default 1) per unit of weight. A pick takes the top
// of the heap; its load is added while it runs and removed by Done, and the
// heap is fixed in O(log n) each time.
type leastLoadedStrategy struct{}

func newLeastLoaded(Options) (Strategy, error) { return leastLoadedStrategy{}, nil }

func (leastLoadedStrategy) Build(eps []*Endpoint) Picker {
	h := &loadHeap{eps: make([]*Endpoint, len(eps)), picks: make([]uint64, len(eps)), pos: make(map[*state]int, len(eps))}
	copy(h.eps, eps)
	for i, e := range h.eps {
		h.pos[e.s] = i
	}
	heap.Init(h)
	return h
}

type loadHeap struct {
	mu    sync.Mutex
	eps   []*Endpoint
	picks []uint64 // picks per heap slot: ties go to the least picked, so equal loads rotate
	pos   map[*state]int
}

func loadPerWeight(e *Endpoint) float64 { return float64(e.s.load.Load()) / float64(e.t.Weight) }

// heap.Interface; callers hold mu.
func (h *loadHeap) Len() int { return len(h.eps) }
func (h *loadHeap) Less(i, j int) bool {
	li, lj := loadPerWeight(h.eps[i]), loadPerWeight(h.eps[j])
	if li != lj {
		return li < lj
	}
	return float64(h.picks[i])/float64(h.eps[i].t.Weight) < float64(h.picks[j])/float64(h.eps[j].t.Weight)
}
func (h *loadHeap) Swap(i, j int) {
	h.eps[i], h.eps[j] = h.eps[j], h.eps[i]
	h.picks[i], h.picks[j] = h.picks[j], h.picks[i]
	h.pos[h.eps[i].s] = i
	h.pos[h.eps[j].s] = j
}
func (h *loadHeap) Push(any) { panic("balance: loadHeap is fixed-size") }
func (h *loadHeap) Pop() any { panic("balance: loadHeap is fixed-size") }

func (h *loadHeap) Pick(info PickInfo) *Endpoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.eps) == 0 {
		return nil
	}
	if e := h.eps[0]; info.Usable(e) {
		h.picks[0]++
		return e
	}
	// The least loaded is excluded or full: the least loaded usable one.
	best := -1
	for i, e := range h.eps {
		if info.Usable(e) && (best < 0 || h.Less(i, best)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	h.picks[best]++
	return h.eps[best]
}

// Changed restores the heap order after e's load changed.
func (h *loadHeap) Changed(e *Endpoint) {
	h.mu.Lock()
	if i, ok := h.pos[e.s]; ok {
		heap.Fix(h, i)
	}
	h.mu.Unlock()
}
