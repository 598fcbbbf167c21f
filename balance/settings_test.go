package balance

import "testing"

// A mistyped key among named numbers (capacity's settings) gets the same
// did-you-mean as an unknown field of a config; a key like none of them
// lists the known ones.
func TestDecodeNumbersSuggests(t *testing.T) {
	known := []string{"initial_limit", "max_limit"}
	for key, want := range map[string]string{
		"initial_limits": "initial_limits: unknown setting (did you mean initial_limit?)",
		"gradient":       "gradient: unknown setting (known: initial_limit, max_limit)",
	} {
		_, err := decodeNumbers(SettingsFrom(map[string]float64{key: 1}), known)
		if err == nil || err.Error() != want {
			t.Errorf("decodeNumbers(%s) = %v, want %q", key, err, want)
		}
	}
}
