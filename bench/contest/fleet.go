package main

import "slices"

// FleetSplit is how a fleet's learned limits shared each target in the
// measured phase, and how soon they settled after a change.
type FleetSplit struct {
	// Share[target][gateway] is the gateway's mean limit on the target
	// as a share of the gateways' together (1/N each when even).
	Share [][]float64 `json:"share"`
	// MaxOverMin is, over the targets, the largest ratio of one
	// gateway's mean limit to another's on the same target (1: even).
	MaxOverMin float64 `json:"max_over_min"`
	// Settle is, for each change of some target's permits in the
	// measured phase, how long the sum of the gateways' limits on it took
	// to come within settleBand of the new permits and stay there until
	// the next change; Unsettled counts the changes where it never did.
	SettleMedianS float64 `json:"settle_median_s"`
	SettleMaxS    float64 `json:"settle_max_s"`
	Settled       int     `json:"settled"`
	Unsettled     int     `json:"unsettled"`
}

// settleBand is how near the fleet's summed limit must come to a target's
// permits to count as settled: ±25 %.
const settleBand = 0.25

// fleetSplit computes FleetSplit from each gateway's timeline (nil when
// there are fewer than two).
func fleetSplit(sc *Scenario, tls []*Timeline) *FleetSplit {
	if len(tls) < 2 {
		return nil
	}
	n := len(tls[0].T)
	for _, tl := range tls {
		n = min(n, len(tl.T))
	}
	if n == 0 || len(tls[0].Targets) == 0 {
		return nil
	}
	from, to := sc.Load.Warmup.D().Seconds(), (sc.Load.Warmup.D() + sc.Load.Duration.D()).Seconds()
	targets := len(tls[0].Targets)
	fs := &FleetSplit{Share: make([][]float64, targets), MaxOverMin: 1}
	for k := range targets {
		means := make([]float64, len(tls))
		for g, tl := range tls {
			var sum float64
			var cnt int
			for i := range n {
				if t := tl.T[i]; t >= from && t < to {
					sum += float64(tl.Limit[i][k])
					cnt++
				}
			}
			if cnt > 0 {
				means[g] = sum / float64(cnt)
			}
		}
		var total float64
		for _, m := range means {
			total += m
		}
		fs.Share[k] = make([]float64, len(tls))
		for g, m := range means {
			if total > 0 {
				fs.Share[k][g] = m / total
			}
		}
		if lo, hi := slices.Min(means), slices.Max(means); lo > 0 {
			fs.MaxOverMin = max(fs.MaxOverMin, hi/lo)
		}
	}
	// Settling: the sum over gateways, sample by sample, against the
	// permits after each change of that target's stage.
	var settles []float64
	for k, p := range sc.Providers {
		for j, st := range p.Stages {
			at := st.At.D().Seconds()
			if j == 0 || at < from || at >= to || st.capacity() == 0 {
				continue // no change, outside the measured phase, or nothing to learn
			}
			until := to
			if j+1 < len(p.Stages) {
				until = min(to, p.Stages[j+1].At.D().Seconds())
			}
			want := float64(st.capacity())
			settledAt := -1.0
			for i := range n {
				t := tls[0].T[i]
				if t < at || t >= until {
					continue
				}
				var sum float64
				for _, tl := range tls {
					sum += float64(tl.Limit[i][k])
				}
				if sum >= want*(1-settleBand) && sum <= want*(1+settleBand) {
					if settledAt < 0 {
						settledAt = t
					}
				} else {
					settledAt = -1
				}
			}
			if settledAt < 0 {
				fs.Unsettled++
				continue
			}
			fs.Settled++
			settles = append(settles, settledAt-at)
		}
	}
	if len(settles) > 0 {
		slices.Sort(settles)
		fs.SettleMedianS = settles[len(settles)/2]
		fs.SettleMaxS = settles[len(settles)-1]
	}
	return fs
}
