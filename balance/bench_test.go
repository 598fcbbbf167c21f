package balance

import (
	"fmt"
	"strconv"
	"testing"
)

// Every strategy at 3, 100 and 1000 targets, serial and parallel: one
// iteration is a pick and its Done. Weights differ (1..4) so the weighted
// paths are the ones measured. bench/ runs the peers on the same shapes.
func BenchmarkPick(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, name := range Names() {
		for _, n := range []int{3, 100, 1000} {
			ts := targetsN(n)
			for i := range ts {
				ts[i].Weight = 1 + i%4
			}
			b.Run(fmt.Sprintf("%s/n=%d/serial", name, n), func(b *testing.B) {
				bal := mustNew(b, name, Options{}, ts...)
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
				bal := mustNew(b, name, Options{}, ts...)
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
	bal := mustNew(b, "hash", Options{})
	ts := targetsN(1000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ts[0].Weight = 1 + i%2
		if err := bal.Update(ts); err != nil {
			b.Fatal(err)
		}
	}
}
