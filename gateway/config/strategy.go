package config

import (
	"errors"
	"reflect"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

// Settings returns the upstream's strategy_settings for balance.Options,
// or nil when the file gives none (the strategy's defaults). The strategy
// decodes them itself; unknown keys are refused.
func (u *Upstream) Settings() balance.Settings {
	n := &u.StrategySettings
	if n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	path := u.settingsPath
	if path == "" {
		path = "strategy_settings"
	}
	return settings{n: n, path: path}
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
	var ce *Error
	var fe *balance.FieldError
	switch {
	case errors.As(err, &ce): // decoding: confyaml's problems, paths and lines
		v.errs = append(v.errs, ce.Problems...)
	case errors.As(err, &fe):
		v.fail(at("strategy_settings", fe.Field), "%s", fe.Msg)
	default:
		v.fail(at("strategy_settings"), "%v", err)
	}
}

// settings is a strategy_settings node as balance.Settings: the strategy
// decodes it into its own type with the rules of the rest of the file
// (unknown keys refused with the nearest known name, durations with a
// unit), every problem at its path and line.
type settings struct {
	n    *yaml.Node
	path string
}

func (s settings) Decode(v any) error {
	_, err := confyaml.DecodeNode(s.n, v, s.path)
	return err
}
