package store

import (
	"bytes"
	"encoding/json"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// parseLog decodes a stored schedule log. Every hold returns the logs of
// the tasks it claims, and encoding/json's reflection was the largest Go
// cost of a hold, so the shape the stores write — an array of objects with
// the keys at, worker, stage, event and error, holding plain strings — is
// read directly; anything else (escapes, other keys, non-ASCII, odd
// spacing) goes to json.Unmarshal, so the result is always what
// json.Unmarshal gives (FuzzParseLog checks it).
func parseLog(b []byte) ([]flow.LogEntry, error) {
	if out, ok := parseLogFast(b); ok {
		return out, nil
	}
	var out []flow.LogEntry
	err := json.Unmarshal(b, &out)
	return out, err
}

func parseLogFast(b []byte) ([]flow.LogEntry, bool) {
	p := logParser{b: b}
	p.ws()
	if !p.eat('[') {
		return nil, false
	}
	out := make([]flow.LogEntry, 0, bytes.Count(b, []byte{'{'}))
	p.ws()
	if p.eat(']') {
		return out, p.end()
	}
	for {
		var e flow.LogEntry
		p.ws()
		if !p.eat('{') {
			return nil, false
		}
		for {
			p.ws()
			key, ok := p.str()
			if !ok {
				return nil, false
			}
			p.ws()
			if !p.eat(':') {
				return nil, false
			}
			p.ws()
			val, ok := p.str()
			if !ok {
				return nil, false
			}
			switch string(key) {
			case "at":
				if err := e.At.UnmarshalText(val); err != nil {
					return nil, false
				}
			case "worker":
				e.Worker = string(val)
			case "stage":
				e.Stage = string(val)
			case "event":
				e.Event = string(val)
			case "error":
				e.Error = string(val)
			default:
				return nil, false
			}
			p.ws()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return nil, false
			}
		}
		out = append(out, e)
		p.ws()
		if p.eat(']') {
			return out, p.end()
		}
		if !p.eat(',') {
			return nil, false
		}
	}
}

type logParser struct {
	b []byte
	i int
}

func (p *logParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\n' || p.b[p.i] == '\t' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *logParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (p *logParser) end() bool { p.ws(); return p.i == len(p.b) }

// str reads a string of printable ASCII without escapes.
func (p *logParser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		p.i++
	}
	return nil, false
}
