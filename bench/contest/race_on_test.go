//go:build race

package main

// raceEnabled: the race detector slows every request several times over,
// so the smoke test expects less of a short run.
const raceEnabled = true
