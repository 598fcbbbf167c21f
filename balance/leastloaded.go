package balance

import (
	"container/heap"
	"sync"
	"sync/atomic"
)

// least_loaded: a min-heap of targets, as a pool keeps its runners, ordered
// by explicit load units (PickInfo.Load, default 1) per unit of weight. A
// pick takes the top of the heap; its load is added while it runs and
// removed by Done, and the heap is fixed in O(log n) each time.
type leastLoadedStrategy struct{}

func newLeastLoaded(s Settings) (Strategy, error) {
	if err := noSettings(s); err != nil {
		return nil, err
	}
	return leastLoadedStrategy{}, nil
}

// loadedEndpoint is least_loaded's state for one target: the load units of
// its picks outstanding, kept across snapshots.
type loadedEndpoint struct{ load atomic.Int64 }

func (leastLoadedStrategy) Build(eps []*Endpoint) Picker {
	h := &loadHeap{eps: make([]*Endpoint, len(eps)), ld: make([]*loadedEndpoint, len(eps)), picks: make([]uint64, len(eps)), pos: make(map[*loadedEndpoint]int, len(eps)),
		orig: eps, byIndex: make([]*loadedEndpoint, len(eps))}
	copy(h.eps, eps)
	for i, e := range h.eps {
		h.ld[i] = StateOf[loadedEndpoint](e)
		h.byIndex[i] = h.ld[i]
		h.pos[h.ld[i]] = i
	}
	heap.Init(h)
	return h
}

type loadHeap struct {
	mu    sync.Mutex
	eps   []*Endpoint
	ld    []*loadedEndpoint // per heap slot, as eps
	picks []uint64          // picks per heap slot: ties go to the least picked, so equal loads rotate
	pos   map[*loadedEndpoint]int

	orig    []*Endpoint       // as given to Build
	byIndex []*loadedEndpoint // by e.Index(), fixed
}

func (h *loadHeap) loadPerWeight(i int) float64 {
	return float64(h.ld[i].load.Load()) / float64(h.eps[i].Weight())
}

// heap.Interface; callers hold mu.
func (h *loadHeap) Len() int { return len(h.eps) }
func (h *loadHeap) Less(i, j int) bool {
	li, lj := h.loadPerWeight(i), h.loadPerWeight(j)
	if li != lj {
		return li < lj
	}
	return float64(h.picks[i])/float64(h.eps[i].Weight()) < float64(h.picks[j])/float64(h.eps[j].Weight())
}
func (h *loadHeap) Swap(i, j int) {
	h.eps[i], h.eps[j] = h.eps[j], h.eps[i]
	h.ld[i], h.ld[j] = h.ld[j], h.ld[i]
	h.picks[i], h.picks[j] = h.picks[j], h.picks[i]
	h.pos[h.ld[i]] = i
	h.pos[h.ld[j]] = j
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

// Started adds a pick's load and restores the heap order.
func (h *loadHeap) Started(e *Endpoint, load int64) { h.add(e, load) }

// Ended removes a pick's load and restores the heap order.
func (h *loadHeap) Ended(e *Endpoint, load int64) { h.add(e, -load) }

func (h *loadHeap) add(e *Endpoint, load int64) {
	var ld *loadedEndpoint
	if i := e.Index(); i >= 0 && i < len(h.orig) && h.orig[i] == e {
		ld = h.byIndex[i] // e is one of this snapshot's: no lookup
	} else {
		ld = StateOf[loadedEndpoint](e)
	}
	ld.load.Add(load)
	h.mu.Lock()
	if i, ok := h.pos[ld]; ok {
		heap.Fix(h, i)
	}
	h.mu.Unlock()
}
