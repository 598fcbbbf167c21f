package capacity

import (
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// retryProbe serves a retry (a pick that excludes the targets that just
// refused it) that finds every other target at its learned limit: it
// probes the one with the most learned capacity per latency, one permit
// over its limit. A caller that does not wait (the gateway's retry on an
// upstream without a queue) would answer the client with the refusal, and
// one that waits would queue behind every other waiter; probing instead
// turns it into a
// success when that target has permits we have not learned yet (a stage
// that just grew them, a provider that swapped roles), and costs nothing
// more when it has not: the probe's rejection takes the permit back off
// (reject). Targets with configured or parked limits, targets that
// refused within probe_interval latencies, targets retry-probed within
// the last latency and targets Pick holds back for failing are not
// probed.
func (p *picker) retryProbe(info balance.PickInfo) *balance.Endpoint {
	var best *balance.Endpoint
	var bc *capState
	bestRate := -1.0
	now := info.Now()
	for j, e := range p.eps {
		parked := p.st[j].parkUntil.Load() != 0
		if info.Excluded(e) {
			if parked {
				// Refused by a target that is down: that says nothing
				// of the others' permits, and the retry waits for one
				// (a parked target's probes come every few refusal
				// round trips, and each refused probe's retry sent
				// over a full target's limit was a client error).
				return nil
			}
			continue
		}
		if e.MaxConcurrency() != 0 || parked || now < p.st[j].quietTill.Load() {
			continue
		}
		if p.st[j].fail.OK(now) < failHeldBack {
			continue // held back by Pick: failing most of what it gets, not short of permits
		}
		lat := max(p.st[j].lat.Load(), int64(time.Millisecond))
		if rate := float64(e.Limit()) * info.Weight(e) / float64(lat); rate > bestRate {
			best, bc, bestRate = e, p.st[j], rate
		}
	}
	if best == nil {
		return nil
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.limit == 0 || bc.held != 0 || bc.limit >= p.cfg.MaxLimit || now < bc.quietTill.Load() {
		return nil
	}
	// One retry probe per target per latency: its answer (a refusal is
	// back in far less) decides the next. Without this, a burst of
	// refusals elsewhere (a provider going down) sent a burst of retries
	// that each raised the limit by one before the first probe's answer,
	// and their refusals then halved a limit that had been exact.
	bc.quietTill.Store(now + max(bc.lat.Load(), int64(time.Millisecond)))
	bc.limit++
	bc.raised = 1
	bc.peak = max(bc.peak, bc.limit)
	bc.publish(best)
	return best
}
