// Package balance picks a target for each piece of work: the strategies of
// Fulcrum's gateway, worker SDKs and benchmarks live here.
//
// A Balancer holds a set of targets and a strategy. Update replaces the set;
// targets that stay (same address) keep their runtime state (in-flight count,
// latency statistics, warm-up start, health), new ones start their warm-up,
// removed ones are never picked again while picks already handed out finish
// safely. Every membership or usability change builds a new immutable
// snapshot (the usable endpoints plus a Picker the strategy built for them)
// and swaps it in atomically, so Pick takes no balancer lock.
//
// A pick returns a Pick value; its Done (or Report) method hands back the
// outcome, which feeds the statistics, the passive health check and the
// capacity accounting. Targets with a max concurrency hold that many permits:
// Pick fails with ErrAtCapacity when none is free and Wait blocks until one
// is returned or the context ends.
//
// Strategies are registered by name in a Registry, a plug-in interface like
// Dubbo's LoadBalance SPI; the built-in ones are random, round_robin, hash,
// bounded_hash, least_active, shortest_response, p2c and least_loaded.
// capacity, the learner of each target's permits, lives in package
// balance/capacity and registers itself when imported (as grpc's
// weightedroundrobin does), built on this package's exported API alone.
// docs/balance.md explains each and when to use it.
package balance
