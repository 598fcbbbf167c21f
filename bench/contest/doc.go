// Command contest is an adaptive load-balancing benchmark in the shape of
// the 2019 Tianchi adaptive load-balancing contest, run on loopback.
//
// Simulated providers are real HTTP servers: each holds a number of permits
// and answers a request after an exponentially distributed delay with the
// stage's mean, or at once with 503 when no permit is free; permits and mean
// latency change in stages. A closed-loop load generator keeps N connections
// busy through each contender (Fulcrum's strategies in process and through
// the fulcrum gateway binary, nginx, HAProxy, Caddy, failsafe-go, Kratos) in turn, against the
// same providers, and scores the successes of the measured phase as a share
// of the scenario's theoretical maximum and of the oracle's (the library
// forwarder told each stage's permits). Every contender draws the same
// service times from each provider (its stream restarts per contender),
// so a run's luck in the draws moves its score less; the stream restarts
// wherever any provider changes stage, so an earlier segment's placement
// does not decide which draws a later one gets ("draws", the mean service time a contender
// drew as a multiple of the stages' means, says how lucky it was).
// A permit goes back when its draw ends, from a thread of its own that
// sleeps to the nanosecond at the highest CPU priority (alarm), not from
// the request's goroutine after a runtime timer: those fire up to a
// millisecond late while the process idles and sooner the busier it is,
// and the goroutine then waits its turn behind the refused attempts a
// sprayer sends. "overrun", how much longer than drawn a request held
// its permit, says what lateness is left (the thread waiting for a CPU
// or for the Go scheduler while the contender keeps the machine busy). A
// table of successes per stage, Fulcrum's rows against the best peer of
// each stage, says which stage a score was lost in. Two more
// diagnostics say where: "idle permits", the share of permit-time left
// free while the connections exceed the permits (the time between one
// request's end and the next one's arrival, a limit learned too low),
// and "busy conns", the share of connection-time spent holding a permit
// while the permits exceed the connections (the rest is the balancer's
// and the client's time, and waits in a queue that should not stand).
// Library contenders also record a
// per-target timeline (limit against the provider's real permits), drawn
// for the learned row as <scenario>-timeline.svg. Under the table a line
// says what the scenario alone forces on a balancer that refuses
// nothing (Scenario.ForcedWait): by Little's law the connections beyond
// the permits wait in its queue, so many milliseconds a success, and
// what that wait, spread evenly, does to the p99 against a sprayer's;
// open loop, the arrivals beyond the rate every permit completes (a
// spike) queue first come, first served and drain after it (simulated).
//
// A stage may instead give a fault: fast 500s or 503s (no permit, no
// wait: a latency-only picker takes them for a fast provider) or a black
// hole (accepted, never answered). The load may be open-loop instead:
// Poisson arrivals at a rate given in stages, the same arrivals for every
// contender; a request unanswered within load.timeout counts as an error
// (closed loop too). The learning peers run in the same library
// forwarder as Fulcrum's library rows, so only the pick differs:
// failsafe-go's adaptivelimiter, one per target with a least-loaded pick
// (with and without its queueing), and Kratos' p2c; each record carries
// its contender's configuration (the peers' config files, the libraries'
// settings). Fleet mode (gateways: N, or -gateways N) runs N instances
// of every contender but the oracle, which stays one global yardstick,
// the connections or arrivals spread evenly across them; static
// per-target limits are divided by N, and the learned rows say how
// evenly their gateways split each target and how soon the summed limits
// settled after a change (FleetSplit).
//
// Every provider response reports the provider's load in the Fulcrum-Load
// header (balance/probe's Handler: its requests in flight, the answered
// one not counted, and its mean time per request lately, refusals and
// faults included). The probe rows read it: "library probe" hands it to
// the pick as each response's head arrives, and "fulcrum probe" is the
// gateway with strategy probe, which reads it itself. The other rows pass
// it through or ignore it.
//
//	cd bench && go run ./contest -scenario contest/scenarios/contest.yaml [-short | -compress 8s] [-gateways 3] [-out out/]
//
// The scenario file format (see scenario.go) is a contract: any file in it
// runs, and a bad one is refused with the field named.
package main
