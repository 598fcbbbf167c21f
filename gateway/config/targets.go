package config

import (
	"bytes"
	"errors"
	"io"

	"go.yaml.in/yaml/v3"
)

// ParseTargets reads a target list for the admin API: either a bare list
// or {"targets": [...]}, in JSON or YAML, with the fields of a config
// target. It is validated like the config's targets; paths in errors start
// at "targets".
func ParseTargets(data []byte) ([]Target, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &Error{Problems: []*FieldError{{Path: "(body)", Msg: err.Error()}}}
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	var wrapped struct {
		Targets []Target `yaml:"targets"`
	}
	bare := doc.Kind == yaml.SequenceNode
	if bare {
		// Decode a bare list as if it were {targets: [...]} so paths agree.
		var buf bytes.Buffer
		buf.WriteString("targets:\n")
		for _, line := range bytes.Split(data, []byte("\n")) {
			buf.WriteString("  ")
			buf.Write(line)
			buf.WriteByte('\n')
		}
		data = buf.Bytes()
		root = yaml.Node{}
		if err := yaml.Unmarshal(data, &root); err != nil {
			return nil, &Error{Problems: []*FieldError{{Path: "(body)", Msg: err.Error()}}}
		}
	} else if doc.Kind != yaml.MappingNode {
		return nil, &Error{Problems: []*FieldError{{Path: "(body)", Msg: "want a list of targets or {\"targets\": [...]}"}}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&wrapped); err != nil && !errors.Is(err, io.EOF) {
		return nil, unwrapLines(decodeError(&root, err), bare)
	}
	v := validator{root: &root}
	u := &Upstream{Targets: wrapped.Targets}
	v.targets(u, func(keys ...any) []any { return keys })
	if len(v.errs) > 0 {
		return nil, unwrapLines(&Error{Problems: v.errs}, bare)
	}
	return u.Targets, nil
}

// unwrapLines takes back the line a bare list was given by wrapping it in
// "targets:", so errors name the caller's lines.
func unwrapLines(err error, bare bool) error {
	var e *Error
	if bare && errors.As(err, &e) {
		for _, p := range e.Problems {
			if p.Line > 1 {
				p.Line--
			}
		}
	}
	return err
}
