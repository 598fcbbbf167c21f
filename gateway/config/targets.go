package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

// ParseTargets reads a target list for the admin API and file discovery:
// either a bare list or {"targets": [...]}, in JSON or YAML, with the
// fields of a config target. It is decoded and validated like the
// config's targets; paths in errors start at "targets", and lines are the
// body's own.
func ParseTargets(data []byte) ([]Target, error) {
	var top yaml.Node
	if _, err := confyaml.Decode(data, &top); err != nil {
		return nil, err // invalid YAML, or a second document
	}
	if top.Kind == yaml.SequenceNode {
		// Read a bare list as {targets: [...]}, so that paths agree with
		// the wrapped form; the nodes keep their lines.
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "targets", Line: top.Line, Column: top.Column}
		list := top
		top = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: top.Line, Column: top.Column, Content: []*yaml.Node{key, &list}}
	} else if top.Kind != yaml.MappingNode {
		return nil, &Error{Problems: []*FieldError{{Line: top.Line, Msg: `want a list of targets or {"targets": [...]}`}}}
	}
	var wrapped struct {
		Targets []Target `yaml:"targets"`
	}
	doc, err := confyaml.DecodeNode(&top, &wrapped, "")
	if err != nil {
		return nil, err
	}
	v := validator{doc: doc}
	u := &Upstream{Targets: wrapped.Targets}
	v.targets(u, func(keys ...any) []any { return keys })
	if len(v.errs) > 0 {
		for _, e := range v.errs {
			if e.Line == 0 {
				// Nothing on the path is in the body ({} has no
				// targets): the body itself is what lacks it.
				e.Line = top.Line
			}
		}
		confyaml.SortProblems(v.errs)
		return nil, &Error{Problems: v.errs}
	}
	return u.Targets, nil
}
