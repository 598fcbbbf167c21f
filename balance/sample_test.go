package balance

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A scan visits every endpoint once up to ScanAll; above, SampleSize
// distinct ones, each endpoint as often as any other.
func TestScanDrawsDistinctUniformly(t *testing.T) {
	for _, n := range []int{1, 3, ScanAll} {
		seen := make([]int, n)
		for s := NewScan(n); s.More(); {
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
			for s := NewScan(n); s.More(); {
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
// targets up to ScanAll, and above it the least loaded of a sample, which
// ranks within the best quarter of every target in at least 99 % of
// picks ((3/4)^16 = 1.0 % miss it; the test allows 1.5 %).
func TestSampledPickRank(t *testing.T) {
	for _, n := range []int{ScanAll, 1000} {
		b := mustNew(t, "least_active", Options{}, targetsN(n)...)
		// Distinct loads 0..n-1 in random places: a target's in-flight
		// is its rank.
		eps := b.snap.Load().eps
		for i, load := range rand.Perm(n) {
			eps[i].HoldPermits(int64(load))
		}
		const picks = 20000
		worse := 0
		for range picks {
			p := mustPick(t, b, "")
			rank := p.Endpoint().InFlight() - 1 // its own pick is in flight
			p.Cancel()
			if n <= ScanAll && rank != 0 {
				t.Fatalf("n=%d: picked rank %d, want the least loaded (0): the choice is exact up to ScanAll", n, rank)
			}
			if rank >= int64(n/4) {
				worse++
			}
		}
		if share := float64(worse) / picks; share > 0.015 {
			t.Fatalf("n=%d: %.2f %% of picks ranked outside the best quarter, want at most 1.5 %%", n, 100*share)
		}
	}
}
