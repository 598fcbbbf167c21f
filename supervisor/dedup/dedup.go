package dedup

import (
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// shardCount splits the key space so concurrent First calls rarely share a
// lock. Small capacities use a single shard so the bound stays exact and the
// eviction order stays globally oldest-first.
const (
	shardCount       = 16
	minPerShardSplit = 256 // split only when every shard holds at least this many
)

// Deduper answers "is this the first time within the window?" for payload
// keys. The zero value is not usable; call New. Safe for concurrent use.
type Deduper struct {
	window time.Duration
	shards []shard
	mask   uint64
}

// New returns a Deduper that remembers a key for window after its first
// sighting and holds at most maxEntries keys (at least 1). A window of zero
// or less means keys never expire by age, only by the entry bound.
func New(window time.Duration, maxEntries int) *Deduper {
	if maxEntries < 1 {
		maxEntries = 1
	}
	n := 1
	if maxEntries >= shardCount*minPerShardSplit {
		n = shardCount
	}
	d := &Deduper{window: window, shards: make([]shard, n), mask: uint64(n - 1)}
	per := maxEntries / n // floor: the sum over shards never exceeds maxEntries
	for i := range d.shards {
		d.shards[i].max = per
		d.shards[i].seen = make(map[uint64]int64)
	}
	return d
}

// Key returns the 64-bit key First uses for a payload: a hash of the task id
// and the message id, or of the task id and the data when messageID is empty.
// Two distinct payloads collide with probability about n²/2⁶⁵ for n tracked
// keys (≈3·10⁻⁸ at one million), which would make the second look like a
// duplicate; that is the price of a fixed 16 bytes per key.
func Key(taskID, messageID string, data []byte) uint64 {
	var h xxhash.Digest
	h.Reset()
	_, _ = h.WriteString(taskID)
	if messageID != "" {
		_, _ = h.Write([]byte{0}) // separator: "ab"+"c" must differ from "a"+"bc"
		_, _ = h.WriteString(messageID)
	} else {
		_, _ = h.Write([]byte{1}) // a content hash never equals an id key
		_, _ = h.Write(data)
	}
	return h.Sum64()
}

// First reports whether this payload is seen for the first time within the
// window, and records it. now is passed in so callers can use one clock
// reading per batch (and tests can control time).
func (d *Deduper) First(taskID, messageID string, data []byte, now time.Time) bool {
	return d.FirstKey(Key(taskID, messageID, data), now)
}

// FirstKey is First for a key already computed with Key.
func (d *Deduper) FirstKey(k uint64, now time.Time) bool {
	// The low bits pick the shard; the map hashes the full key again, so
	// entries stay spread within a shard.
	s := &d.shards[k&d.mask]
	t := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(t, d.window)
	if at, ok := s.seen[k]; ok && (d.window <= 0 || t-at < int64(d.window)) {
		return false
	}
	s.seen[k] = t
	s.order.push(entry{key: k, at: t})
	for len(s.seen) > s.max {
		s.evictOldest()
	}
	return true
}

// Len is the number of keys currently remembered (expired keys are dropped
// lazily, on the next First call to their shard).
func (d *Deduper) Len() int {
	n := 0
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		n += len(s.seen)
		s.mu.Unlock()
	}
	return n
}

type shard struct {
	mu    sync.Mutex
	max   int
	seen  map[uint64]int64 // key -> first sighting (unix ns) of its current life
	order ring             // keys in order of sighting, oldest at the front
}

type entry struct {
	key uint64
	at  int64
}

// expire drops keys whose window has passed, oldest first.
func (s *shard) expire(now int64, window time.Duration) {
	if window <= 0 {
		return
	}
	for s.order.len() > 0 {
		e := s.order.front()
		if now-e.at < int64(window) {
			return
		}
		s.order.pop()
		s.forget(e)
	}
}

func (s *shard) evictOldest() {
	for s.order.len() > 0 {
		e := s.order.pop()
		if s.forget(e) {
			return
		}
	}
}

// forget deletes e's key unless the key was sighted again after e (a newer
// entry for it is further back in the ring and owns it now).
func (s *shard) forget(e entry) bool {
	if at, ok := s.seen[e.key]; ok && at == e.at {
		delete(s.seen, e.key)
		return true
	}
	return false
}

// ring is a growable FIFO of entries; it shrinks when mostly empty so a burst
// does not pin memory forever.
type ring struct {
	buf        []entry
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) front() entry { return r.buf[r.head] }

func (r *ring) push(e entry) {
	if r.size == len(r.buf) {
		r.resize(max(16, 2*len(r.buf)))
	}
	r.buf[(r.head+r.size)%len(r.buf)] = e
	r.size++
}

func (r *ring) pop() entry {
	e := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	if len(r.buf) > 64 && r.size < len(r.buf)/4 {
		r.resize(len(r.buf) / 2)
	}
	return e
}

func (r *ring) resize(n int) {
	nb := make([]entry, n)
	for i := 0; i < r.size; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}
