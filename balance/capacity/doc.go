// Package capacity is the balance strategy "capacity": backpressure as in
// the 2019 Tianchi adaptive load-balancing contest. Each target's permits
// are its max concurrency; a pick takes a permit and its outcome returns
// it. The pick goes to the fastest target
// (lowest mean success latency over weight) that has a free permit,
// latencies within a sixteenth counting as a tie that the most free
// permits break: in a closed loop each completion brings the next
// request, so a permit on a faster target serves more of them, and
// ranking by free permits per latency instead spread light load over
// slow targets by their size. A busy target whose time per request by
// Little's law (in-flight over success rate, a window of 32 successes)
// is above 1.5 times its mean or below two thirds of it is ranked by that
// instead, for a few latencies: the mean of finished requests lags a
// change by hundreds of milliseconds (little). Neither says what a pick
// sent now would cost at a target that still drains picks sent before a
// change: those that come back last are the long ones (the requests in
// flight at a given moment average twice the mean), so a provider that
// turned fast looks slower the more it drains. Such a target, with room
// and passed over for a quarter of its mean, gets one pick ranked first
// (measure), and a short answer ranks it as a stale target's does. When
// no permit is free, Wait blocks until one returns.
//
// A target without MaxConcurrency gets a learned limit instead, because a
// balancer often cannot read its upstreams' settings (the contest forbade
// it). The learner has two regimes, per target:
//
//   - a target that rejects (an outcome whose error is a rejection, see
//     balance.IsRejection, in the last 30s) says itself when it is full, and the
//     limit tracks its permits exactly. A rejection proves the target had
//     fewer permits than our picks in flight, so it takes one permit off
//     the limit, and cuts it to our other picks in flight when those are
//     fewer (never below half): an overshoot of k answers with k
//     rejections and lands on the last limit that fitted, and a capacity
//     drop answers
//     every pick sent while the old load drains, which walks the limit
//     down to the new permits. Only when more refusals come in a row than
//     the last raise explains (refusals of picks already on their way
//     when the first came back do not count: they are the same
//     overshoot), and no pick sent since the first of them
//     got a permit (the target refuses everything new while the old load
//     drains: its capacity fell far), is the limit halved, again each
//     time the run doubles, so a provider that goes down draws a score
//     of refusals instead of one per permit it had; the probes that
//     repair such an undershoot keep the quick pace until a success ends
//     the run. While the target stays full and silent the limit is held
//     probe_interval mean latencies (queued_probe_interval while callers
//     wait in the queue: then a found permit serves a waiter at once),
//     then probed one permit up; a probe that draws no rejection found a
//     permit, and the next, twice as big, follows once it has gone
//     unrefused for four refusal round trips (probe). The limit
//     follows the permits as the oracle does, at the cost of one rejection
//     per failed probe, a few per second. A target that still refuses at
//     min_limit is parked: the learner holds its permits for a quarter of
//     a mean latency (a sixteenth while callers wait in the queue), and
//     the first pick after that, never a retry, probes it (park), so a
//     dead target costs four (sixteen) rejections per latency, not one
//     per rejection round trip; when a probe draws no refusal within
//     four refusal round trips (at most an eighth of a latency) the limit
//     jumps back to the highest it reached before the target went down
//     (revived), and waiting retries that it refused may take it again
//     (Endpoint.Reopen). A retry
//     that finds every other target at its learned limit probes one of
//     them a permit over it (retryProbe): a caller that does not wait
//     would answer the client with the refusal.
//   - a target that never rejected grows by slow start (doubling per
//     window of successes while saturated; BIC's climb towards the last
//     ceiling once one is known) and is bounded by its latency gradient
//     (as Netflix's Gradient2): a window's time per request (by
//     Little's law while busy: the mean of the latencies that came back
//     would be the short ones while the load ramps)
//     against a baseline measured at a limit known to be fine. A window
//     more than tolerance times slower, after the limit grew past that
//     known-fine limit, means our load queues at the target: the limit
//     shrinks by the ratio (at most by half). Slower at a known-fine limit
//     for five windows in a row means the target itself slowed: the
//     baseline moves. A window opens only after the last change's round
//     trip, so growth is clocked by feedback. A target that is not
//     saturated keeps its limit: there is no evidence to learn from, and
//     no need.
//
// A target that goes silent (a black hole: it accepts and never
// answers) is held as soon as its latest picks are unanswered in numbers
// its latencies would almost never leave (silenced: picks numbered by
// balance.Outcome.Seq), until an answer of a later pick comes; the
// timeouts that follow, a client's timeout later, trip its failure share
// and hold it back. While held back with nothing succeeding since, its
// trials go ahead of the other targets, one at a time, and the timeouts
// it swallows are not counted again, nor is a timeout of a
// pick sent before one that succeeded (oldTimeout): a target that
// came back is found within a few latencies.
//
// Latencies used for picking are success latencies only: a rejection
// answers fast and must not make a full target look quick. An idle
// target's sample goes stale after staleAfter of its latencies, and one
// pick at a time then measures it again; that one sample moves the mean
// within a quarter and twice of it, and if it ranks the target faster
// than before, only for a few picks at first (trialFrom).
//
// Its settings (balance.Options.Settings, decoded into Settings) tune the
// learner: initial_limit (default 20), min_limit (1), max_limit (4096),
// tolerance (2: the latency ratio read as queueing), probe_interval (4:
// mean success latencies a full, rejecting target holds its limit before
// probing one permit more) and queued_probe_interval (1: the same while
// callers wait in the queue).
//
// The package uses package balance's exported API alone, as any
// registered strategy may: per-target state through balance.StateOf, the
// limit through Endpoint.SetLimit, a parked target's permits through
// Endpoint.HoldPermits and ReleasePermits, waiters woken for permits a
// pick freed through PickInfo.Wake, refused retries let back through
// Endpoint.Reopen. grpc-go keeps weightedroundrobin outside its balancer
// package for the same reason: the strategy proves the API complete.
// Importing the package registers the strategy in balance's default
// registry under Name (as weightedroundrobin registers itself); a
// Registry of one's own takes it with Register(Name, New).
//
// The files follow the ideas: pick.go ranks targets, measure.go keeps
// the latency means, Little's law and the re-measurements, window.go
// learns a limit from latency windows, refuse.go from refusals, probe.go
// probes a refusing target's limit up, park.go parks a target that
// refuses at min_limit and revives it, retry.go serves a refused retry
// (the wait queue's interplay), silence.go holds a target that went
// silent, observe.go routes each outcome.
package capacity
