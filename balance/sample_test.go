package balance

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A scan visits every endpoint once up to ScanAll; above, SampleSize
// distinct ones, each endpoint as often as any other.
func TestScanDrawsDistinctUniformly(t *testing.T) {
	for _, n := range []int{1, 3, ScanAll} {
		seen := make([]int, n)
		for s := NewScan(&PickInfo{}, n); s.More(); {
			seen[s.Next()]++
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: endpoint %d visited %d times, want 1", n, i, c)
			}
		}
	}
	for _, n := range []int{ScanAll + 1, 1000, 1001, 3 * 5 * 7 * 13 * 31, 10000} {
		scans := 40 * n / SampleSize // each endpoint drawn 40 times on average
		counts := make([]int, n)
		drawn := make([]int, 0, SampleSize)
		for range scans {
			drawn = drawn[:0]
			for s := NewScan(&PickInfo{}, n); s.More(); {
				j := s.Next()
				if j < 0 || j >= n || slices.Contains(drawn, j) {
					t.Fatalf("n=%d: index %d out of range or drawn twice in one scan", n, j)
				}
				drawn = append(drawn, j)
				counts[j]++
			}
			if len(drawn) != SampleSize {
				t.Fatalf("n=%d: %d endpoints drawn, want %d", n, len(drawn), SampleSize)
			}
		}
		// Each endpoint is drawn scans*SampleSize/n times on average;
		// a start drawn uniformly makes every endpoint's share equal, so
		// none may be missed or drawn at several times the mean.
		mean := float64(scans*SampleSize) / float64(n)
		for i, c := range counts {
			if c == 0 || float64(c) > 3*mean+10 {
				t.Fatalf("n=%d: endpoint %d drawn %d times, mean %.1f", n, i, c, mean)
			}
		}
	}
}

// What sampling changes: least_active's pick is the least loaded of all
// targets up to ScanAll, and shortest_response's the fastest; above it
// the best of a sample, which ranks within the best quarter of every
// target in at least 99 % of picks ((3/4)^16 = 1.0 % miss it; the test
// allows 1.5 %).
func TestSampledPickRank(t *testing.T) {
	for _, name := range []string{"least_active", "shortest_response"} {
		for _, n := range []int{ScanAll, 1000} {
			b := mustNew(t, name, Options{}, targetsN(n)...)
			// Distinct ranks 0..n-1 in random places: as picks in
			// flight (least_active) or mean latencies.
			eps := b.snap.Load().eps
			rankOf := map[*Endpoint]int{}
			for i, r := range rand.Perm(n) {
				rankOf[eps[i]] = r
				if name == "least_active" {
					eps[i].HoldPermits(int64(r))
				} else {
					StateOf[responseEndpoint](eps[i]).win.add(b.now(), int64(15*time.Second), int64(r+1)*int64(time.Millisecond))
				}
			}
			// Fewer picks than 16 x n, after which shortest_response
			// re-measures targets it left unpicked.
			picks := min(10000, 8*n)
			worse := 0
			for range picks {
				p := mustPick(t, b, "")
				rank := rankOf[p.Endpoint()]
				p.Cancel()
				if n <= ScanAll && rank != 0 {
					t.Fatalf("%s, n=%d: picked rank %d, want the best (0): the choice is exact up to ScanAll", name, n, rank)
				}
				if rank >= n/4 {
					worse++
				}
			}
			share := float64(worse) / float64(picks)
			t.Logf("%s, n=%d: %.2f %% of picks outside the best quarter", name, n, 100*share)
			if share > 0.015 {
				t.Fatalf("%s, n=%d: %.2f %% of picks ranked outside the best quarter, want at most 1.5 %%", name, n, 100*share)
			}
		}
	}
}

// A sampled pick that draws only full targets still finds the one with
// a free permit: every strategy, 300 targets of one permit, all but one
// held.
func TestSampledPickFindsTheLastFreePermit(t *testing.T) {
	for _, name := range Names() {
		ts := targetsN(300)
		for i := range ts {
			ts[i].MaxConcurrency = 1
		}
		b := mustNew(t, name, Options{}, ts...)
		var held []Pick
		for range len(ts) - 1 {
			held = append(held, mustPick(t, b, ""))
		}
		p := mustPick(t, b, "")
		if p.Endpoint().InFlight() != 1 {
			t.Errorf("%s: the last pick shares a target: %d in flight", name, p.Endpoint().InFlight())
		}
		if _, err := b.Pick(""); !errors.Is(err, ErrAtCapacity) {
			t.Errorf("%s: a pick with every permit taken: %v, want ErrAtCapacity", name, err)
		}
		p.Done(nil)
		for _, h := range held {
			h.Done(nil)
		}
	}
}
