package balance

import (
	"math"
	"sync/atomic"
	"time"
)

// p2c: power of two choices on a peak-EWMA cost (Finagle, Linkerd): two
// distinct targets drawn at random, the lower latency x (in-flight+1) wins.
// The EWMA jumps up to any slower sample at once (peak) and decays towards
// faster ones with time constant Decay. A target not picked for a whole
// 64 x n picks is picked once, so a target that was slow gets re-measured.
// A failure (an error, a 500, a 503) only ever raises the peak, and the
// cost is divided by the target's share of successes (FailureShare), so a
// target answering fast errors does not look fast.
type p2cStrategy struct{ tau int64 }

// P2CSettings are p2c's settings.
type P2CSettings struct {
	// Decay is the peak EWMA's time constant (default 10s).
	Decay time.Duration `yaml:"decay"`
}

// p2cEndpoint is p2c's state for one target, kept across snapshots. It
// fills a cache line: picks on different targets write their own states,
// and small neighbours would share a line.
type p2cEndpoint struct {
	peak     atomic.Int64 // peak EWMA of latency, ns
	peakAt   atomic.Int64 // clock of the last peak update
	lastPick atomic.Int64 // the picker's pick count at this target's last pick
	fail     FailureShare // divides the cost: fast failures are not fast service
	_        [24]byte
}

func newP2C(set Settings) (Strategy, error) {
	var s P2CSettings
	if err := decodeSettings(set, &s); err != nil {
		return nil, err
	}
	if s.Decay == 0 {
		s.Decay = 10 * time.Second
	}
	if s.Decay < 0 {
		return nil, settingErr("decay", "%v is negative", s.Decay)
	}
	return p2cStrategy{tau: int64(s.Decay)}, nil
}

func (s p2cStrategy) Build(eps []*Endpoint) Picker {
	p := &p2cPicker{eps: eps, st: make([]*p2cEndpoint, len(eps)), tau: s.tau, forceAfter: int64(64 * max(len(eps), 1))}
	for i, e := range eps {
		p.st[i] = StateOf[p2cEndpoint](e)
	}
	for _, e := range eps {
		if e.Weight() != eps[0].Weight() {
			p.alias = newAlias(eps)
			break
		}
	}
	return p
}

// The two candidates are drawn by weight (an alias table when weights
// differ), so weight and warm-up shape the choice while cost decides it.
type p2cPicker struct {
	eps        []*Endpoint
	st         []*p2cEndpoint // by endpoint index
	tau        int64
	alias      alias
	picks      atomic.Int64
	forceAfter int64
}

func (p *p2cPicker) draw(info *PickInfo) int {
	switch {
	case info.Warming():
		if e := weightedAmong(info, p.eps); e != nil {
			return e.index
		}
	case p.alias.prob != nil:
		return p.alias.pick(info)
	}
	return info.IntN(len(p.eps))
}

func cost(e *Endpoint, st *p2cEndpoint, info *PickInfo) float64 {
	c := float64(st.peak.Load()+1) * float64(e.InFlight()+1)
	if st.fail.Failing() {
		c /= st.fail.OK(info.Now()) // the clock only for a target that failed
	}
	return c
}

func (p *p2cPicker) Pick(info PickInfo) *Endpoint {
	n := len(p.eps)
	switch n {
	case 0:
		return nil
	case 1:
		if info.Usable(p.eps[0]) {
			return p.eps[0]
		}
		return nil
	}
	i := p.draw(&info)
	j := p.draw(&info)
	for k := 0; j == i && k < 3; k++ {
		j = p.draw(&info)
	}
	if j == i {
		if j = info.IntN(n - 1); j >= i {
			j++
		}
	}
	a, b := p.eps[i], p.eps[j]
	ua, ub := info.Usable(a), info.Usable(b)
	switch {
	case ua && ub:
		sa, sb := p.st[i], p.st[j]
		if cost(a, sa, &info) > cost(b, sb, &info) {
			a, b, sa, sb = b, a, sb, sa
		}
		// Re-measure the loser b if it has not been picked in the last
		// forceAfter picks (a count, not the clock: reading the clock
		// costs as much as the rest of the pick).
		n := p.picks.Add(1)
		if n-sb.lastPick.Load() > p.forceAfter {
			a, sa = b, sb
		}
		if sa.lastPick.Load() != n {
			sa.lastPick.Store(n)
		}
		return a
	case ua:
		return a
	case ub:
		return b
	}
	return weightedAmong(&info, p.eps)
}

func (p *p2cPicker) Observe(e *Endpoint, o Outcome) {
	if o.Class == ClientGone {
		return
	}
	st := p.st[e.Index()]
	failed := o.Class != Succeeded
	st.fail.Observe(failed, o.Now, o.Sent())
	lat := int64(o.Latency)
	if lat <= 0 {
		return
	}
	prev, at := st.peak.Load(), st.peakAt.Load()
	if lat > prev {
		st.peak.Store(lat)
	} else if failed {
		return // a fast failure says nothing of how fast it serves
	} else {
		w := math.Exp(-float64(o.Now-at) / float64(p.tau))
		st.peak.Store(int64(float64(prev)*w + float64(lat)*(1-w)))
	}
	st.peakAt.Store(o.Now)
}
