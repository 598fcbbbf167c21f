package confyaml

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Size is a byte count written as 1048576, "64KiB", "8MiB", "1GiB" (powers
// of 1024) or "64KB", "8MB", "1GB" (powers of 1000).
type Size int64

// Bytes returns the count.
func (s Size) Bytes() int64 { return int64(s) }

// UnmarshalYAML parses a size, so a Size reads the same through plain
// yaml.Unmarshal.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a size like 64KiB, got %s", n.Line, kindName(n))}}
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*s = Size(v)
	return nil
}

// MarshalYAML writes the shortest exact form: "8MiB", "1500", "2GB".
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

// String is the shortest exact form.
func (s Size) String() string {
	v := int64(s)
	for _, u := range units {
		if u.m > 1 && v != 0 && v%u.m == 0 {
			return strconv.FormatInt(v/u.m, 10) + u.suf
		}
	}
	return strconv.FormatInt(v, 10)
}

// units, largest first within each base; String prefers the binary one.
var units = []struct {
	suf string
	m   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseSize parses "123", "123B", "64KiB", "10MiB", "1GiB", "64KB", "10MB",
// "1GB". Negative sizes and sizes past 2^62 bytes are refused.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suf); ok {
			t, mult = strings.TrimSpace(num), u.m
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%s is not a size (like 65536, 64KiB, 8MiB)", show(s))
	}
	return v * mult, nil
}

// Duration is a length of time, written with a unit ("250ms", "5s",
// "1h30m") and never negative: a timeout, an interval, a window. A plain
// time.Duration field reads the same way but may be negative, for configs
// that check the sign themselves with their own message.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is the time.Duration's form ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration, so a Duration reads the same through
// plain yaml.Unmarshal.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration like 5s, got %s", n.Line, kindName(n))}}
	}
	v, err := parseLength(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// parseLength is parseDuration for a Duration: negative ones are refused.
func parseLength(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err == nil && d < 0 {
		return 0, fmt.Errorf("%s is negative", show(s))
	}
	return d, err
}

// parseDuration reads a Go duration and says what is wrong in words a
// config author can act on; a bare number is refused, since "5" could be
// seconds or milliseconds (only "0" needs no unit).
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err == nil {
		return d, nil
	}
	if _, e := strconv.ParseFloat(strings.TrimSpace(s), 64); e == nil && len(s) <= 20 {
		return 0, fmt.Errorf("%s has no unit: write a duration like %ss, %sms or %sm", s, s, s, s)
	}
	return 0, fmt.Errorf("%s is not a duration (like 500ms, 5s, 2m, 1h30m)", show(s))
}
