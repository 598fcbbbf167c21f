package dedup

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/core/collection"
	"github.com/zeromicro/go-zero/core/logx"

	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
)

const (
	k        = 3       // redundancy: every message is offered three times
	idSpace  = 1 << 20 // distinct message ids in the stream
	maxKeys  = 1 << 19 // entry bound (smaller than the stream: eviction runs)
	rooms    = 1000
	window   = time.Minute
	memCount = 1_000_000
)

func TestMain(m *testing.M) {
	logx.Disable() // go-zero's cache logs its hit ratio every minute
	m.Run()
}

// order runs go-zero last: its caches cannot be stopped, and their timing
// wheels keep running in the background of whatever runs after them.
var order = []string{"fulcrum", "naive", "gozero"}

// firster is one deduper under test.
type firster interface {
	first(task, id string, now time.Time) bool
}

type fulcrum struct{ d *dedup.Deduper }

func (f fulcrum) first(task, id string, now time.Time) bool { return f.d.First(task, id, nil, now) }

// gozero is go-zero's expiring LRU used as a dedup set. Get-then-Set is not
// atomic, so under concurrency two workers' copies can both pass: a real
// user would need a lock around it (not added: this measures the cache).
type gozero struct{ c *collection.Cache }

func (g gozero) first(task, id string, _ time.Time) bool {
	key := task + "\x00" + id
	if _, ok := g.c.Get(key); ok {
		return false
	}
	g.c.Set(key, struct{}{})
	return true
}

// naive is the hand-rolled version: string keys, one mutex, FIFO eviction.
type naive struct {
	mu    sync.Mutex
	seen  map[string]int64
	order []string
	max   int
}

func (n *naive) first(task, id string, now time.Time) bool {
	key := task + "\x00" + id
	t := now.UnixNano()
	n.mu.Lock()
	defer n.mu.Unlock()
	if at, ok := n.seen[key]; ok && t-at < int64(window) {
		return false
	}
	n.seen[key] = t
	n.order = append(n.order, key)
	for len(n.seen) > n.max {
		old := n.order[0]
		n.order = n.order[1:]
		delete(n.seen, old)
	}
	return true
}

func impls(b *testing.B, max int) map[string]func() firster {
	return map[string]func() firster{
		"fulcrum": func() firster { return fulcrum{dedup.New(window, max)} },
		"gozero": func() firster {
			c, err := collection.NewCache(window, collection.WithLimit(max))
			if err != nil {
				b.Fatal(err)
			}
			return gozero{c}
		},
		"naive": func() firster { return &naive{seen: map[string]int64{}, max: max} },
	}
}

var (
	ids, roomNames []string
	once           sync.Once
)

func stream() {
	once.Do(func() {
		ids = make([]string, idSpace)
		for i := range ids {
			ids[i] = "msg-" + strconv.Itoa(i)
		}
		roomNames = make([]string, rooms)
		for i := range roomNames {
			roomNames[i] = "room-" + strconv.Itoa(i)
		}
	})
}

// BenchmarkDedup: one op is one payload offered; k=3 copies of each message
// arrive back to back (serial) or from parallel goroutines (parallel).
func BenchmarkDedup(b *testing.B) {
	stream()
	for _, name := range order {
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				d := impls(b, maxKeys)[name]()
				now := time.Now()
				var seq atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				if par {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							u := seq.Add(1) / k
							d.first(roomNames[u%rooms], ids[u%idSpace], now)
						}
					})
				} else {
					for i := 0; i < b.N; i++ {
						u := uint64(i) / k
						d.first(roomNames[u%rooms], ids[u%idSpace], now)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkMemoryPerID: heap held per tracked id after 1,000,000 distinct ids.
func BenchmarkMemoryPerID(b *testing.B) {
	stream()
	for _, name := range order {
		b.Run(name, func(b *testing.B) {
			var perID float64
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				d := impls(b, memCount)[name]()
				now := time.Now()
				for j := 0; j < memCount; j++ {
					d.first(roomNames[j%rooms], ids[j], now)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perID = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / memCount
				runtime.KeepAlive(d)
			}
			b.ReportMetric(perID, "bytes/id")
		})
	}
}
