package confyaml

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Doc is a decoded document, kept so that validation after decoding can
// report the line of the field it refuses. The zero Doc (an empty file)
// knows no lines.
type Doc struct {
	root   *yaml.Node // the document's top value; nil when empty
	prefix string     // the path of root (DecodeNode); "" for a whole file
}

// Line returns the line of the field at path (dotted keys, [i] for list
// elements: "sink.url", "source.tasks[2].task_id"), or of its nearest
// parent that the file sets, or 0 when the file sets none of them.
// A key that itself contains dots ("example.com") is matched whole.
func (d *Doc) Line(path string) int {
	if d == nil || d.root == nil {
		return 0
	}
	if d.prefix != "" {
		rest, ok := strings.CutPrefix(path, d.prefix)
		if !ok || (rest != "" && rest[0] != '.' && rest[0] != '[') {
			return 0
		}
		path = strings.TrimPrefix(rest, ".")
	}
	n, line := d.root, 0
	if d.prefix != "" {
		line = n.Line // the section is the nearest parent present
	}
	for rest := path; rest != ""; {
		switch n.Kind {
		case yaml.AliasNode:
			if n.Alias == nil {
				return line
			}
			n = n.Alias
			continue
		case yaml.MappingNode:
			var next *yaml.Node
			best := ""
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if len(k) > len(best) && (rest == k || strings.HasPrefix(rest, k+".") || strings.HasPrefix(rest, k+"[")) {
					best, next = k, n.Content[i+1]
					line = n.Content[i].Line
				}
			}
			if next == nil {
				return line
			}
			rest = strings.TrimPrefix(strings.TrimPrefix(rest, best), ".")
			n = next
		case yaml.SequenceNode:
			idx, after, ok := cutIndex(rest)
			if !ok || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
			rest = strings.TrimPrefix(after, ".")
		default:
			return line
		}
	}
	if line == 0 {
		line = n.Line
	}
	return line
}

// cutIndex splits "[3].url" into 3 and ".url".
func cutIndex(s string) (int, string, bool) {
	if !strings.HasPrefix(s, "[") {
		return 0, "", false
	}
	num, after, ok := strings.Cut(s[1:], "]")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 {
		return 0, "", false
	}
	return i, after, true
}

// Errorf makes a FieldError for path at its line (see Line).
func (d *Doc) Errorf(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Line: d.Line(path), Msg: fmt.Sprintf(format, args...)}
}
