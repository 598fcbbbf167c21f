//go:build !race

package supervisor

const raceOn = false
