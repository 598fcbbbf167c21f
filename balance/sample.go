package balance

import "math/rand/v2"

// Picks over many targets look at a sample, not at every target: the
// power of k choices, as Envoy's least request samples choice_count
// hosts. Up to ScanAll usable endpoints a pick scans them all and its
// choice is exact; above, it looks at SampleSize endpoints drawn at
// random (without replacement), so a pick costs the same at 1,000 targets
// as at 64, and the chosen target ranks, with probability at least
// 1-(1-q)^SampleSize, within the best fraction q of them (q = 1/4:
// 99 %; TestSampledPickRank checks it).
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
	n, left, at, step int
	sampled           bool
}

// NewScan starts a scan over n endpoints.
func NewScan(n int) Scan {
	if n <= 0 {
		return Scan{}
	}
	if n > ScanAll {
		step := 1 + rand.IntN(n-1)
		for gcd(step, n) != 1 {
			step = 1 + rand.IntN(n-1)
		}
		return Scan{n: n, left: SampleSize, at: rand.IntN(n), step: step, sampled: true}
	}
	return Scan{n: n, left: n, at: rand.IntN(n), step: 1}
}

// FullScan is a scan of every one of n endpoints from a random start:
// what a sampled pick falls back to when no endpoint it drew was usable.
func FullScan(n int) Scan {
	if n <= 0 {
		return Scan{}
	}
	return Scan{n: n, left: n, at: rand.IntN(n), step: 1}
}

// Sampled reports whether the scan draws a sample rather than visiting
// every endpoint.
func (s *Scan) Sampled() bool { return s.sampled }

// More reports whether Next has another index.
func (s *Scan) More() bool { return s.left > 0 }

// Next returns the next index to look at.
func (s *Scan) Next() int {
	s.left--
	j := s.at
	if s.at += s.step; s.at >= s.n {
		s.at -= s.n
	}
	return j
}
