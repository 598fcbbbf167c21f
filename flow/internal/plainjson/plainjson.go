// Package plainjson reads the plain JSON that flow's own programs write
// (the Go client's requests, the server's hold answers) without
// reflection: no whitespace, keys spelt exactly, strings of printable
// ASCII without escapes, integers without fraction or exponent. Every
// method reports false on anything else, and the caller then hands the
// whole input to encoding/json, which decides: a parse that succeeds here
// gives what encoding/json would have given, and one that does not costs
// only the time spent before the surprise. encoding/json's reflection was
// the largest piece of the worker SDK's CPU (hold answers) and a tenth of
// the server's (create and set requests) end to end.
package plainjson

import (
	"encoding/json"
	"strconv"
	"time"
)

// Parser reads B from I on.
type Parser struct {
	B []byte
	I int
}

// Lit reads s exactly.
func (p *Parser) Lit(s string) bool {
	if len(p.B)-p.I < len(s) || string(p.B[p.I:p.I+len(s)]) != s {
		return false
	}
	p.I += len(s)
	return true
}

// End reports whether only whitespace is left (what encoding/json allows
// after a value).
func (p *Parser) End() bool {
	for _, c := range p.B[p.I:] {
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}

// Str reads a string of printable ASCII without escapes.
func (p *Parser) Str() (string, bool) {
	start := p.I
	if !p.skipStr() {
		return "", false
	}
	return string(p.B[start+1 : p.I-1]), true
}

// StrAs is Str that returns prev, without allocating, when the string
// read is the same: a batch's elements mostly repeat their neighbour's
// type, stage and lease.
func (p *Parser) StrAs(prev string) (string, bool) {
	start := p.I
	if !p.skipStr() {
		return "", false
	}
	if s := p.B[start+1 : p.I-1]; string(s) != prev {
		return string(s), true
	}
	return prev, true
}

// Int64 reads a JSON integer (no fraction, no exponent) that fits in bits
// (as encoding/json refuses one that overflows the field).
func (p *Parser) Int64(bits int) (int64, bool) {
	j := p.I
	if j < len(p.B) && p.B[j] == '-' {
		j++
	}
	d := j
	for j < len(p.B) && p.B[j] >= '0' && p.B[j] <= '9' {
		j++
	}
	if j == d || (p.B[d] == '0' && j > d+1) {
		return 0, false
	}
	if j < len(p.B) && (p.B[j] == '.' || p.B[j] == 'e' || p.B[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.B[p.I:j]), 10, bits)
	if err != nil {
		return 0, false
	}
	p.I = j
	return n, true
}

// Int reads a JSON integer that fits an int.
func (p *Parser) Int() (int, bool) {
	n, ok := p.Int64(strconv.IntSize)
	return int(n), ok
}

// Time reads a string as time.Time.UnmarshalJSON does.
func (p *Parser) Time() (time.Time, bool) {
	start := p.I
	if !p.skipStr() {
		return time.Time{}, false
	}
	var t time.Time
	if t.UnmarshalJSON(p.B[start:p.I]) != nil {
		p.I = start
		return time.Time{}, false
	}
	return t, true
}

// TimeMemo is the last time a TimeAs read, and its text.
type TimeMemo struct {
	raw []byte // quotes included; a slice of the input
	t   time.Time
}

// TimeAs is Time that gives m's time, without parsing, when the text is
// the one m last read: the tasks of one hold answer share their creation,
// lease and modification times.
func (p *Parser) TimeAs(m *TimeMemo) (time.Time, bool) {
	if n := len(m.raw); n > 0 && len(p.B)-p.I >= n && string(p.B[p.I:p.I+n]) == string(m.raw) {
		p.I += n
		return m.t, true
	}
	start := p.I
	t, ok := p.Time()
	if ok {
		m.raw, m.t = p.B[start:p.I], t
	}
	return t, ok
}

// skipStr is Str without the string.
func (p *Parser) skipStr() bool {
	if p.I >= len(p.B) || p.B[p.I] != '"' {
		return false
	}
	for j := p.I + 1; j < len(p.B); j++ {
		switch c := p.B[j]; {
		case c == '"':
			p.I = j + 1
			return true
		case c < 0x20 || c > 0x7e || c == '\\':
			return false
		}
	}
	return false
}

// Raw reads an object, array, string or number as it stands (a task
// context), checks that it is JSON and returns a copy. null is refused:
// encoding/json's handling of it is its own to decide.
func (p *Parser) Raw() (json.RawMessage, bool) {
	start, depth, inStr := p.I, 0, false
	j := p.I
	for ; j < len(p.B); j++ {
		c := p.B[j]
		if inStr {
			switch c {
			case '\\':
				j++
			case '"':
				inStr = false
			}
			if depth == 0 && !inStr {
				j++
				break
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			continue
		case '{', '[':
			depth++
			continue
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, false
			}
			if depth == 0 {
				j++
				goto end
			}
			continue
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 { // a number ends here (and whitespace is not plain)
				goto end
			}
		}
	}
end:
	if j > len(p.B) { // the input ended on a backslash in a string
		return nil, false
	}
	v := p.B[start:j]
	if len(v) == 0 || v[0] == 'n' || !json.Valid(v) {
		return nil, false
	}
	p.I = j
	return append(json.RawMessage(nil), v...), true
}

// Array reads a JSON array, elem reading each element.
func (p *Parser) Array(elem func() bool) bool {
	if !p.Lit("[") {
		return false
	}
	if p.Lit("]") {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.Lit("]") {
			return true
		}
		if !p.Lit(",") {
			return false
		}
	}
}

// Object reads a JSON object, field reading each member's value after its
// key; field reports false for a key it does not know or a bad value. The
// key is the input's bytes, valid during the call: compared as
// string(key), it costs no allocation (a string per key was a quarter of
// the parsers' garbage).
func (p *Parser) Object(field func(key []byte) bool) bool {
	if !p.Lit("{") {
		return false
	}
	for first := true; !p.Lit("}"); first = false {
		if !first && !p.Lit(",") {
			return false
		}
		start := p.I
		if !p.skipStr() || !p.Lit(":") || !field(p.B[start+1:p.I-2]) {
			return false
		}
	}
	return true
}
