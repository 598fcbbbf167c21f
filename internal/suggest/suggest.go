// Package suggest finds the "did you mean" of a misspelt name. It has no
// dependencies, so a library package (balance) can use it without pulling
// in the YAML decoder.
package suggest

import "strings"

// Closest returns the known name closest to name by edit distance, or ""
// when none is close enough to be the intended one (at most a third of the
// letters differ, and at least one may): the "did you mean" of an unknown
// field, for a section decoded by other means (a map of named settings)
// too.
func Closest(name string, known []string) string {
	if len(name) > 64 { // no field name is this long; do not spend time on it
		return ""
	}
	best, bestD := "", -1
	for _, k := range known {
		d := editDistance(strings.ToLower(name), strings.ToLower(k))
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD < 0 || bestD > max(1, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b
// in runes: the fewest insertions, deletions, substitutions and swaps of
// two neighbours that turn one into the other, no letter edited twice
// (Levenshtein's distance with transpositions, so "nmae" is one step from
// "name", the typo it usually is).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1) // row i-2, for swaps
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
