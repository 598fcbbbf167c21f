package confyaml

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fulcrum-lb/fulcrum/internal/suggest"
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

// Suggest returns the known name closest to name, or "" when none is
// close enough to be the intended one: the "did you mean" of an unknown
// field (see package suggest).
func Suggest(name string, known []string) string { return suggest.Closest(name, known) }
