package balance

import "math/rand/v2"

// Picks over many targets look at a sample, not at every target: the
// power of k choices, as Envoy's least request samples choice_count
// hosts. Up to ScanAll usable endpoints a pick scans them all and its
// choice is exact; above, it looks at SampleSize endpoints drawn at
// random without replacement, so a pick costs the same at 1,000 targets
// as at 64, and the chosen target ranks, with probability at least
// 1-(1-q)^SampleSize, within the best fraction q of them (q = 1/4:
// 99 %; TestSampledPickRank checks it).
//
// Each endpoint is drawn with the same chance (SampleSize/n) and none
// twice, which keeps weighted tie-breaks fair: an index already drawn is
// drawn again (16 draws among more than 64 rarely repeat). A random start
// and a stride prime to n, taken from a few fixed strides, drew the same
// way, but picks then shared most of their sample (a start one stride on
// shares 15 of 16) and missed the best quarter in up to 1.4 % of picks
// instead of 1.0 %; a stride drawn from all those prime to n cost more
// (Euclid's algorithm, tried 2.5 times on average) than this.
const (
	ScanAll    = 64
	SampleSize = 16
)

// Scan yields the endpoint indexes one pick looks at: every index from
// a random start when n <= ScanAll, else SampleSize random ones. It is
// a value, so a pick allocates nothing:
//
//	for s := balance.NewScan(n); s.More(); {
//		j := s.Next()
//		...
//	}
type Scan struct {
	n, left, at int
	sampled     bool
	drawn       [SampleSize]int32 // the sample so far: a repeat is drawn again
}

// NewScan starts a scan over n endpoints.
func NewScan(n int) Scan {
	if n <= 0 {
		return Scan{}
	}
	if n > ScanAll {
		return Scan{n: n, left: SampleSize, sampled: true}
	}
	return Scan{n: n, left: n, at: rand.IntN(n)}
}

// FullScan is a scan of every one of n endpoints from a random start:
// what a sampled pick falls back to when no endpoint it drew was usable.
func FullScan(n int) Scan {
	if n <= 0 {
		return Scan{}
	}
	return Scan{n: n, left: n, at: rand.IntN(n)}
}

// Sampled reports whether the scan draws a sample rather than visiting
// every endpoint.
func (s *Scan) Sampled() bool { return s.sampled }

// More reports whether Next has another index.
func (s *Scan) More() bool { return s.left > 0 }

// Next returns the next index to look at.
func (s *Scan) Next() int {
	s.left--
	if s.sampled {
		k := SampleSize - 1 - s.left // draws made before this one
	draw:
		for {
			j := int32(rand.IntN(s.n))
			for _, d := range s.drawn[:k] {
				if d == j {
					continue draw
				}
			}
			s.drawn[k] = j
			return int(j)
		}
	}
	j := s.at
	if s.at++; s.at == s.n {
		s.at = 0
	}
	return j
}
