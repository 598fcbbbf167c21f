package balance

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
//	for s := balance.NewScan(&info, n); s.More(); {
//		j := s.Next()
//		...
//	}
type Scan struct {
	n, i, end, off int // visits so far, visits in all, the full scan's start
	sampled        bool
	drawn          [SampleSize]int32 // the sample, drawn by NewScan
}

// NewScan starts a scan over n endpoints for the pick in (its draws come
// from the balancer's random source, Options.Rand).
func NewScan(in *PickInfo, n int) Scan {
	if n <= 0 {
		return Scan{}
	}
	if n > ScanAll {
		s := Scan{n: n, end: SampleSize, sampled: true}
		s.draw(in)
		return s
	}
	return Scan{n: n, end: n, off: in.IntN(n)}
}

// FullScan is a scan of every one of n endpoints from a random start:
// what a sampled pick falls back to when no endpoint it drew was usable.
func FullScan(in *PickInfo, n int) Scan {
	if n <= 0 {
		return Scan{}
	}
	return Scan{n: n, end: n, off: in.IntN(n)}
}

// Sampled reports whether the scan draws a sample rather than visiting
// every endpoint.
func (s *Scan) Sampled() bool { return s.sampled }

// More reports whether Next has another index.
func (s *Scan) More() bool { return s.i < s.end }

// Next returns the next index to look at.
func (s *Scan) Next() int {
	i := s.i
	s.i++
	if s.sampled {
		return int(s.drawn[i])
	}
	j := i + s.off
	if j >= s.n {
		j -= s.n
	}
	return j
}

// draw fills the sample: SampleSize distinct random indexes, a repeat
// drawn again.
func (s *Scan) draw(in *PickInfo) {
	for k := range s.drawn {
	again:
		j := int32(in.IntN(s.n))
		for _, d := range s.drawn[:k] {
			if d == j {
				goto again
			}
		}
		s.drawn[k] = j
	}
}
