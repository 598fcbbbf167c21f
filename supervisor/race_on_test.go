//go:build race

package supervisor

// raceOn: the race detector slows JSON decoding about tenfold, so the
// socket fleet at the scale (100 workers x 300 tasks reported every
// tick) cannot keep up on a small shared machine; tests scale down under it.
const raceOn = true
