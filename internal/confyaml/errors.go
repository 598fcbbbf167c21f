package confyaml

import (
	"fmt"
	"slices"
	"strings"
)

// FieldError is one problem with one field.
type FieldError struct {
	Path string // dotted, with indexes: upstreams.api.targets[0].url; empty for the whole document
	Line int    // 1-based; 0 when the field is not in the file
	Msg  string
}

// Error reads "line 3: dedup.window: want a duration ...".
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Error is a refused configuration: every problem found, in file order
// where the line is known.
type Error struct {
	Problems []*FieldError
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// SortProblems puts problems in file order, the order an Error lists them
// in: by line, those on one line as they were found, those without a line
// (not in the file) last. Validation finds problems in the order of its
// checks; a caller sorts once it has given them their lines.
func SortProblems(problems []*FieldError) {
	slices.SortStableFunc(problems, func(a, b *FieldError) int {
		switch {
		case a.Line == b.Line:
			return 0
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		}
		return a.Line - b.Line
	})
}

// Unwrap gives the problems to errors.As and errors.Is.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// Suggest returns the known name closest to name by edit distance, or ""
// when none is close enough to be the intended one (at most a third of the
// letters differ, and at least one may): the "did you mean" of an unknown
// field, for a section decoded by other means (a map of named settings)
// too.
func Suggest(name string, known []string) string {
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
