// Package supervisor keeps long-running tasks (sessions watching live rooms,
// say) running on a fleet of workers, each task on k distinct workers.
//
// Data flows one way: the task source (supervisor/source) feeds the
// lifecycle (Core: warm-up, task queries, worker and task timeouts on one
// timer wheel), which drives the assignment engine (Engine: which worker
// holds what, by free capacity, sticky); the engine's instruction sets go to
// the workers over WebSocket; the workers' payloads come back, are
// deduplicated (supervisor/dedup) and published once (supervisor/sink).
//
// Engine and Core are synchronous and take the time as an argument; Server
// runs them from one event loop goroutine, so no lock guards the state.
// With high availability, whether this process leads, and under which term,
// is supervisor/leadership's to say; the loop reads its gate.
// docs/supervisor.md is the user's page; docs/supervisor-protocol.md the wire.
package supervisor
