package probe

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Name is the strategy's name in balance's registry (and in the gateway's
// strategy field).
const Name = "probe"

func init() {
	// Like balance/capacity: importing the package registers it.
	if err := balance.Register(Name, New); err != nil {
		panic(err)
	}
}

// Settings are probe's settings (the gateway's strategy_settings).
type Settings struct {
	// MaxAge is how long a report counts (default 1s): an older one says
	// little of the target now, and the target is ranked by what this
	// gateway sees of it until it reports again.
	MaxAge time.Duration `yaml:"max_age"`
	// HotQuantile is the hot-cold rule's quantile (default 0.8, in
	// (0, 1]): a candidate whose requests in flight exceed this quantile
	// of the candidates' (the floor(q x (m-1))-th of m, sorted) is hot.
	// 1 makes no target hot by its load: the lowest latency always wins.
	// Of two candidates the default marks the busier hot.
	HotQuantile float64 `yaml:"hot_quantile"`
}

// DefaultSettings returns every setting at its default.
func DefaultSettings() Settings { return Settings{MaxAge: time.Second, HotQuantile: 0.8} }

// New is the strategy's balance.Factory: it decodes set over the
// defaults (nil: every default) and checks it, a bad value reported as a
// *balance.FieldError naming its key.
func New(set balance.Settings) (balance.Strategy, error) {
	s := DefaultSettings()
	if set != nil {
		if err := set.Decode(&s); err != nil {
			return nil, err
		}
	}
	switch {
	case s.MaxAge <= 0:
		return nil, fieldErr("max_age", "%v is not a positive duration", s.MaxAge)
	case !(s.HotQuantile > 0 && s.HotQuantile <= 1):
		return nil, fieldErr("hot_quantile", "%v is outside (0, 1]", s.HotQuantile)
	}
	return strategy{maxAge: int64(s.MaxAge), q: s.HotQuantile}, nil
}

func fieldErr(field, format string, args ...any) error {
	return &balance.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

type strategy struct {
	maxAge int64
	q      float64
}

// poolSize is the reports kept per target: the latest gives the requests
// in flight, the mean of those still fresh the latency (one report's
// latency is one request's luck).
const poolSize = 4

// target is probe's state for one target, kept across snapshots.
type target struct {
	pool [poolSize]report
	next atomic.Uint32
	lat  atomic.Int64 // this gateway's EWMA of its success latency, ns: for a target that does not report
	fail balance.FailureShare
}

// report is one Load report. Its fields are written one by one without a
// lock: a pick that reads a slot while it is rewritten may mix two
// reports of the same target, which the estimate tolerates.
type report struct {
	at       atomic.Int64 // clock when it came; 0 = empty
	inflight atomic.Int64
	latency  atomic.Int64
	own      atomic.Int64 // this gateway's picks in flight there then, other than the reporting one
}

func (s strategy) Build(eps []*balance.Endpoint) balance.Picker {
	p := &picker{eps: eps, st: make([]*target, len(eps)), maxAge: s.maxAge, q: s.q}
	for i, e := range eps {
		p.st[i] = balance.StateOf[target](e)
	}
	return p
}

type picker struct {
	eps    []*balance.Endpoint
	st     []*target
	maxAge int64
	q      float64
}

// ObserveLoad adds a report to the target's pool, replacing the oldest.
func (p *picker) ObserveLoad(e *balance.Endpoint, l balance.LoadReport, now int64) {
	t := p.st[e.Index()]
	r := &t.pool[t.next.Add(1)%poolSize]
	r.inflight.Store(max(l.InFlight, 0))
	r.latency.Store(max(int64(l.Latency), 0))
	r.own.Store(e.InFlight() - 1) // the reporting pick is not in the target's count
	r.at.Store(now)
}

// Observe learns what the gateway itself sees: failures, and the
// latency of a target that sends no report.
func (p *picker) Observe(e *balance.Endpoint, o balance.Outcome) {
	if o.Class == balance.ClientGone {
		return
	}
	t := p.st[e.Index()]
	t.fail.Observe(o.Class != balance.Succeeded, o.Now, o.Sent())
	if lat := int64(o.Latency); o.Class == balance.Succeeded && lat > 0 {
		if old := t.lat.Load(); old == 0 {
			t.lat.Store(lat)
		} else {
			t.lat.Store(old + (lat-old)/8)
		}
	}
}

// estimate is a target's requests in flight and latency (ns; 0 =
// unknown) now: from its fresh reports, the requests in flight moved by
// this gateway's picks sent or ended there since the latest; without
// one, this gateway's own picks in flight and its own latency mean.
func (p *picker) estimate(j int, now int64) (rif, lat int64) {
	t, e := p.st[j], p.eps[j]
	var newest int64
	var sum, n int64
	for i := range t.pool {
		r := &t.pool[i]
		at := r.at.Load()
		if at == 0 || now-at > p.maxAge {
			continue
		}
		sum += r.latency.Load()
		n++
		if at >= newest {
			newest = at
			rif = r.inflight.Load() + e.InFlight() - r.own.Load()
		}
	}
	if n == 0 {
		return e.InFlight(), t.lat.Load()
	}
	return max(rif, 0), sum / n
}

// cand is one candidate of a pick.
type cand struct {
	j    int
	rif  int64
	cost float64 // latency per success and per unit of weight
	hot  bool
}

// Pick applies Prequal's hot-cold rule to the candidates: every usable
// target up to balance.ScanAll, else a sample (balance.Scan). A
// candidate is hot when its requests in flight exceed the HotQuantile
// quantile of the candidates', or when fewer than half its outcomes
// succeed; the cold candidate of lowest cost wins (latency divided by
// the share of successes and by the weight; an unknown latency costs 0,
// so a target never measured is tried), fewer requests in flight
// breaking a tie. When every candidate is hot, the fewest requests in
// flight per success wins.
func (p *picker) Pick(info balance.PickInfo) *balance.Endpoint {
	n := len(p.eps)
	if n == 0 {
		return nil
	}
	now := info.Now()
	var cs [balance.ScanAll]cand
	var rifs [balance.ScanAll]int64
	m := 0
	for sc := balance.NewScan(&info, n); m == 0; sc = balance.FullScan(&info, n) {
		sampled := sc.Sampled()
		for sc.More() && m < len(cs) {
			j := sc.Next()
			e := p.eps[j]
			if !info.Usable(e) {
				continue
			}
			rif, lat := p.estimate(j, now)
			ok := 1.0
			if f := &p.st[j].fail; f.Failing() {
				ok = f.OK(now)
			}
			cs[m] = cand{j: j, rif: rif, cost: float64(lat) / (ok * max(info.Weight(e), 1e-9)), hot: ok < 0.5}
			rifs[m] = rif
			m++
		}
		if !sampled {
			break
		}
	}
	if m == 0 {
		return nil
	}
	r := rifs[:m]
	slices.Sort(r)
	thr := r[int(p.q*float64(m-1))]
	best := -1
	for i := range cs[:m] {
		c := &cs[i]
		if c.hot || c.rif > thr {
			continue
		}
		if best < 0 || c.cost < cs[best].cost || (c.cost == cs[best].cost && c.rif < cs[best].rif) {
			best = i
		}
	}
	if best < 0 {
		// Every candidate hot: the least loaded per success.
		bestLoad := math.Inf(1)
		for i := range cs[:m] {
			ok := 1.0
			if f := &p.st[cs[i].j].fail; f.Failing() {
				ok = f.OK(now)
			}
			if l := float64(cs[i].rif+1) / ok; l < bestLoad {
				best, bestLoad = i, l
			}
		}
	}
	return p.eps[cs[best].j]
}
