package confyaml

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxProblems bounds how many problems one Error lists; the rest are
// counted in a last line.
const MaxProblems = 50

// Decode parses data as one YAML document and decodes it into v, a non-nil
// pointer, usually to a struct already holding the defaults: what the file
// leaves out (or sets to null) keeps its value. An empty document leaves v
// as it was.
//
// The error, when not nil, is an *Error listing every problem. The Doc is
// returned whenever the YAML parsed, even with decoding problems, so that
// the caller's validation can name lines too.
func Decode(data []byte, v any) (*Doc, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, fmt.Errorf("confyaml: Decode needs a non-nil pointer, got %T", v)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &Doc{}, nil
		}
		return nil, &Error{Problems: []*FieldError{syntaxError(err)}}
	}
	d := &decoder{maxSteps: 100*countNodes(&root, 0) + 100_000}
	for { // later documents: only empty ones (a trailing "---") may follow
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.errs = append(d.errs, syntaxError(err))
			break
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			d.fail(&extra, "", "a second YAML document (after ---) would be ignored: keep the whole configuration in one")
			break
		}
	}
	doc := &Doc{}
	if len(root.Content) > 0 {
		doc.root = root.Content[0]
		d.value(doc.root, rv.Elem(), "")
	}
	return doc, d.result()
}

// DecodeNode is Decode for YAML already parsed: a section kept as a
// yaml.Node to be decoded later by whoever owns it (a strategy's
// settings), or a document the caller looked at first. The rules are
// Decode's; every path in the errors starts with path, and so do the
// paths the returned Doc's Line takes. A nil or zero node leaves v as it
// was.
func DecodeNode(n *yaml.Node, v any, path string) (*Doc, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, fmt.Errorf("confyaml: DecodeNode needs a non-nil pointer, got %T", v)
	}
	if n != nil && n.Kind == yaml.DocumentNode {
		var top *yaml.Node
		if len(n.Content) > 0 {
			top = n.Content[0]
		}
		n = top
	}
	doc := &Doc{prefix: path}
	if n == nil || n.Kind == 0 {
		return doc, nil
	}
	doc.root = n
	d := &decoder{maxSteps: 100*countNodes(n, 0) + 100_000}
	d.value(n, rv.Elem(), path)
	return doc, d.result()
}

// result is the problems found, in file order and bounded, as an *Error;
// nil when there are none.
func (d *decoder) result() error {
	if len(d.errs) == 0 {
		return nil
	}
	SortProblems(d.errs)
	if len(d.errs) > MaxProblems {
		more := len(d.errs) - MaxProblems
		d.errs = append(d.errs[:MaxProblems], &FieldError{Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return &Error{Problems: d.errs}
}

// syntaxError turns the parser's "yaml: line 3: mapping values are not
// allowed in this context" into a FieldError on line 3.
func syntaxError(err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	fe := &FieldError{}
	if _, e := fmt.Sscanf(msg, "line %d:", &fe.Line); e == nil {
		_, msg, _ = strings.Cut(msg, ":")
		msg = strings.TrimSpace(msg)
	}
	fe.Msg = "invalid YAML: " + msg
	return fe
}

func countNodes(n *yaml.Node, depth int) int {
	c := 1
	if depth < 10_000 {
		for _, k := range n.Content {
			c += countNodes(k, depth+1)
		}
	}
	return c
}

type decoder struct {
	errs []*FieldError
	// steps counts values decoded; an alias is walked again each time it
	// is used, so a small document could otherwise expand without bound.
	steps, maxSteps int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

var (
	nodeType            = reflect.TypeFor[yaml.Node]()
	sizeType            = reflect.TypeFor[Size]()
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType        = reflect.TypeFor[time.Duration]()
	lengthType          = reflect.TypeFor[Duration]()
)

// value decodes n into v, which is addressable.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	d.steps++
	if d.steps == d.maxSteps+1 {
		d.fail(n, path, "the document expands too far through aliases")
	}
	if d.steps > d.maxSteps {
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.fail(n, path, "alias to nothing")
			return
		}
		d.value(n.Alias, v, path)
		return
	}
	t := v.Type()
	if t == nodeType {
		v.Set(reflect.ValueOf(*n))
		return
	}
	if isNull(n) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
			v.SetZero()
		}
		return // anything else keeps its default
	}
	switch {
	case t == durationType || t == lengthType:
		d.duration(n, v, path)
		return
	case t == sizeType:
		d.size(n, v, path)
		return
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(n, v.Elem(), path)
		return
	case reflect.PointerTo(t).Implements(unmarshalerType):
		d.unmarshaler(n, v, path)
		return
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		d.scalar(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.Slice, reflect.Array:
		d.sequence(n, v, path)
	case reflect.Interface:
		d.library(n, v, path)
	default:
		d.scalar(n, v, path)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a duration like 5s, got %s", kindName(n))
		return
	}
	parse := parseDuration
	if v.Type() == lengthType {
		parse = parseLength
	}
	dur, err := parse(n.Value)
	if err != nil {
		d.fail(n, path, "%v", err)
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) size(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a size like 8MiB, got %s", kindName(n))
		return
	}
	s, err := ParseSize(n.Value)
	if err != nil {
		d.fail(n, path, "%v", err)
		return
	}
	v.SetInt(s)
}

// entry is one key and value of a mapping, after merge keys (<<) are
// resolved.
type entry struct{ key, val *yaml.Node }

// entries lists a mapping's keys as the YAML library reads them: the keys
// written in it, then those of its merge sources (<<: *anchor, or a list
// of anchors) that it does not set itself, the earlier source winning. A
// key written twice is an error.
func (d *decoder) entries(n *yaml.Node, path string, depth int) []entry {
	d.steps += len(n.Content) / 2 // merges walk their sources again, like aliases
	if d.steps > d.maxSteps {
		return nil
	}
	var out, merged []entry
	var sources []*yaml.Node
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			sources = append(sources, val)
			continue
		}
		if k.Kind == yaml.ScalarNode {
			if first, dup := seen[k.Value]; dup {
				d.fail(k, join(path, k.Value), "set twice (first on line %d)", first.Line)
				continue
			}
			seen[k.Value] = k
		}
		out = append(out, entry{k, val})
	}
	if len(sources) == 0 {
		return out
	}
	if depth > 32 {
		d.fail(n, path, "merges (<<) nested too deep")
		return out
	}
	var add func(src *yaml.Node, top bool)
	add = func(src *yaml.Node, top bool) {
		if src.Kind == yaml.AliasNode && src.Alias != nil {
			src = src.Alias
		}
		switch {
		case src.Kind == yaml.MappingNode:
			for _, e := range d.entries(src, path, depth+1) {
				if e.key.Kind == yaml.ScalarNode {
					if _, dup := seen[e.key.Value]; dup {
						continue
					}
					seen[e.key.Value] = e.key
				}
				merged = append(merged, e)
			}
		case src.Kind == yaml.SequenceNode && top:
			for _, c := range src.Content {
				add(c, false)
			}
		default:
			d.fail(src, path, "a merge (<<) takes a mapping or a list of mappings, got %s", kindName(src))
		}
	}
	for _, src := range sources {
		add(src, true)
	}
	return append(out, merged...)
}

func isMerge(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && (n.Tag == "" || n.Tag == "!" || n.ShortTag() == "!!merge")
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	info := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		if len(info.names) == 0 && info.inlineMap == nil {
			d.fail(n, path, "this section takes no settings, got %s", kindName(n))
			return
		}
		d.fail(n, path, "want a mapping of fields (%s), got %s", strings.Join(info.names, ", "), kindName(n))
		return
	}
	for _, e := range d.entries(n, path, 0) {
		if e.key.Kind != yaml.ScalarNode {
			d.fail(e.key, path, "a field name is a plain word, not %s", kindName(e.key))
			continue
		}
		name := e.key.Value
		p := join(path, name)
		f, ok := info.byName[name]
		if ok {
			d.value(e.val, fieldByIndex(v, f), p)
			continue
		}
		if info.inlineMap != nil {
			m := fieldByIndex(v, info.inlineMap)
			if m.IsNil() {
				m.Set(reflect.MakeMap(m.Type()))
			}
			val := reflect.New(m.Type().Elem()).Elem()
			d.value(e.val, val, p)
			m.SetMapIndex(reflect.ValueOf(name).Convert(m.Type().Key()), val)
			continue
		}
		d.fail(e.key, p, "%s", unknownField(name, info.names))
	}
}

func unknownField(name string, known []string) string {
	if s := Suggest(name, known); s != "" {
		return "unknown field (did you mean " + s + "?)"
	}
	if len(known) == 0 {
		return "unknown field (this section takes no settings)"
	}
	return "unknown field (known: " + strings.Join(known, ", ") + ")"
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if t.Key().Kind() == reflect.Interface {
		d.library(n, v, path) // map[any]...: the library's rules for keys
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(t))
	}
	for _, e := range d.entries(n, path, 0) {
		p := join(path, e.key.Value)
		k := reflect.New(t.Key()).Elem()
		before := len(d.errs)
		d.value(e.key, k, p)
		if len(d.errs) > before {
			continue
		}
		val := reflect.New(t.Elem()).Elem()
		d.value(e.val, val, p)
		v.SetMapIndex(k, val)
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if n.Kind == yaml.ScalarNode && t.Elem().Kind() == reflect.Uint8 {
		d.library(n, v, path) // []byte from a string or !!binary
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", kindName(n))
		return
	}
	if t.Kind() == reflect.Array {
		if len(n.Content) != t.Len() {
			d.fail(n, path, "want a list of %d, got %d", t.Len(), len(n.Content))
			return
		}
		for i, c := range n.Content {
			d.value(c, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		return
	}
	s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.value(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(s)
}

// scalar decodes a plain value (string, number, bool, or a
// TextUnmarshaler) with the YAML library's rules, naming the field and
// the value when it does not fit.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	want := wantOf(v.Type())
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want %s, got %s", want, kindName(n))
		return
	}
	if strings.HasPrefix(want, "an integer") && n.ShortTag() == "!!float" {
		// The library truncates 1.5 to 1; only a whole number (1e6) is one.
		if f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); err != nil || f != math.Trunc(f) {
			d.fail(n, path, "want %s, got %s", want, showValue(n))
			return
		}
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		var te *yaml.TypeError
		switch {
		case !errors.As(err, &te):
			d.fail(n, path, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		case n.ShortTag() == "!!int" && strings.HasPrefix(want, "an integer"):
			d.fail(n, path, "%s is out of range (%s)", showValue(n), v.Type())
		default:
			d.fail(n, path, "want %s, got %s", want, showValue(n))
		}
	}
}

// library decodes n with the YAML library alone (an interface, a map with
// interface keys, []byte) and reports its errors against path.
func (d *decoder) library(n *yaml.Node, v reflect.Value, path string) {
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.foreign(n, path, err)
	}
}

// unmarshaler hands n to a type's own UnmarshalYAML. A struct is first
// checked for unknown fields and unit-less durations, which the YAML
// library accepts inside UnmarshalYAML; when that finds a problem, the
// type's own decoding is skipped so each mistake is reported once.
func (d *decoder) unmarshaler(n *yaml.Node, v reflect.Value, path string) {
	if v.Kind() == reflect.Struct && n.Kind == yaml.MappingNode {
		before := len(d.errs)
		info := fieldsOf(v.Type())
		for _, e := range d.entries(n, path, 0) {
			if e.key.Kind != yaml.ScalarNode {
				continue
			}
			p := join(path, e.key.Value)
			f, ok := info.byName[e.key.Value]
			switch {
			case !ok && info.inlineMap == nil:
				d.fail(e.key, p, "%s", unknownField(e.key.Value, info.names))
			case ok && (f.typ == durationType || f.typ == lengthType || f.typ == sizeType):
				d.value(e.val, reflect.New(f.typ).Elem(), p)
			}
		}
		if len(d.errs) > before {
			return
		}
	}
	d.library(n, v, path)
}

// foreign turns errors from the YAML library or a type's UnmarshalYAML
// (which may start "line 7: " and may name their own field) into field
// errors under path.
func (d *decoder) foreign(n *yaml.Node, path string, err error) {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for _, s := range msgs {
		s = strings.TrimPrefix(s, "yaml: ")
		fe := &FieldError{Path: path, Line: n.Line}
		var line, col int
		if _, e := fmt.Sscanf(s, "line %d:", &line); e == nil {
			fe.Line = line
			_, s, _ = strings.Cut(s, ":")
			s = strings.TrimSpace(s)
			if _, e := fmt.Sscanf(s, "column %d:", &col); e == nil {
				_, s, _ = strings.Cut(s, ":")
				s = strings.TrimSpace(s)
			}
			key := ""
			if rest, ok := strings.CutPrefix(s, "field "); ok {
				key, _, _ = strings.Cut(rest, " ")
			}
			if sub := pathAt(n, line, col, key); sub != "" {
				fe.Path = joinPath(path, sub)
			}
		}
		// A message that names its field ("source.tasks[0].task_id: want
		// a string") keeps that name as the path.
		if named, msg, ok := strings.Cut(s, ": "); ok && !strings.ContainsAny(named, " \t") &&
			(path == "" || named == path || strings.HasPrefix(named, path+".") || strings.HasPrefix(named, path+"[")) {
			fe.Path, s = named, msg
		}
		fe.Msg = libraryMessage(s)
		d.errs = append(d.errs, fe)
	}
}

var (
	cannotUnmarshal = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
	notFound        = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
)

// libraryMessage rewords the YAML library's messages in a config author's
// terms ("cannot unmarshal !!int `5` into time.Duration" names Go types).
func libraryMessage(s string) string {
	if m := cannotUnmarshal.FindStringSubmatch(s); m != nil {
		got := map[string]string{"map": "a mapping", "seq": "a list"}[m[1]]
		if got == "" {
			got = m[2]
		}
		want := "a " + m[3]
		switch {
		case m[3] == "time.Duration":
			want = "a duration with a unit, like 5s"
		case strings.HasPrefix(m[3], "int") || strings.HasPrefix(m[3], "uint"):
			want = "an integer"
		case strings.HasPrefix(m[3], "float"):
			want = "a number"
		case m[3] == "bool":
			want = "true or false"
		case m[3] == "string":
			want = "a string"
		case strings.HasPrefix(m[3], "[]"):
			want = "a list"
		case strings.HasPrefix(m[3], "map["):
			want = "a mapping"
		}
		return "want " + want + ", got " + got
	}
	if m := notFound.FindStringSubmatch(s); m != nil {
		return "unknown field"
	}
	return s
}

// pathAt finds the field a library error is about: the mapping key named
// key on line, or the value at line:col, or else the first key on line.
// Only errors of a type's own UnmarshalYAML and of the library's decoding
// of interfaces need it: the walk itself knows the path of what it reads.
func pathAt(n *yaml.Node, line, col int, key string) string {
	exact, loose := "", ""
	var walk func(n *yaml.Node, path string, depth int)
	walk = func(n *yaml.Node, path string, depth int) {
		if depth > 100 {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				if k.Line == line && key != "" && k.Value == key {
					exact = p
				}
				if v.Line == line && v.Column == col {
					exact = p
				}
				if k.Line == line && loose == "" {
					loose = p
				}
				walk(v, p, depth+1)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Line == line && (c.Column == col || loose == "") {
					if c.Column == col {
						exact = p
					} else {
						loose = p
					}
				}
				walk(c, p, depth+1)
			}
		}
	}
	walk(n, "", 0)
	if exact != "" {
		return exact
	}
	return loose
}

// join adds a key to a path; keys longer than a field name could be are
// cut, so that a hostile key does not fill the error.
func join(path, key string) string {
	if len(key) > 64 {
		key = key[:61] + "..."
	}
	return joinPath(path, key)
}

func joinPath(path, sub string) string {
	switch {
	case path == "":
		return sub
	case sub == "":
		return path
	case strings.HasPrefix(sub, "["):
		return path + sub
	}
	return path + "." + sub
}

// field is one decodable struct field.
type field struct {
	index []int // through inlined structs
	typ   reflect.Type
}

type structInfo struct {
	byName    map[string]*field
	names     []string // in declaration order, for messages
	inlineMap *field   // a `,inline` map[string]T catching other keys
}

var structInfos sync.Map // reflect.Type -> *structInfo

// fieldsOf reads a struct's yaml tags as the YAML library does: the tag's
// name, else the lowercased field name; "-" skips; ",inline" on a struct
// lifts its fields, on a map[string]T catches unknown keys.
func fieldsOf(t reflect.Type) *structInfo {
	if si, ok := structInfos.Load(t); ok {
		return si.(*structInfo)
	}
	si := &structInfo{byName: map[string]*field{}}
	var add func(t reflect.Type, prefix []int)
	add = func(t reflect.Type, prefix []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() && !sf.Anonymous {
				continue
			}
			tag := sf.Tag.Get("yaml")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			index := append(slices.Clone(prefix), i)
			if slices.Contains(strings.Split(opts, ","), "inline") {
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				switch {
				case ft.Kind() == reflect.Struct:
					add(ft, index)
					continue
				case ft.Kind() == reflect.Map && ft.Key().Kind() == reflect.String && si.inlineMap == nil:
					si.inlineMap = &field{index: index, typ: ft}
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = strings.ToLower(sf.Name)
			}
			if _, dup := si.byName[name]; dup {
				continue // the outer one wins
			}
			si.byName[name] = &field{index: index, typ: sf.Type}
			si.names = append(si.names, name)
		}
	}
	add(t, nil)
	actual, _ := structInfos.LoadOrStore(t, si)
	return actual.(*structInfo)
}

// fieldByIndex is reflect's FieldByIndex, allocating nil pointers to
// inlined structs on the way.
func fieldByIndex(v reflect.Value, f *field) reflect.Value {
	for i, x := range f.index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// Describe names a value in a message the way confyaml's own messages do:
// a scalar as it was written (a string quoted, numbers and booleans bare,
// long ones cut), else its kind ("a mapping", "a list"). For a type's own
// UnmarshalYAML, so that its errors read like the rest.
func Describe(n *yaml.Node) string { return kindName(n) }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return showValue(n)
	}
	return "nothing"
}

// wantOf says in words what a Go type takes.
func wantOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer, not negative"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a value"
}

// showValue writes a scalar as the reader typed it: strings quoted,
// numbers and booleans bare, long ones cut.
func showValue(n *yaml.Node) string {
	if n.ShortTag() == "!!str" {
		return show(n.Value)
	}
	if len(n.Value) > 40 {
		return n.Value[:37] + "..."
	}
	return n.Value
}

// show quotes a value for a message, cut to 40 bytes.
func show(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q...", s[:37])
	}
	return fmt.Sprintf("%q", s)
}
