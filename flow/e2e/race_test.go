//go:build race

package e2e

// raceEnabled shrinks the stress runs under the race detector, which slows
// the pure-Go SQLite driver about tenfold.
const raceEnabled = true
