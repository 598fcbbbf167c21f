package balance

import (
	"errors"
	"fmt"
	"reflect"
)

// Settings is one strategy's own section of configuration, not yet
// decoded. The strategy's factory decodes it into its own settings type
// (HashSettings, P2CSettings, ...), fills defaults and validates it, so
// each strategy owns its knobs and a registered strategy gets the same
// treatment as a built-in one. A *yaml.Node has this method (the gateway
// passes a wrapper that also refuses unknown keys and reports lines);
// SettingsFrom wraps a value built in Go.
type Settings interface {
	Decode(v any) error
}

// SettingsFrom returns Settings that decode to v: a strategy's settings
// value (or a pointer to one), such as BoundedHashSettings{LoadBound: 1.5}
// or capacity.Settings. The value replaces the strategy's settings whole.
func SettingsFrom(v any) Settings { return given{v} }

type given struct{ v any }

func (g given) Decode(dst any) error {
	d := reflect.ValueOf(dst)
	if d.Kind() != reflect.Pointer || d.IsNil() {
		return errors.New("balance: settings decode into a non-pointer")
	}
	v := reflect.ValueOf(g.v)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Type() == d.Type() {
		v = v.Elem()
	}
	if !v.IsValid() || !v.Type().AssignableTo(d.Elem().Type()) {
		return fmt.Errorf("settings of type %T given to a strategy whose settings are %s", g.v, d.Elem().Type())
	}
	d.Elem().Set(v)
	return nil
}

// FieldError is a setting its strategy refused. Factories return one
// (wrapped or not) so that a configuration file can point at the key.
type FieldError struct {
	Field string // the setting's key, as written in the configuration
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func settingErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// decodeSettings decodes s into v; nil Settings leave v as it is.
func decodeSettings(s Settings, v any) error {
	if s == nil {
		return nil
	}
	return s.Decode(v)
}

// noSettings is the factory step of a strategy that has no knobs: any
// setting given is an error (the strict decoders report unknown keys).
func noSettings(s Settings) error {
	var v struct{}
	return decodeSettings(s, &v)
}
