package capacity

import (
	"errors"
	"slices"
	"testing"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Importing the package registers "capacity" in the default registry, and
// a private registry takes it by Name and New.
func TestRegisteredOnImport(t *testing.T) {
	if !balance.Known(Name) || !slices.Contains(balance.Names(), Name) {
		t.Fatalf("%q not registered: %v", Name, balance.Names())
	}
	reg := balance.NewRegistry()
	if reg.Has(Name) {
		t.Fatalf("a new registry holds %q before it is registered there", Name)
	}
	if err := reg.Register(Name, New); err != nil {
		t.Fatal(err)
	}
	if _, err := balance.New(Name, balance.Options{Registry: reg}); err != nil {
		t.Fatal(err)
	}
}

// Settings built in Go start from the defaults; a value given whole
// replaces every field, so a zero is refused naming its key, not read as
// the default (as a zero in the configuration file is).
func TestSettingsFromGo(t *testing.T) {
	s := DefaultSettings()
	s.InitialLimit = 50
	for _, set := range []balance.Settings{nil, balance.SettingsFrom(s), balance.SettingsFrom(&s)} {
		if err := balance.Check(Name, set); err != nil {
			t.Errorf("Check(%v): %v", set, err)
		}
	}
	var fe *balance.FieldError
	err := balance.Check(Name, balance.SettingsFrom(Settings{InitialLimit: 50}))
	if !errors.As(err, &fe) || fe.Field != "min_limit" {
		t.Errorf("Settings{InitialLimit: 50}: %v, want a FieldError on min_limit", err)
	}
	if err := balance.Check(Name, balance.SettingsFrom(map[string]float64{"initial_limit": 50})); err == nil {
		t.Error("settings of another type were accepted")
	}
}
