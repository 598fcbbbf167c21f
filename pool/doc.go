// Package pool runs functions on a fixed set of runners ordered by load,
// after the LoadBalancer of Dart's isolate package, which spreads work over
// isolates the same way.
//
// Every runner carries a load: the sum of the load figures of the functions
// it has accepted and not yet finished (queued or running). A min-heap keyed
// by that load picks where the next function goes: [Pool.Run] and
// [Pool.RunLoad] use the least-loaded runner, [Pool.RunMultiple] the k
// least-loaded distinct runners. A load figure has no unit; it is the
// caller's estimate of a function's cost relative to the others run in the
// same pool (Dart's runner-pool example schedules fib(n) with load
// fib(n-1)). The default is
// 100, so a pool used without load figures balances by number of functions.
//
// The default runner, made by [New], is one goroutine with a FIFO queue,
// like a Dart isolate: it runs one function at a time, so the load of a
// runner is the work waiting in front of the next function placed there.
// The goroutine is started once and reused; no goroutine is spawned per call.
// [NewWithRunners] balances over any [Runner] instead (a remote worker, a
// process, a connection); such runners may run many functions at once.
//
// A function receives the caller's context; a timeout or cancellation
// reaches it, and a function still queued when its context ends is skipped.
// A panic in a function is recovered and returned as a [*PanicError]. Loads
// are released exactly once, when the function ends or is skipped, whatever
// the outcome. [Pool.Close] refuses new work with [ErrClosed] and waits for
// the work already accepted.
package pool
