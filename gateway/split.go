package gateway

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// Weighted splits: a route that names several upstreams by weight (a
// canary at 5 %, a blue/green switch). A side with a ramp starts at 0 and
// reaches its weight linearly over the ramp (the linear warm-up targets
// get, from 0 instead of from one request's worth), from when the side
// first appeared in the route; a reload that keeps the side keeps its
// clock. With split_key a client stays on one side: its key hashes to a
// point in [0, 1), and the ramping sides own the top of that interval,
// so while a ramp grows clients only move onto the new side, never back.

type split struct {
	sides []splitSide // the ramping ones last
	key   config.HashKey
	lkey  string // the key's header name in lower case
}

type splitSide struct {
	up     *upstream
	weight float64
	ramp   time.Duration
	since  time.Time // when the side appeared: the ramp's clock
	picks  prometheus.Counter
	n      *atomic.Int64 // the side's requests, for GET /routes
}

var splitSeed = maphash.MakeSeed()

// newSplit builds a route's split, keeping the ramp clocks of old's sides
// (the same route's split before a reload) for the upstreams it keeps.
func newSplit(rc *config.Route, index int, ups map[string]*upstream, old *split, g *Gateway, now time.Time) *split {
	sp := &split{}
	if rc.SplitKey != "" {
		sp.key, _ = config.ParseHashKey(rc.SplitKey) // checked by config
		sp.lkey = strings.ToLower(sp.key.Name)
	}
	idx := strconv.Itoa(index)
	add := func(ramping bool) {
		for _, sd := range rc.Split {
			if (sd.Ramp > 0) != ramping {
				continue
			}
			s := splitSide{up: ups[sd.Upstream], weight: float64(sd.Weight), ramp: sd.Ramp.D(), since: now, n: new(atomic.Int64)}
			if old != nil {
				for _, o := range old.sides {
					if o.up.name == sd.Upstream {
						s.since, s.n = o.since, o.n
					}
				}
			}
			if g != nil && g.metrics != nil {
				s.picks = g.metrics.splitPicks.WithLabelValues(idx, sd.Upstream)
			}
			sp.sides = append(sp.sides, s)
		}
	}
	add(false)
	add(true)
	return sp
}

// share is a side's weight now.
func (s *splitSide) share(now time.Time) float64 {
	if s.ramp <= 0 {
		return s.weight
	}
	if up := now.Sub(s.since); up < s.ramp {
		return s.weight * float64(up) / float64(s.ramp)
	}
	return s.weight
}

// choose picks a side: by key when the split has one, else at random.
func (sp *split) choose(key string, keyed bool, now time.Time) *upstream {
	var ws [8]float64
	w := ws[:0]
	total := 0.0
	for i := range sp.sides {
		x := sp.sides[i].share(now)
		w = append(w, x)
		total += x
	}
	if total <= 0 {
		// Only ramping sides, at the very start of their ramps: serve
		// by their full weights rather than refuse.
		for i := range w {
			w[i] = sp.sides[i].weight
			total += w[i]
		}
	}
	u := rand.Float64()
	if keyed {
		u = float64(maphash.String(splitSeed, key)>>11) / (1 << 53)
	}
	u *= total
	for i, x := range w {
		if u < x || i == len(w)-1 {
			if sp.sides[i].picks != nil {
				sp.sides[i].picks.Inc()
			}
			sp.sides[i].n.Add(1)
			return sp.sides[i].up
		}
		u -= x
	}
	return nil
}
