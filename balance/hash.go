package balance

import (
	"crypto/md5"
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// hash: a consistent-hash ring with virtual nodes, built once per snapshot.
// A key goes to the first ring point at or after its hash; removing one of
// n targets moves only the keys that were on it. A 64Ki-entry index over the
// top 16 bits of the ring narrows each lookup to a few points.
//
// bounded_hash: the same ring with bounded loads (Mirrokni et al.): walking
// from the key's point, the first target whose in-flight stays within
// c x the mean (weighted) takes the pick, so no target exceeds the bound.
type hashStrategy struct {
	md5     bool
	vnodes  int
	bounded bool
	c       float64
}

func newHash(o Options) (Strategy, error) {
	return hashStrategy{md5: o.Hash == "md5", vnodes: o.VirtualNodes}, nil
}

func newBoundedHash(o Options) (Strategy, error) {
	return hashStrategy{md5: o.Hash == "md5", vnodes: o.VirtualNodes, bounded: true, c: o.BoundFactor}, nil
}

// maxRingPoints bounds the ring's size; weights beyond it scale down.
const maxRingPoints = 1 << 22

func (h hashStrategy) Build(eps []*Endpoint) Picker {
	r := &ring{eps: eps, md5: h.md5}
	if len(eps) == 0 {
		return r
	}
	minW := math.MaxInt
	for _, e := range eps {
		minW = min(minW, e.t.Weight)
	}
	vnodes := h.vnodes
	if vnodes == 0 {
		// Imbalance shrinks as 1/sqrt(points per target) and the busiest
		// of n targets drifts up with n: these keep it under 1.15x.
		vnodes = 512
		if len(eps) > 16 {
			vnodes = 1024
		}
	}
	per := make([]int, len(eps))
	total := 0
	for i, e := range eps {
		per[i] = vnodes * e.t.Weight / minW
		total += per[i]
	}
	if total > maxRingPoints {
		scale := float64(maxRingPoints) / float64(total)
		for i := range per {
			per[i] = max(1, int(float64(per[i])*scale))
		}
	}
	type point struct {
		h     uint64
		owner int32
	}
	pts := make([]point, 0, total)
	buf := make([]byte, 0, 64)
	for i, e := range eps {
		for v := range per[i] {
			var ph uint64
			if h.md5 {
				// Seed 001 (ShenYu): "API-" + url + "-HASH-" + i.
				buf = append(append(append(buf[:0], "API-"...), e.t.Addr...), "-HASH-"...)
				buf = strconv.AppendInt(buf, int64(v), 10)
				ph = md5Hash32(buf)
			} else {
				buf = strconv.AppendInt(append(append(buf[:0], e.t.Addr...), '#'), int64(v), 10)
				ph = xxhash.Sum64(buf)
			}
			pts = append(pts, point{ph, int32(i)})
		}
	}
	// Sort by hash; ties (rare) by address so every gateway builds the
	// same ring from the same set.
	slices.SortFunc(pts, func(a, b point) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return compareStrings(eps[a.owner].t.Addr, eps[b.owner].t.Addr)
	})
	r.points = make([]uint64, len(pts))
	r.owner = make([]int32, len(pts))
	for i, p := range pts {
		r.points[i], r.owner[i] = p.h, p.owner
	}
	r.shift = 48
	if h.md5 {
		r.shift = 16 // 32-bit hashes: index on their top 16 bits
	}
	r.index = make([]uint32, 1<<16+1)
	j := 0
	for b := range 1 << 16 {
		for j < len(r.points) && r.points[j]>>r.shift < uint64(b) {
			j++
		}
		r.index[b] = uint32(j)
	}
	r.index[1<<16] = uint32(len(r.points))
	if h.bounded {
		var w float64
		for _, e := range eps {
			w += float64(e.t.Weight)
		}
		return &boundedRing{ring: r, c: h.c, totalWeight: w}
	}
	return r
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func md5Hash32(b []byte) uint64 {
	d := md5.Sum(b)
	return uint64(binary.LittleEndian.Uint32(d[:4]))
}

type ring struct {
	eps    []*Endpoint
	md5    bool
	points []uint64
	owner  []int32
	index  []uint32
	shift  uint
}

func (r *ring) keyHash(key string) uint64 {
	if r.md5 {
		d := md5.Sum([]byte(key))
		return uint64(binary.LittleEndian.Uint32(d[:4]))
	}
	return xxhash.Sum64String(key)
}

// search returns the index of the first point >= h (wrapping to 0).
func (r *ring) search(h uint64) int {
	b := h >> r.shift
	lo, hi := int(r.index[b]), int(r.index[b+1])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.points[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.points) {
		return 0
	}
	return lo
}

func (r *ring) Pick(info PickInfo) *Endpoint {
	if len(r.points) == 0 {
		return nil
	}
	i := r.search(r.keyHash(info.Key))
	e := r.eps[r.owner[i]]
	if info.Usable(e) {
		return e
	}
	return r.walk(&info, i, func(e *Endpoint) bool { return true })
}

// walk returns the first endpoint after point i that is usable and passes
// ok, visiting each endpoint at most once.
func (r *ring) walk(info *PickInfo, i int, ok func(*Endpoint) bool) *Endpoint {
	var seen [8]uint64 // bitmap for small sets, no allocation
	var seenBig []bool
	if len(r.eps) > len(seen)*64 {
		seenBig = make([]bool, len(r.eps))
	}
	left := len(r.eps)
	n := len(r.points)
	for k := 0; k < n && left > 0; k++ {
		o := r.owner[(i+k)%n]
		if seenBig != nil {
			if seenBig[o] {
				continue
			}
			seenBig[o] = true
		} else {
			if seen[o>>6]&(1<<(o&63)) != 0 {
				continue
			}
			seen[o>>6] |= 1 << (o & 63)
		}
		left--
		if e := r.eps[o]; info.Usable(e) && ok(e) {
			return e
		}
	}
	return nil
}

type boundedRing struct {
	*ring
	c           float64
	totalWeight float64
}

func (boundedRing) usesTotal() {}

func (r *boundedRing) Pick(info PickInfo) *Endpoint {
	if len(r.points) == 0 {
		return nil
	}
	// The bound counts this pick: ceil(c x (total+1) x w/W).
	total := float64(info.snap.b.total.Load() + 1)
	within := func(e *Endpoint) bool {
		bound := math.Ceil(r.c * total * float64(e.t.Weight) / r.totalWeight)
		return float64(e.s.inflight.Load()+1) <= bound
	}
	i := r.search(r.keyHash(info.Key))
	if e := r.eps[r.owner[i]]; info.Usable(e) && within(e) {
		return e
	}
	if e := r.walk(&info, i, within); e != nil {
		return e
	}
	// Every target at its bound (possible under races): plain ring order.
	return r.walk(&info, i, func(*Endpoint) bool { return true })
}
