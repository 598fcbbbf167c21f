package balancebench

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/dgryski/go-maglev"
	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/go-kratos/kratos/v2/selector"
	"github.com/go-kratos/kratos/v2/selector/p2c"
	"github.com/serialx/hashring"
	"github.com/smallnest/weighted"
	"github.com/zeromicro/go-zero/core/hash"
	stathat "stathat.com/c/consistent"
)

// Naming: Benchmark<Group>/n=<targets>/<serial|parallel>/<impl>. The impl
// "ours" is package balance; cmd/ratios divides it by every other impl of
// the same shape.

var sizes = []int{3, 100, 1000}

// keys are the request keys the hash shapes cycle through.
var keys = func() []string {
	ks := make([]string, 1024)
	for i := range ks {
		ks[i] = "user-" + strconv.Itoa(i)
	}
	return ks
}()

func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1)
	}
	return out
}

// weight gives targets different weights (1..4) so weighted paths run.
func weight(i int) int { return 1 + i%4 }

func ours(b *testing.B, strategy string, n int, weighted bool) *balance.Balancer {
	b.Helper()
	bal, err := balance.New(strategy, balance.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ts := make([]balance.Target, n)
	for i, a := range addrs(n) {
		ts[i] = balance.Target{Addr: a, Weight: 1}
		if weighted {
			ts[i].Weight = weight(i)
		}
	}
	if err := bal.Update(ts); err != nil {
		b.Fatal(err)
	}
	return bal
}

// picker is one implementation under test: pick handles the i-th request.
type picker struct {
	name string
	make func(b *testing.B, n int) (pick func(i int))
}

// run benchmarks every picker on every shape of a group. Each
// implementation is built once per size and shared by the serial and
// parallel shapes: the benchmark framework calls a benchmark function
// several times, and some peers take seconds to build at 1000 targets.
func run(b *testing.B, pickers []picker) {
	for _, n := range sizes {
		built := make(map[string]func(int), len(pickers))
		get := func(b *testing.B, pk picker) func(int) {
			if f, ok := built[pk.name]; ok {
				return f
			}
			f := pk.make(b, n)
			built[pk.name] = f
			return f
		}
		for _, pk := range pickers {
			b.Run(fmt.Sprintf("n=%d/serial/%s", n, pk.name), func(b *testing.B) {
				pick := get(b, pk)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					pick(i)
					i++
				}
			})
		}
		for _, pk := range pickers {
			b.Run(fmt.Sprintf("n=%d/parallel/%s", n, pk.name), func(b *testing.B) {
				pick := get(b, pk)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						pick(i)
						i++
					}
				})
			})
		}
	}
}

// oursPicker picks with strategy and reports the outcome, as a caller does.
func oursPicker(strategy string, weighted bool) picker {
	return picker{"ours", func(b *testing.B, n int) func(int) {
		bal := ours(b, strategy, n, weighted)
		return func(i int) {
			p, err := bal.Pick(keys[i&1023])
			if err != nil {
				b.Fatal(err)
			}
			p.Done(nil)
		}
	}}
}

// BenchmarkRoundRobin: smooth weighted round robin, weights 1..4.
// smallnest/weighted.SW is not safe for concurrent use, so it is guarded by
// a mutex, as a caller sharing it must.
func BenchmarkRoundRobin(b *testing.B) {
	run(b, []picker{
		oursPicker("round_robin", true),
		{"smallnest", func(b *testing.B, n int) func(int) {
			var mu sync.Mutex
			sw := &weighted.SW{}
			for i, a := range addrs(n) {
				sw.Add(a, weight(i))
			}
			return func(int) {
				mu.Lock()
				_ = sw.Next()
				mu.Unlock()
			}
		}},
	})
}

// BenchmarkHash: consistent hashing of a string key, equal weights. Every
// implementation hashes the key itself (maglev takes a uint64: hash/maphash).
func BenchmarkHash(b *testing.B) {
	run(b, []picker{
		oursPicker("hash", false),
		{"buraksezer", func(b *testing.B, n int) func(int) {
			c := newBuraksezer(n)
			return func(i int) { _ = c.LocateKey([]byte(keys[i&1023])) }
		}},
		{"stathat", func(b *testing.B, n int) func(int) {
			c := stathat.New()
			for _, a := range addrs(n) {
				c.Add(a)
			}
			return func(i int) {
				if _, err := c.Get(keys[i&1023]); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"serialx", func(b *testing.B, n int) func(int) {
			r := hashring.New(addrs(n))
			return func(i int) { _, _ = r.GetNode(keys[i&1023]) }
		}},
		{"gozero", func(b *testing.B, n int) func(int) {
			h := hash.NewConsistentHash()
			for _, a := range addrs(n) {
				h.Add(a)
			}
			return func(i int) { _, _ = h.Get(keys[i&1023]) }
		}},
		{"maglev", func(b *testing.B, n int) func(int) {
			t := maglev.New(addrs(n), maglev.SmallM)
			return func(i int) { _ = t.Lookup(maphash.String(seed, keys[i&1023])) }
		}},
	})
}

// BenchmarkBoundedHash: consistent hashing with bounded loads. buraksezer
// bounds partitions per member at build time; ours bounds in-flight picks
// at pick time (and so also counts them in Done).
func BenchmarkBoundedHash(b *testing.B) {
	run(b, []picker{
		oursPicker("bounded_hash", false),
		{"buraksezer", func(b *testing.B, n int) func(int) {
			c := newBuraksezer(n)
			return func(i int) { _ = c.LocateKey([]byte(keys[i&1023])) }
		}},
	})
}

// BenchmarkP2C: power of two choices with done callbacks (kratos: EWMA
// nodes via its default selector).
func BenchmarkP2C(b *testing.B) {
	run(b, []picker{
		oursPicker("p2c", false),
		{"kratos", func(b *testing.B, n int) func(int) {
			sel := p2c.New()
			nodes := make([]selector.Node, n)
			for i, a := range addrs(n) {
				nodes[i] = selector.NewNode("http", a, nil)
			}
			sel.Apply(nodes)
			ctx := context.Background()
			return func(int) {
				_, done, err := sel.Select(ctx)
				if err != nil {
					b.Fatal(err)
				}
				done(ctx, selector.DoneInfo{})
			}
		}},
	})
}

type member string

func (m member) String() string { return string(m) }

// seed keys the stdlib hash the peers without their own hash use.
var seed = maphash.MakeSeed()

type fastHasher struct{}

func (fastHasher) Sum64(data []byte) uint64 { return maphash.Bytes(seed, data) }

func newBuraksezer(n int) *consistent.Consistent {
	ms := make([]consistent.Member, n)
	for i, a := range addrs(n) {
		ms[i] = member(a)
	}
	// The project's README configuration, with enough partitions for 1000
	// members.
	return consistent.New(ms, consistent.Config{
		PartitionCount:    7919,
		ReplicationFactor: 20,
		Load:              1.25,
		Hasher:            fastHasher{},
	})
}
