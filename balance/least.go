package balance

import (
	"sync/atomic"
	"time"
)

// least_active: the fewest in-flight picks wins; ties are broken by
// weighted random (Dubbo's LeastActiveLoadBalance). Above ScanAll targets
// among a sample of SampleSize (see Scan), so a pick costs O(1).
type leastActiveStrategy struct{}

func newLeastActive(s Settings) (Strategy, error) {
	if err := noSettings(s); err != nil {
		return nil, err
	}
	return leastActiveStrategy{}, nil
}

func (leastActiveStrategy) Build(eps []*Endpoint) Picker {
	return &scorePicker{eps: eps, score: func(i int, _ int64) int64 { return eps[i].InFlight() }}
}

// shortest_response: the estimate of Dubbo's ShortestResponseLoadBalance,
// mean success latency over a sliding window x in-flight, lowest wins,
// weighted random among ties. The
// estimate uses in-flight+1 (as Dubbo does), so that an idle slow target
// does not tie with an idle fast one. A target with no sample in the window
// estimates 0 and is tried. The estimate is divided by the target's share
// of successes (FailureShare), and one with failures and no success in
// the window ranks last: a target answering fast errors is not fast. A
// target not picked in the last 16 x n picks is picked once, so one slow
// sample cannot starve a target that has since become fast (without it,
// the window would keep it out for up to a whole window while its fast
// peers took everything).
type shortestResponseStrategy struct{ half int64 }

// ShortestResponseSettings are shortest_response's settings.
type ShortestResponseSettings struct {
	// Window is the sliding window of success latencies (default 30s).
	Window time.Duration `yaml:"window"`
}

func newShortestResponse(set Settings) (Strategy, error) {
	var s ShortestResponseSettings
	if err := decodeSettings(set, &s); err != nil {
		return nil, err
	}
	if s.Window == 0 {
		s.Window = 30 * time.Second
	}
	if s.Window < 2 {
		return nil, settingErr("window", "%v is not a positive duration", s.Window)
	}
	return shortestResponseStrategy{half: int64(s.Window / 2)}, nil
}

// responseEndpoint is shortest_response's state for one target, kept
// across snapshots.
type responseEndpoint struct {
	win      window       // success latencies
	lastPick atomic.Int64 // the picker's pick count at this target's last pick
	fail     FailureShare // divides the estimate: fast failures are not fast service
}

// failedOnly is the score of a target with failures and no success in
// the window: above any estimate, so it is picked only when nothing else
// is usable, or to re-measure it.
const failedOnly = int64(1) << 62

func (s shortestResponseStrategy) Build(eps []*Endpoint) Picker {
	st := make([]*responseEndpoint, len(eps))
	last := make([]*atomic.Int64, len(eps))
	for i, e := range eps {
		st[i] = StateOf[responseEndpoint](e)
		last[i] = &st[i].lastPick
	}
	half := s.half
	return &responsePicker{st: st, half: half, scorePicker: scorePicker{eps: eps, needNow: true, last: last, forceAfter: int64(16 * max(len(eps), 1)),
		score: func(i int, now int64) int64 {
			avg := st[i].win.avg(now, half)
			f := &st[i].fail
			if avg < 0 {
				if f.Failing() {
					return failedOnly // failures and no success: last
				}
				return 0
			}
			sc := avg * (eps[i].InFlight() + 1)
			if f.Failing() {
				sc = int64(float64(sc) / f.OK(now))
			}
			return sc
		}}}
}

type responsePicker struct {
	scorePicker
	st   []*responseEndpoint // by endpoint index
	half int64
}

// Observe adds a success's latency to its target's window, and every
// outcome but a client's leaving to its failure share.
func (p *responsePicker) Observe(e *Endpoint, o Outcome) {
	if o.Class != ClientGone {
		p.st[e.Index()].fail.Observe(o.Class != Succeeded, o.Now, o.Sent())
	}
	if o.Err == nil && o.Latency > 0 {
		p.st[e.Index()].win.add(o.Now, p.half, int64(o.Latency))
	}
}

// scorePicker picks the usable endpoint of lowest score, weighted random
// among ties, in one pass (weighted reservoir sampling) over every
// endpoint, or over a sample of them above ScanAll (Scan).
type scorePicker struct {
	eps     []*Endpoint
	needNow bool
	score   func(i int, now int64) int64

	// forceAfter > 0 re-measures a target left unpicked that many picks;
	// last holds each endpoint's pick count at its last pick.
	forceAfter int64
	last       []*atomic.Int64
	picks      atomic.Int64
}

func (p *scorePicker) Pick(info PickInfo) *Endpoint {
	var now int64
	if p.needNow {
		now = info.Now()
	}
	var n int64
	if p.forceAfter > 0 {
		n = p.picks.Add(1)
	}
	sc := Scan{n: len(p.eps), end: len(p.eps)} // every endpoint, in order: the reservoir breaks ties at random
	if len(p.eps) > ScanAll {
		sc = NewScan(&info, len(p.eps))
	}
	best := p.scan(&info, &sc, now, n)
	if best == -1 && sc.Sampled() {
		// No endpoint drawn was usable (most are full or excluded):
		// look at them all rather than fail while some have room.
		sc = FullScan(&info, len(p.eps))
		best = p.scan(&info, &sc, now, n)
	}
	if best < 0 {
		return nil
	}
	if n != 0 && p.last[best].Load() != n {
		p.last[best].Store(n)
	}
	return p.eps[best]
}

// scan returns the index of the lowest-scored usable endpoint the scan
// visits (weighted random among ties), or -1 when none is usable.
func (p *scorePicker) scan(info *PickInfo, s *Scan, now, n int64) int {
	best := -1
	var bestScore int64
	var tieWeight float64
	for s.More() {
		i := s.Next()
		e := p.eps[i]
		if !info.Usable(e) {
			continue
		}
		if n != 0 {
			last := p.last[i].Load()
			if last == 0 {
				// First sight: start counting from here.
				p.last[i].CompareAndSwap(0, n)
			} else if n-last > p.forceAfter {
				// Left unpicked too long: re-measure it (sampled, it is
				// found within about n/SampleSize picks of falling due).
				return i
			}
		}
		sc := p.score(i, now)
		w := info.Weight(e)
		switch {
		case best < 0 || sc < bestScore:
			best, bestScore, tieWeight = i, sc, w
		case sc == bestScore:
			tieWeight += w
			if info.Float64()*tieWeight < w {
				best = i
			}
		}
	}
	return best
}

// window is a two-bucket sliding window of success latencies: the current
// bucket and the previous one, each half the window long, so an old slow
// spell is forgotten after at most one window.
type window struct {
	epoch [2]atomic.Int64 // bucket number each slot holds
	sum   [2]atomic.Int64
	count [2]atomic.Int64
}

func (w *window) add(now, half, lat int64) {
	b := now / half
	i := b & 1
	if e := w.epoch[i].Load(); e != b {
		// Slot holds an old bucket: claim and reset it. A racing add may
		// be lost; the statistic tolerates that.
		if w.epoch[i].CompareAndSwap(e, b) {
			w.sum[i].Store(0)
			w.count[i].Store(0)
		}
	}
	w.sum[i].Add(lat)
	w.count[i].Add(1)
}

// avg returns the mean over the current and previous bucket, or -1 when
// there is no sample.
func (w *window) avg(now, half int64) int64 {
	b := now / half
	var sum, n int64
	for i := range 2 {
		if e := w.epoch[i].Load(); e == b || e == b-1 {
			sum += w.sum[i].Load()
			n += w.count[i].Load()
		}
	}
	if n == 0 {
		return -1
	}
	return sum / n
}
