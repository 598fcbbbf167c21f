package balance

import (
	"crypto/md5"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// hash: a consistent-hash ring with virtual nodes. A key goes to the first
// ring point at or after its hash; removing one of n targets moves only the
// keys that were on it. A 64Ki-entry index over the top 16 bits of the ring
// narrows each lookup to a few points.
//
// bounded_hash: the same ring with bounded loads (Mirrokni et al.): walking
// from the key's point, the first target whose in-flight stays within
// c x the mean (weighted) takes the pick, so no target exceeds the bound.
//
// The ring is built once per membership change. A health change only
// narrows the usable set, and a ring over a subset maps every key exactly as
// the full ring does when its walk skips the missing targets, so the strategy
// keeps the last ring and reuses it whenever the usable targets are a subset
// of it: a health flip costs a slice, not a rebuild.
type hashStrategy struct {
	md5     bool
	vnodes  int
	bounded bool
	c       float64
	total   *inFlight // bounded_hash: picks outstanding over all targets

	mu   sync.Mutex
	last *ringData
}

// inFlight counts bounded_hash's picks outstanding, on a cache line of its
// own: every pick writes it.
type inFlight struct {
	_ [64]byte
	n atomic.Int64
	_ [56]byte
}

// HashSettings are the hash strategy's settings.
type HashSettings struct {
	// Function is the hash function: "xxhash" (default, 64-bit) or "md5"
	// (Apache ShenYu's ring: 32 bits of MD5, ring points hashed
	// from "API-<addr>-HASH-<i>").
	Function string `yaml:"function"`
	// VirtualNodes is the ring points per unit of weight. 0 picks by the
	// number of targets (512 up to 16, 1024 above), which keeps the
	// busiest target under 1.15x the mean over uniform keys; ShenYu used 5.
	VirtualNodes int `yaml:"virtual_nodes"`
}

// BoundedHashSettings are bounded_hash's settings.
type BoundedHashSettings struct {
	HashSettings `yaml:",inline"`
	// LoadBound is c: no target above c x the mean in-flight, weighted
	// (default 1.25, must be above 1).
	LoadBound float64 `yaml:"load_bound"`
}

func (s *HashSettings) check() error {
	switch s.Function {
	case "":
		s.Function = "xxhash"
	case "xxhash", "md5":
	default:
		return settingErr("function", "unknown hash function %q (xxhash or md5)", s.Function)
	}
	if s.VirtualNodes < 0 {
		return settingErr("virtual_nodes", "%d is negative", s.VirtualNodes)
	}
	return nil
}

func newHash(set Settings) (Strategy, error) {
	var s HashSettings
	if err := decodeSettings(set, &s); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &hashStrategy{md5: s.Function == "md5", vnodes: s.VirtualNodes}, nil
}

func newBoundedHash(set Settings) (Strategy, error) {
	var s BoundedHashSettings
	if err := decodeSettings(set, &s); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.LoadBound == 0 {
		s.LoadBound = 1.25
	}
	if !(s.LoadBound > 1) || math.IsInf(s.LoadBound, 0) {
		return nil, settingErr("load_bound", "%v must be above 1", s.LoadBound)
	}
	return &hashStrategy{md5: s.Function == "md5", vnodes: s.VirtualNodes, bounded: true, c: s.LoadBound, total: new(inFlight)}, nil
}

// maxRingPoints bounds the ring's size; weights beyond it scale down.
const maxRingPoints = 1 << 22

// ringData is the immutable ring over a set of targets. Owners are ranks of
// the targets' addresses in sorted order, so the ring does not depend on the
// order targets were configured in.
type ringData struct {
	addrs   []string       // by rank
	weights map[string]int // addr -> weight it was built with
	points  []uint64       // sorted; hash in the top 48 bits, owner rank in the low 16
	owner   []int32        // ranks, only when there are more than 1<<16 targets
	index   []uint32       // first point of each top-16-bit bucket
}

func (h *hashStrategy) Build(eps []*Endpoint) Picker {
	h.mu.Lock()
	rd := h.last
	if rd == nil || !rd.covers(eps) {
		rd = h.build(eps)
		h.last = rd
	}
	h.mu.Unlock()
	r := &ring{data: rd, md5: h.md5, byRank: make([]*Endpoint, len(rd.addrs)), usable: len(eps)}
	for _, e := range eps {
		i, _ := slices.BinarySearch(rd.addrs, e.Addr())
		r.byRank[i] = e
	}
	if h.bounded {
		var w float64
		for _, e := range eps {
			w += float64(e.Weight())
		}
		return &boundedRing{ring: r, c: h.c, totalWeight: w, total: h.total}
	}
	return r
}

func (rd *ringData) covers(eps []*Endpoint) bool {
	for _, e := range eps {
		if w, ok := rd.weights[e.Addr()]; !ok || w != e.Weight() {
			return false
		}
	}
	return true
}

func (h *hashStrategy) build(eps []*Endpoint) *ringData {
	rd := &ringData{weights: make(map[string]int, len(eps))}
	for _, e := range eps {
		rd.addrs = append(rd.addrs, e.Addr())
		rd.weights[e.Addr()] = e.Weight()
	}
	slices.Sort(rd.addrs)
	if len(eps) == 0 {
		rd.index = make([]uint32, 1<<16+1)
		return rd
	}
	minW := math.MaxInt
	for _, e := range eps {
		minW = min(minW, e.Weight())
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
	per := make([]int, len(rd.addrs))
	total := 0
	for i, a := range rd.addrs {
		per[i] = vnodes * rd.weights[a] / minW
		total += per[i]
	}
	if total > maxRingPoints {
		scale := float64(maxRingPoints) / float64(total)
		total = 0
		for i := range per {
			per[i] = max(1, int(float64(per[i])*scale))
			total += per[i]
		}
	}
	// Each point packs its hash (top 48 bits; ShenYu's 32-bit MD5 in the
	// top 32) with its owner's rank in the low 16, so one sort of plain
	// integers orders the ring and breaks ties by address.
	packed := make([]uint64, 0, total)
	wide := len(rd.addrs) > 1<<16
	buf := make([]byte, 0, 64)
	for rank, a := range rd.addrs {
		for v := range per[rank] {
			var ph uint64
			if h.md5 {
				// Apache ShenYu: "API-" + url + "-HASH-" + i.
				buf = append(append(append(buf[:0], "API-"...), a...), "-HASH-"...)
				buf = strconv.AppendInt(buf, int64(v), 10)
				ph = md5Hash32(buf) << 32
			} else {
				buf = strconv.AppendInt(append(append(buf[:0], a...), '#'), int64(v), 10)
				ph = xxhash.Sum64(buf)
			}
			if wide {
				packed = append(packed, ph) // owner kept aside below
			} else {
				packed = append(packed, ph&^0xFFFF|uint64(rank))
			}
		}
	}
	if wide {
		// More targets than 16 bits can rank: sort pairs the slow way.
		return h.buildWide(rd, per)
	}
	// The owner stays packed in the point: a lookup reads one cache line
	// for both. A key hash has its low 16 bits clear, so "first point >=
	// key" still finds the first point of hash >= key.
	radixSort(packed)
	rd.points = packed
	rd.buildIndex()
	return rd
}

func (h *hashStrategy) buildWide(rd *ringData, per []int) *ringData {
	type point struct {
		h     uint64
		owner int32
	}
	var pts []point
	for rank, a := range rd.addrs {
		for v := range per[rank] {
			pts = append(pts, point{xxhash.Sum64String(a+"#"+strconv.Itoa(v)) &^ 0xFFFF, int32(rank)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return int(a.owner - b.owner)
	})
	rd.points = make([]uint64, len(pts))
	rd.owner = make([]int32, len(pts))
	for i, p := range pts {
		rd.points[i], rd.owner[i] = p.h, p.owner
	}
	rd.buildIndex()
	return rd
}

// ownerAt returns the rank of the target owning point i.
func (rd *ringData) ownerAt(i int) int32 {
	if rd.owner != nil {
		return rd.owner[i]
	}
	return int32(rd.points[i] & 0xFFFF)
}

func (rd *ringData) buildIndex() {
	rd.index = make([]uint32, 1<<16+1)
	j := 0
	for b := range 1 << 16 {
		for j < len(rd.points) && rd.points[j]>>48 < uint64(b) {
			j++
		}
		rd.index[b] = uint32(j)
	}
	rd.index[1<<16] = uint32(len(rd.points))
}

func md5Hash32(b []byte) uint64 {
	d := md5.Sum(b)
	return uint64(binary.LittleEndian.Uint32(d[:4]))
}

// ring is one snapshot's view of a ringData: the usable endpoints by rank.
type ring struct {
	data   *ringData
	md5    bool
	byRank []*Endpoint // nil where the target is not usable in this snapshot
	usable int
}

func (r *ring) keyHash(key string) uint64 {
	if r.md5 {
		d := md5.Sum([]byte(key))
		return uint64(binary.LittleEndian.Uint32(d[:4])) << 32
	}
	return xxhash.Sum64String(key) &^ 0xFFFF
}

// search returns the index of the first point >= h (wrapping to 0).
func (r *ring) search(h uint64) int {
	pts := r.data.points
	b := h >> 48
	lo, hi := int(r.data.index[b]), int(r.data.index[b+1])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if pts[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(pts) {
		return 0
	}
	return lo
}

// UsesKey: the ring maps PickInfo.Key.
func (h *hashStrategy) UsesKey() bool { return true }

func (r *ring) Pick(info PickInfo) *Endpoint {
	if r.usable == 0 {
		return nil
	}
	i := r.search(r.keyHash(info.Key))
	if e := r.byRank[r.data.ownerAt(i)]; e != nil && info.Usable(e) {
		return e
	}
	return r.walk(&info, i, nil)
}

// walk returns the first endpoint after point i that is usable and within
// the bound (when bound is set), visiting each target at most once.
func (r *ring) walk(info *PickInfo, i int, bound *boundedRing) *Endpoint {
	var seen [8]uint64 // bitmap for up to 512 targets, no allocation
	var seenBig []bool
	if len(r.byRank) > len(seen)*64 {
		seenBig = make([]bool, len(r.byRank))
	}
	left := len(r.byRank)
	n := len(r.data.points)
	for k := 0; k < n && left > 0; k++ {
		o := r.data.ownerAt((i + k) % n)
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
		e := r.byRank[o]
		if e != nil && info.Usable(e) && (bound == nil || bound.within(e, info)) {
			return e
		}
	}
	return nil
}

type boundedRing struct {
	*ring
	c           float64
	totalWeight float64
	total       *inFlight // the strategy's, shared by its snapshots
}

// InFlightCounter has the balancer keep the count of picks outstanding
// that the bound is taken from.
func (r *boundedRing) InFlightCounter() *atomic.Int64 { return &r.total.n }

// within reports whether one more pick keeps e at or under
// ceil(c x (total+1) x w/W), the bound counting this pick.
func (r *boundedRing) within(e *Endpoint, info *PickInfo) bool {
	total := float64(r.total.n.Load() + 1)
	bound := math.Ceil(r.c * total * float64(e.Weight()) / r.totalWeight)
	return float64(e.InFlight()+1) <= bound
}

func (r *boundedRing) Pick(info PickInfo) *Endpoint {
	if r.usable == 0 {
		return nil
	}
	i := r.search(r.keyHash(info.Key))
	if e := r.byRank[r.data.ownerAt(i)]; e != nil && info.Usable(e) && r.within(e, &info) {
		return e
	}
	if e := r.walk(&info, i, r); e != nil {
		return e
	}
	// Every target at its bound (possible under races): plain ring order.
	return r.walk(&info, i, nil)
}

// radixSort sorts a in four passes of 16 bits: a million ring points sort
// several times faster than with a comparison sort, which is most of a
// ring build.
func radixSort(a []uint64) {
	if len(a) < 1<<12 {
		slices.Sort(a)
		return
	}
	buf := make([]uint64, len(a))
	count := make([]int, 1<<16)
	src, dst := a, buf
	for shift := uint(0); shift < 64; shift += 16 {
		clear(count)
		for _, v := range src {
			count[(v>>shift)&0xFFFF]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, v := range src {
			d := (v >> shift) & 0xFFFF
			dst[count[d]] = v
			count[d]++
		}
		src, dst = dst, src
	}
	// Four passes: the sorted data is back in a.
}
