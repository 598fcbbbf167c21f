package dedup

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFirst(t *testing.T) {
	type sighting struct {
		task, id, data string
		after          time.Duration // since t0
		want           bool
	}
	tests := []struct {
		name   string
		window time.Duration
		seq    []sighting
	}{
		{"same id twice in window", time.Minute, []sighting{
			{"r1", "m1", "a", 0, true},
			{"r1", "m1", "a", 59 * time.Second, false},
		}},
		{"same id, different data is still a duplicate", time.Minute, []sighting{
			{"r1", "m1", "a", 0, true},
			{"r1", "m1", "b", time.Second, false},
		}},
		{"same id after the window is new again", time.Minute, []sighting{
			{"r1", "m1", "a", 0, true},
			{"r1", "m1", "a", time.Minute, true},
			{"r1", "m1", "a", time.Minute + time.Second, false},
		}},
		{"same id in another task is distinct", time.Minute, []sighting{
			{"r1", "m1", "a", 0, true},
			{"r2", "m1", "a", 0, true},
		}},
		{"no id: content decides", time.Minute, []sighting{
			{"r1", "", "hello", 0, true},
			{"r1", "", "hello", time.Second, false},
			{"r1", "", "hello!", time.Second, true},
		}},
		{"an id equal to the content is not a content key", time.Minute, []sighting{
			{"r1", "", "x", 0, true},
			{"r1", "x", "x", 0, true},
		}},
		{"task and id boundaries do not blur", time.Minute, []sighting{
			{"ab", "c", "", 0, true},
			{"a", "bc", "", 0, true},
		}},
		{"zero window never expires by age", 0, []sighting{
			{"r1", "m1", "", 0, true},
			{"r1", "m1", "", 1000 * time.Hour, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New(tt.window, 100)
			for i, s := range tt.seq {
				got := d.First(s.task, s.id, []byte(s.data), t0.Add(s.after))
				if got != s.want {
					t.Fatalf("sighting %d (%+v): First = %v, want %v", i, s, got, s.want)
				}
			}
		})
	}
}

func TestEvictionBound(t *testing.T) {
	for _, max := range []int{1, 7, 100, shardCount * minPerShardSplit, 10_000} {
		t.Run(strconv.Itoa(max), func(t *testing.T) {
			d := New(time.Hour, max)
			for i := 0; i < 3*max+50; i++ {
				if !d.First("r", strconv.Itoa(i), nil, t0) {
					t.Fatalf("distinct id %d reported as duplicate", i)
				}
				if n := d.Len(); n > max {
					t.Fatalf("after %d inserts Len = %d > max %d", i+1, n, max)
				}
			}
			if n := d.Len(); n < max*9/10 {
				t.Fatalf("Len = %d, want close to max %d (the bound should be used, not wasted)", n, max)
			}
		})
	}
}

// With one shard, eviction is strictly oldest first: the newest max ids are
// still known, the one before them is forgotten.
func TestEvictsOldestFirst(t *testing.T) {
	const max = 50
	d := New(time.Hour, max)
	for i := 0; i < 200; i++ {
		d.First("r", strconv.Itoa(i), nil, t0.Add(time.Duration(i)))
	}
	at := t0.Add(time.Second)
	for i := 150; i < 200; i++ {
		if d.First("r", strconv.Itoa(i), nil, at) {
			t.Fatalf("recent id %d was forgotten", i)
		}
	}
	if !d.First("r", "149", nil, at) {
		t.Fatal("id 149 should have been evicted")
	}
}

func TestExpiryFreesMemory(t *testing.T) {
	d := New(time.Second, 1000)
	for i := 0; i < 500; i++ {
		d.First("r", strconv.Itoa(i), nil, t0)
	}
	d.First("r", "late", nil, t0.Add(2*time.Second))
	if n := d.Len(); n != 1 {
		t.Fatalf("Len after the window passed = %d, want 1", n)
	}
}

// k workers send the same stream concurrently: each message is first exactly
// once, whatever the interleaving.
func TestConcurrentRedundantWorkers(t *testing.T) {
	const k, tasks, msgs = 4, 20, 2000
	d := New(time.Hour, tasks*msgs)
	var firsts [tasks][msgs]atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for m := 0; m < msgs; m++ {
				for tk := 0; tk < tasks; tk++ {
					task := "room-" + strconv.Itoa(tk)
					id := ""
					data := []byte(fmt.Sprintf("%s/%d", task, m))
					if m%2 == 0 {
						id = strconv.Itoa(m)
					}
					if d.First(task, id, data, time.Now()) {
						firsts[tk][m].Add(1)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	for tk := range firsts {
		for m := range firsts[tk] {
			if n := firsts[tk][m].Load(); n != 1 {
				t.Fatalf("task %d message %d: first %d times, want exactly 1", tk, m, n)
			}
		}
	}
}

// BenchmarkFirst measures dedup throughput with k=3 redundancy: every unique
// message is offered three times, as three workers of one task would.
func BenchmarkFirst(b *testing.B) {
	for _, par := range []bool{false, true} {
		name := "serial"
		if par {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			d := New(time.Minute, 1_000_000)
			ids := make([]string, 4096)
			for i := range ids {
				ids[i] = "msg-" + strconv.Itoa(i)
			}
			rooms := make([]string, 1000)
			for i := range rooms {
				rooms[i] = "room-" + strconv.Itoa(i)
			}
			now := time.Now()
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			if par {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := seq.Add(1)
						d.First(rooms[i/3%1000], ids[(i/3)%4096], nil, now)
					}
				})
			} else {
				for i := 0; i < b.N; i++ {
					u := uint64(i / 3)
					d.First(rooms[u%1000], ids[u%4096], nil, now)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkMemoryPerID fills a Deduper with n distinct keys and reports the
// heap it holds per key.
func BenchmarkMemoryPerID(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = Key("room", strconv.Itoa(i), nil)
			}
			now := time.Now()
			var perID float64
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				d := New(time.Hour, n)
				for _, k := range keys {
					d.FirstKey(k, now)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perID = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
				runtime.KeepAlive(d)
			}
			b.ReportMetric(perID, "bytes/id")
		})
	}
}
