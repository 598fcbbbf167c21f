package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"redundancy", "window", "max_entries", "tick", "token"}
	for name, want := range map[string]string{
		"redundncy":  "redundancy",
		"redundency": "redundancy",
		"Window":     "window",
		"max_entry":  "max_entries",
		"tik":        "tick",
		"tokens":     "token",
		"tcik":       "tick", // a swap is one step
		"colour":     "",
		"x":          "",
	} {
		if got := Closest(name, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", name, got, want)
		}
	}
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"żółw", "zółw", 1}, {"nmae", "name", 1}, {"ca", "abc", 3}, {"abcdef", "badcfe", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
