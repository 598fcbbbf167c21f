package confyaml

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// fuzzConfig has no Size and no self-decoding type, so that the YAML
// library's strict decoder reads it the same way.
type fuzzConfig struct {
	Listen    string            `yaml:"listen"`
	N         int               `yaml:"n"`
	U         uint8             `yaml:"u"`
	F         float64           `yaml:"f"`
	B         bool              `yaml:"b"`
	D         time.Duration     `yaml:"d"`
	Inner     limits            `yaml:"inner"`
	List      []limits          `yaml:"list"`
	Tags      []string          `yaml:"tags"`
	Map       map[string]limits `yaml:"map"`
	Ints      map[int]string    `yaml:"ints"`
	Ptr       *limits           `yaml:"ptr"`
	Any       any               `yaml:"any"`
	Recursive *fuzzConfig       `yaml:"recursive"`
}

// FuzzDecode: Decode never panics; a refusal is an *Error whose problems
// each say something and point into the document; and whatever both
// Decode and the YAML library's strict decoder accept, they read alike.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"listen: x\nn: 3\nd: 5s\ninner: {window: 1m, max_entries: 2}\n",
		"list: [{window: 1s}, {max_entries: 3}]\ntags: [a, b]\nmap: {a: {window: 2s}}\n",
		"base: &b {window: 1s}\nmap:\n  x:\n    <<: *b\n    max_entries: 2\n",
		"ints: {1: a, 2: b}\nptr: {window: 3s}\nany: [1, {a: b}]\nrecursive: {recursive: {n: 1}}\n",
		"n: 1.5\nu: 300\nd: 5\nf: x\nb: maybe\n",
		"a: &a [x, x]\nb: &b [*a, *a]\n",
		"listen: a\nlisten: b\n",
		"- 1\n- 2\n",
		"listen: [\n",
		"listen: a\n---\nn: 1\n",
		"inner: {<<: [{window: 1s}, {window: 2s}]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got fuzzConfig
		doc, err := Decode(data, &got)
		lines := 2 // an upper bound: YAML breaks lines at \n, \r and three Unicode breaks
		for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
			lines += bytes.Count(data, []byte(br))
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 || len(e.Problems) > MaxProblems+1 {
				t.Fatalf("error %v (%T)", err, err)
			}
			for _, p := range e.Problems {
				if p.Msg == "" || p.Line < 0 || p.Line > lines {
					t.Fatalf("problem %+v in a document of %d lines", p, lines)
				}
			}
		}
		if doc != nil {
			for _, path := range []string{"", "listen", "inner.window", "list[0].window", "map.a", "tags[3]", "recursive.recursive.n"} {
				if l := doc.Line(path); l < 0 || l > lines {
					t.Fatalf("Line(%q) = %d", path, l)
				}
			}
		}
		if err != nil || strings.Contains(string(data), "---") {
			return
		}
		var lib fuzzConfig
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if libErr := dec.Decode(&lib); libErr != nil {
			return // Decode accepts "d: 0" and whole floats for integers; the library does not
		}
		if !reflect.DeepEqual(got, lib) {
			t.Fatalf("Decode read\n%+v\nthe YAML library read\n%+v", got, lib)
		}
	})
}

// FuzzParseSize: a size that parses prints back to itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1500", "64KiB", "8MiB", "1GiB", "2MB", "1536", "-1", "1.5MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		back, err := ParseSize(Size(n).String())
		if err != nil || back != n {
			t.Fatalf("%q = %d prints as %q, which parses as %d, %v", s, n, Size(n).String(), back, err)
		}
	})
}
