package confyaml

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type limits struct {
	Window     time.Duration `yaml:"window"`
	MaxEntries int           `yaml:"max_entries"`
}

type common struct {
	Name string `yaml:"name"`
}

type config struct {
	common     `yaml:",inline"`
	Listen     string            `yaml:"listen"`
	Redundancy int               `yaml:"redundancy"`
	Warmup     time.Duration     `yaml:"warmup"`
	Body       Size              `yaml:"body"`
	Ratio      float64           `yaml:"ratio"`
	On         bool              `yaml:"on"`
	Port       uint16            `yaml:"port"`
	Dedup      limits            `yaml:"dedup"`
	Tags       []string          `yaml:"tags"`
	Pair       [2]int            `yaml:"pair"`
	Upstreams  map[string]limits `yaml:"upstreams"`
	Optional   *limits           `yaml:"optional"`
	Timeout    *time.Duration    `yaml:"timeout"`
	Extra      any               `yaml:"extra"`
	Raw        yaml.Node         `yaml:"raw"`
	Skipped    string            `yaml:"-"`
	Source     source            `yaml:"source"`
}

// source decodes itself, as supervisor/source.Config does: confyaml must
// keep its decoding and still refuse unknown fields and unit-less
// durations in it.
type source struct {
	Type    string        `yaml:"type"`
	IDs     []string      `yaml:"ids"`
	Timeout time.Duration `yaml:"timeout"`
}

func (s *source) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		Type    string        `yaml:"type"`
		IDs     yaml.Node     `yaml:"ids"`
		Timeout time.Duration `yaml:"timeout"`
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	*s = source{Type: raw.Type, Timeout: raw.Timeout}
	for i, id := range raw.IDs.Content {
		if id.Value == "" {
			return fmt.Errorf("line %d: source.ids[%d]: empty", id.Line, i)
		}
		s.IDs = append(s.IDs, strings.ToUpper(id.Value))
	}
	return nil
}

func defaults() config {
	return config{Listen: "127.0.0.1:7300", Redundancy: 2, Warmup: 30 * time.Second, Dedup: limits{Window: time.Minute, MaxEntries: 100}}
}

func TestDecodeValues(t *testing.T) {
	const doc = `name: edge
redundancy: 3
body: 8MiB
ratio: .5
on: yes
port: 8080
base: &base {window: 2s}
dedup:
  max_entries: 1e3
tags: [a, b]
pair: [1, 2]
upstreams:
  api:
    <<: *base
    max_entries: 7
  web: {window: 1m}
optional: {max_entries: 1}
timeout: 250ms
extra: {k: [1, x]}
raw: {any: thing}
warmup:
source: {type: static, ids: [r1, r2], timeout: 3s}
`
	type withBase struct {
		config `yaml:",inline"`
		Base   limits `yaml:"base"`
	}
	w := withBase{config: defaults()}
	if _, err := Decode([]byte(doc), &w); err != nil {
		t.Fatal(err)
	}
	c := w.config
	timeout := 250 * time.Millisecond
	want := defaults()
	want.Name = "edge"
	want.Redundancy = 3
	want.Body = 8 << 20
	want.Ratio = .5
	want.On = true
	want.Port = 8080
	want.Dedup = limits{Window: time.Minute, MaxEntries: 1000} // window kept from the defaults
	want.Tags = []string{"a", "b"}
	want.Pair = [2]int{1, 2}
	want.Upstreams = map[string]limits{"api": {Window: 2 * time.Second, MaxEntries: 7}, "web": {Window: time.Minute}}
	want.Optional = &limits{MaxEntries: 1}
	want.Timeout = &timeout
	want.Extra = map[string]any{"k": []any{1, "x"}}
	want.Source = source{Type: "static", IDs: []string{"R1", "R2"}, Timeout: 3 * time.Second}
	if c.Raw.Kind != yaml.MappingNode || len(c.Raw.Content) != 2 {
		t.Errorf("raw node %+v", c.Raw)
	}
	c.Raw = yaml.Node{}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", c, want)
	}
}

func TestDecodeEmptyKeepsDefaults(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n", "---\n", "---\n---\n"} {
		c := defaults()
		if _, err := Decode([]byte(doc), &c); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if !reflect.DeepEqual(c, defaults()) {
			t.Errorf("%q changed the defaults: %+v", doc, c)
		}
	}
}

// Every problem is one FieldError naming its field and line, in words a
// config author can act on.
func TestDecodeProblems(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"listen: x\nredundancy: 2\nredundncy: 3\n", "line 3: redundncy: unknown field (did you mean redundancy?)"},
		{"dedup:\n  windw: 1s\n", "line 2: dedup.windw: unknown field (did you mean window?)"},
		{"zzzzzz: 1\n", "line 1: zzzzzz: unknown field (known: name, listen, redundancy,"},
		{"warmup: 5\n", "line 1: warmup: 5 has no unit: write a duration like 5s, 5ms or 5m"},
		{"warmup: soon\n", `line 1: warmup: "soon" is not a duration`},
		{"warmup: [1s]\n", "line 1: warmup: want a duration like 5s, got a list"},
		{"timeout: 5\n", "line 1: timeout: 5 has no unit"},
		{"body: lots\n", `line 1: body: "lots" is not a size`},
		{"body: -1\n", `line 1: body: "-1" is not a size`},
		{"redundancy: two\n", `line 1: redundancy: want an integer, got "two"`},
		{"redundancy: 1.5\n", "line 1: redundancy: want an integer, got 1.5"},
		{"redundancy: {a: 1}\n", "line 1: redundancy: want an integer, got a mapping"},
		{"port: 70000\n", "line 1: port: 70000 is out of range (uint16)"},
		{"port: -1\n", "line 1: port: -1 is out of range (uint16)"},
		{"on: maybe\n", `line 1: on: want true or false, got "maybe"`},
		{"ratio: fast\n", `line 1: ratio: want a number, got "fast"`},
		{"tags: a\n", `line 1: tags: want a list, got "a"`},
		{"pair: [1]\n", "line 1: pair: want a list of 2, got 1"},
		{"upstreams: [a]\n", "line 1: upstreams: want a mapping, got a list"},
		{"upstreams:\n  api: {window: 5}\n", "line 2: upstreams.api.window: 5 has no unit"},
		{"upstreams:\n  api: [1]\n", "line 2: upstreams.api: want a mapping of fields (window, max_entries), got a list"},
		{"optional: {max_entries: x}\n", `line 1: optional.max_entries: want an integer, got "x"`},
		{"listen: a\nlisten: b\n", "line 2: listen: set twice (first on line 1)"},
		{"- 1\n", "line 1: want a mapping of fields"},
		{"listen: [\n", "line 1: invalid YAML: did not find expected node content"},
		{"listen: a\n---\nlisten: b\n", "line 2: a second YAML document (after ---) would be ignored"},
		{"listen: a\n---\n# nothing\n---\nlisten: b\n", "line 4: a second YAML document (after ---) would be ignored"},
		{"dedup: {<<: [1]}\n", "line 1: dedup: a merge (<<) takes a mapping or a list of mappings, got 1"},
		{"? [a]\n: 1\n", "line 1: a field name is a plain word, not a list"},
		// A type that decodes itself: confyaml checks its fields first...
		{"source: {type: static, tmeout: 1s}\n", "line 1: source.tmeout: unknown field (did you mean timeout?)"},
		{"source:\n  timeout: 5\n", "line 2: source.timeout: 5 has no unit"},
		// ...and reports what it returns against the field it names.
		{"source:\n  ids: [a, '']\n", "line 2: source.ids[1]: empty"},
		{"source:\n  type: [a]\n", "line 2: source.type: want a string, got a list"},
	}
	for _, tc := range cases {
		c := defaults()
		_, err := Decode([]byte(tc.doc), &c)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: got %v (%T), want an *Error", tc.doc, err, err)
			continue
		}
		if len(e.Problems) != 1 || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant one problem starting %q", tc.doc, err, tc.want)
		}
	}
}

// All problems come back together, in file order.
func TestDecodeCollectsEveryProblem(t *testing.T) {
	doc := "redundncy: 3\nwarmup: 5\ndedup:\n  max_entries: many\n  window: 1m\nbody: 8MiB\non: maybe\n"
	c := defaults()
	_, err := Decode([]byte(doc), &c)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v", err)
	}
	var got []string
	for _, p := range e.Problems {
		got = append(got, fmt.Sprintf("%d %s", p.Line, p.Path))
	}
	want := []string{"1 redundncy", "2 warmup", "4 dedup.max_entries", "7 on"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems %q, want %q\n%v", got, want, err)
	}
	if !strings.HasPrefix(err.Error(), "4 problems:\n  line 1: redundncy:") {
		t.Errorf("message %q", err)
	}
	// What was right is still decoded, so a caller may look at it.
	if c.Dedup.Window != time.Minute || c.Body != 8<<20 {
		t.Errorf("good fields not decoded: %+v", c)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "redundncy" {
		t.Errorf("errors.As FieldError: %v", fe)
	}
}

func TestDecodeBoundsProblems(t *testing.T) {
	var b strings.Builder
	for i := range MaxProblems + 10 {
		fmt.Fprintf(&b, "bad%d: 1\n", i)
	}
	c := defaults()
	_, err := Decode([]byte(b.String()), &c)
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != MaxProblems+1 || e.Problems[MaxProblems].Msg != "and 10 more problems" {
		t.Fatalf("got %v", err)
	}
}

// A billion-laughs document (each level an alias used ten times) is
// refused instead of expanded.
func TestDecodeRefusesAliasExpansion(t *testing.T) {
	doc := "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i <= 9; i++ {
		p := fmt.Sprintf("*a%d", i-1)
		doc += fmt.Sprintf("a%d: &a%d [%s]\n", i, i, strings.Repeat(p+", ", 9)+p)
	}
	var v struct {
		A0 []string                     `yaml:"a0"`
		A1 [][]string                   `yaml:"a1"`
		A2 [][][]string                 `yaml:"a2"`
		A3 [][][][]string               `yaml:"a3"`
		A4 [][][][][]string             `yaml:"a4"`
		A5 [][][][][][]string           `yaml:"a5"`
		A6 [][][][][][][]string         `yaml:"a6"`
		A7 [][][][][][][][]string       `yaml:"a7"`
		A8 [][][][][][][][][]string     `yaml:"a8"`
		A9 [][][][][][][][][][][]string `yaml:"a9"`
	}
	_, err := Decode([]byte(doc), &v)
	if err == nil || !strings.Contains(err.Error(), "the document expands too far through aliases") {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeNeedsPointer(t *testing.T) {
	var c config
	if _, err := Decode([]byte("listen: x"), c); err == nil {
		t.Fatal("a non-pointer was accepted")
	}
	if _, err := Decode([]byte("listen: x"), (*config)(nil)); err == nil {
		t.Fatal("a nil pointer was accepted")
	}
}

func TestDocLine(t *testing.T) {
	doc := "listen: x\ndedup:\n  window: 1s\nupstreams:\n  example.com:\n    window: 2s\ntags:\n  - a\n  - b\n"
	var c config
	d, err := Decode([]byte(doc), &c)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{
		"listen":                       1,
		"dedup.window":                 3,
		"dedup.max_entries":            2, // absent: its parent's line
		"upstreams.example.com.window": 6, // a key with dots
		"tags[1]":                      9,
		"tags[7]":                      7,
		"token":                        0,
		"":                             1,
	} {
		if got := d.Line(path); got != want {
			t.Errorf("Line(%q) = %d, want %d", path, got, want)
		}
	}
	if got := d.Errorf("dedup.window", "%v must be positive", 0).Error(); got != "line 3: dedup.window: 0 must be positive" {
		t.Errorf("Errorf: %q", got)
	}
	var none *Doc
	if none.Line("a") != 0 {
		t.Error("nil Doc has lines")
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1500": 1500, "12B": 12, "64KiB": 64 << 10, "8MiB": 8 << 20, "1GiB": 1 << 30,
		"64KB": 64_000, "8MB": 8_000_000, "2GB": 2_000_000_000, " 3 MiB ": 3 << 20,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "8 mib", "9999999999GiB", "1TB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	for s, want := range map[Size]string{0: "0", 1500: "1500", 8 << 20: "8MiB", 2_000_000: "2MB", 1536: "1536"} {
		if got := s.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(s), got, want)
		}
	}
	// Size reads the same through the YAML library alone.
	var v struct {
		S Size `yaml:"s"`
	}
	if err := yaml.Unmarshal([]byte("s: 64KiB"), &v); err != nil || v.S != 64<<10 {
		t.Errorf("yaml.Unmarshal: %v %v", v.S, err)
	}
	if err := yaml.Unmarshal([]byte("s: big"), &v); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("yaml.Unmarshal of a bad size: %v", err)
	}
}

// A Duration takes a unit like a time.Duration and refuses a negative
// length, through Decode and through the YAML library alone.
func TestDuration(t *testing.T) {
	type timeouts struct {
		Dial Duration `yaml:"dial"`
		Idle Duration `yaml:"idle"`
	}
	var v timeouts
	if _, err := Decode([]byte("dial: 250ms\nidle: 0\n"), &v); err != nil || v.Dial.D() != 250*time.Millisecond || v.Idle != 0 {
		t.Fatalf("Decode: %+v, %v", v, err)
	}
	for in, want := range map[string]string{
		"dial: -1s\n":         `line 1: dial: "-1s" is negative`,
		"idle: 5\n":           "line 1: idle: 5 has no unit",
		"dial: soon\n":        `line 1: dial: "soon" is not a duration`,
		"dial: [1s]\n":        "line 1: dial: want a duration like 5s, got a list",
		"dial: 1s\ndia: 2s\n": "line 2: dia: unknown field (did you mean dial?)",
	} {
		if _, err := Decode([]byte(in), &v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want %q", in, err, want)
		}
	}
	if got := Duration(90 * time.Second).String(); got != "1m30s" {
		t.Errorf("String() = %q", got)
	}
	if err := yaml.Unmarshal([]byte("dial: 2s"), &v); err != nil || v.Dial.D() != 2*time.Second {
		t.Errorf("yaml.Unmarshal: %v %v", v.Dial, err)
	}
	if err := yaml.Unmarshal([]byte("dial: -2s"), &v); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("yaml.Unmarshal of a negative duration: %v", err)
	}
}

// DecodeNode decodes a section kept for later with Decode's rules, its
// paths under the section's own and its lines the file's.
func TestDecodeNode(t *testing.T) {
	var file struct {
		Name     string    `yaml:"name"`
		Settings yaml.Node `yaml:"settings"`
	}
	if _, err := Decode([]byte("name: a\nsettings:\n  window: 5\n  max_entris: 3\n"), &file); err != nil {
		t.Fatal(err)
	}
	var l limits
	_, err := DecodeNode(&file.Settings, &l, "x.settings")
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != 2 {
		t.Fatalf("DecodeNode = %v, want two problems", err)
	}
	for i, want := range []string{"line 3: x.settings.window: 5 has no unit", "line 4: x.settings.max_entris: unknown field (did you mean max_entries?)"} {
		if got := e.Problems[i].Error(); !strings.HasPrefix(got, want) {
			t.Errorf("problem %d = %q, want %q", i, got, want)
		}
	}

	doc, err := DecodeNode(&file.Settings, &struct{}{}, "s")
	if err == nil || !strings.Contains(err.Error(), "line 3: s.window: unknown field (this section takes no settings)") {
		t.Errorf("into an empty struct: %v", err)
	}
	for path, want := range map[string]int{"s": 3, "s.max_entris": 4, "s.nope": 3, "sx": 0, "other": 0} {
		if got := doc.Line(path); got != want {
			t.Errorf("Line(%q) = %d, want %d", path, got, want)
		}
	}

	var root yaml.Node // a whole document node is read from its value
	if err := yaml.Unmarshal([]byte("window: 2s\n"), &root); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeNode(&root, &l, ""); err != nil || l.Window != 2*time.Second {
		t.Errorf("document node: %+v, %v", l, err)
	}
	l = limits{MaxEntries: 7}
	if _, err := DecodeNode(&yaml.Node{}, &l, "s"); err != nil || l.MaxEntries != 7 {
		t.Errorf("zero node: %+v, %v", l, err)
	}
	if _, err := DecodeNode(nil, l, "s"); err == nil {
		t.Error("DecodeNode into a non-pointer succeeded")
	}
}

// Problems are listed by line, stably, those without a line last.
func TestSortProblems(t *testing.T) {
	ps := []*FieldError{{Path: "a", Line: 18}, {Path: "b"}, {Path: "c", Line: 3}, {Path: "d", Line: 18}, {Path: "e"}, {Path: "f", Line: 13}}
	SortProblems(ps)
	var got []string
	for _, p := range ps {
		got = append(got, p.Path)
	}
	if strings.Join(got, "") != "cfadbe" {
		t.Fatalf("order %v, want c f a d b e", got)
	}
}

// A section without fields says so, not "want a mapping of fields ()".
func TestDecodeNoFieldsSection(t *testing.T) {
	var v struct {
		Settings struct{} `yaml:"settings"`
	}
	_, err := Decode([]byte("settings: 5\n"), &v)
	if err == nil || err.Error() != "line 1: settings: this section takes no settings, got 5" {
		t.Fatalf("Decode = %v", err)
	}
	if _, err := Decode([]byte("settings: {}\n"), &v); err != nil {
		t.Fatalf("an empty mapping: %v", err)
	}
}
