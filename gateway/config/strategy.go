package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Settings returns the upstream's strategy_settings for balance.Options,
// or nil when the file gives none (the strategy's defaults). The strategy
// decodes them itself; unknown keys are refused.
func (u *Upstream) Settings() balance.Settings {
	n := &u.StrategySettings
	if n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	return strictNode{n}
}

// SameSettings reports whether two upstreams give their strategy the same
// settings (so a reload may keep the balancer and its state).
func (u *Upstream) SameSettings(o *Upstream) bool {
	a, b := u.Settings(), o.Settings()
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	// Compare values, not text: comments and layout do not matter.
	var va, vb any
	erra, errb := u.StrategySettings.Decode(&va), o.StrategySettings.Decode(&vb)
	return erra == nil && errb == nil && reflect.DeepEqual(va, vb)
}

// strategySettings has the upstream's strategy check its settings and
// reports each problem at its key's path and line.
func (v *validator) strategySettings(u *Upstream, at func(keys ...any) []any) {
	err := balance.Check(u.Strategy, u.Settings())
	if err == nil {
		return
	}
	var te *yaml.TypeError
	var fe *balance.FieldError
	switch {
	case errors.As(err, &te):
		var e *Error
		if errors.As(decodeError(v.root, te), &e) {
			v.errs = append(v.errs, e.Problems...)
		}
	case errors.As(err, &fe):
		v.fail(at("strategy_settings", fe.Field), "%s", fe.Msg)
	default:
		v.fail(at("strategy_settings"), "%v", err)
	}
}

// strictNode is a strategy_settings node as balance.Settings: decoding
// refuses keys the strategy's settings type does not have, and every
// problem carries its line, as for the rest of the file.
type strictNode struct{ n *yaml.Node }

func (s strictNode) Decode(v any) error {
	n := s.n
	if n.Kind != yaml.MappingNode {
		return typeErr(n, "want a mapping of the strategy's settings, got a %s", kindName(n.Kind))
	}
	var errs []string
	if known, ok := yamlKeys(reflect.TypeOf(v)); ok {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if slices.Contains(known, k.Value) {
				continue
			}
			msg := "this strategy has no settings"
			if len(known) > 0 {
				msg = "known: " + strings.Join(known, ", ")
			}
			errs = append(errs, fmt.Sprintf("line %d: column %d: field %s not found (%s)", k.Line, k.Column, k.Value, msg))
		}
	}
	if err := n.Decode(v); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return err
		}
		for _, e := range te.Errors {
			errs = append(errs, plainTypeError(e))
		}
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// yamlKeys lists the keys a settings struct accepts (its yaml tags,
// inlined structs included); ok is false for a type that takes any key (a
// map: the strategy checks the names itself).
func yamlKeys(t reflect.Type) (keys []string, ok bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-" || (!f.IsExported() && !f.Anonymous):
		case strings.Contains(opts, "inline"):
			sub, _ := yamlKeys(f.Type)
			keys = append(keys, sub...)
		case name == "":
			keys = append(keys, strings.ToLower(f.Name))
		default:
			keys = append(keys, name)
		}
	}
	return keys, true
}

var libraryTypeError = regexp.MustCompile("cannot unmarshal !!\\w+ `(.*)` into (\\S+)$")

// plainTypeError says what the YAML library's "cannot unmarshal !!str
// `lots` into float64" means in the file's terms.
func plainTypeError(s string) string {
	m := libraryTypeError.FindStringSubmatchIndex(s)
	if m == nil {
		return s
	}
	val, typ := s[m[2]:m[3]], s[m[4]:m[5]]
	want := map[string]string{"float64": "a number", "int": "an integer", "time.Duration": "a duration with a unit, like 10s", "string": "a string", "bool": "true or false"}[typ]
	if want == "" {
		return s
	}
	return s[:m[0]] + fmt.Sprintf("want %s, got %q", want, val)
}
