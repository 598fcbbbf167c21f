package balance_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/fulcrum-lb/fulcrum/balance"
	_ "github.com/fulcrum-lb/fulcrum/balance/capacity" // registers capacity, measured with the rest
	_ "github.com/fulcrum-lb/fulcrum/balance/probe"    // registers probe, measured with the rest
)

// Every strategy at 3, 100, 1000 and 10000 targets, serial and parallel: one
// iteration is a pick and its Done. Weights differ (1..4) so the weighted
// paths are the ones measured. bench/ runs the peers on the same shapes.
func BenchmarkPick(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, name := range balance.Names() {
		for _, n := range []int{3, 100, 1000, 10000} {
			ts := benchTargets(n)
			for i := range ts {
				ts[i].Weight = 1 + i%4
			}
			b.Run(fmt.Sprintf("%s/n=%d/serial", name, n), func(b *testing.B) {
				bal := benchNew(b, name, balance.Options{}, ts...)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p, err := bal.Pick(keys[i&1023])
					if err != nil {
						b.Fatal(err)
					}
					p.Done(nil)
					i++
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/parallel", name, n), func(b *testing.B) {
				bal := benchNew(b, name, balance.Options{}, ts...)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						p, err := bal.Pick(keys[i&1023])
						if err != nil {
							b.Fatal(err)
						}
						p.Done(nil)
						i++
					}
				})
			})
		}
	}
}

// Building a snapshot (a membership change) for the hash ring, the costliest.
func BenchmarkUpdateHash1000(b *testing.B) {
	bal := benchNew(b, "hash", balance.Options{})
	ts := benchTargets(1000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ts[0].Weight = 1 + i%2
		if err := bal.Update(ts); err != nil {
			b.Fatal(err)
		}
	}
}

func benchNew(b *testing.B, name string, o balance.Options, targets ...balance.Target) *balance.Balancer {
	b.Helper()
	bal, err := balance.New(name, o)
	if err != nil {
		b.Fatalf("New(%q): %v", name, err)
	}
	if err := bal.Update(targets); err != nil {
		b.Fatalf("Update: %v", err)
	}
	return bal
}

// benchTargets makes n targets of weight 1, as the package's own tests do.
func benchTargets(n int) []balance.Target {
	ts := make([]balance.Target, n)
	for i := range ts {
		ts[i] = balance.Target{Addr: fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256), Weight: 1}
	}
	return ts
}
