package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Source types.
const (
	TypeStatic = "static"
	TypeFile   = "file"
	TypeHTTP   = "http"
)

// Limits.
const (
	DefaultTimeout = 10 * time.Second
	MaxBody        = 64 << 20 // bytes read from a file or an HTTP response
	MaxTaskID      = 256      // bytes in a task id
)

// Config says where the task list comes from. It sits under `source:` in the
// supervisor's YAML.
type Config struct {
	// Type is static, file or http.
	Type string `yaml:"type"`
	// Tasks is the list for type static.
	Tasks []protocol.Task `yaml:"tasks"`
	// Path of the YAML or JSON file for type file; read on every List.
	Path string `yaml:"path"`
	// URL answering GET with the list, for type http.
	URL string `yaml:"url"`
	// Timeout of one HTTP request (default 10s).
	Timeout time.Duration `yaml:"timeout"`
}

// UnmarshalYAML decodes the config; the static tasks use the same format as a
// file (protocol.Task has JSON tags only, and its spec is raw JSON).
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		Type    string        `yaml:"type"`
		Tasks   yaml.Node     `yaml:"tasks"`
		Path    string        `yaml:"path"`
		URL     string        `yaml:"url"`
		Timeout time.Duration `yaml:"timeout"`
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	*c = Config{Type: raw.Type, Path: raw.Path, URL: raw.URL, Timeout: raw.Timeout}
	if raw.Tasks.Kind != 0 {
		tasks, problems := decodeTasks(&raw.Tasks, "source.tasks")
		if len(problems) > 0 {
			// A TypeError lists them all; the YAML library and confyaml
			// both report each one.
			return &yaml.TypeError{Errors: problems}
		}
		c.Tasks = tasks
	}
	return nil
}

// Validate checks c and fills defaults. The error, when not nil, is a
// *confyaml.Error listing every problem (a static list's included), each
// on its field's path ("source.url", "source.tasks[2].task_id"; "source"
// for a mix of fields), lines left to the caller, who has the file.
func (c *Config) Validate() error {
	var problems []*confyaml.FieldError
	bad := func(path, format string, args ...any) {
		problems = append(problems, &confyaml.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Timeout < 0 {
		bad("source.timeout", "%v is negative", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch c.Type {
	case TypeStatic:
		if c.Path != "" || c.URL != "" {
			bad("source", "type static takes tasks, not path or url")
		}
		problems = append(problems, checkTasks(c.Tasks, "source.tasks", nil)...)
	case TypeFile:
		if c.Path == "" {
			bad("source.path", "required for type file")
		}
		if len(c.Tasks) > 0 || c.URL != "" {
			bad("source", "type file takes path, not tasks or url")
		}
	case TypeHTTP:
		if c.URL == "" {
			bad("source.url", "required for type http")
		} else if u, err := url.Parse(c.URL); err != nil {
			bad("source.url", "%v", err)
		} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("source.url", "%q is not an http(s) URL with a host", u.Redacted())
		}
		if len(c.Tasks) > 0 || c.Path != "" {
			bad("source", "type http takes url, not tasks or path")
		}
	case "":
		bad("source.type", "required (static, file or http)")
	default:
		bad("source.type", "unknown %q (want static, file or http)", c.Type)
	}
	if len(problems) == 0 {
		return nil
	}
	return &confyaml.Error{Problems: problems}
}

// Source lists the tasks to run now.
type Source interface {
	List(ctx context.Context) ([]protocol.Task, error)
}

// Open validates c and returns its Source.
func Open(c Config) (Source, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Type {
	case TypeStatic:
		return &Static{tasks: c.Tasks}, nil
	case TypeFile:
		return &File{Path: c.Path}, nil
	default:
		return &HTTP{URL: c.URL, Client: &http.Client{Timeout: c.Timeout}}, nil
	}
}

// Static is a fixed list.
type Static struct{ tasks []protocol.Task }

// List returns a copy of the list.
func (s *Static) List(context.Context) ([]protocol.Task, error) {
	return append([]protocol.Task(nil), s.tasks...), nil
}

// File reads the list from a file on every call, so editing the file
// changes the tasks at the next query.
type File struct{ Path string }

// List reads and parses the file.
func (f *File) List(context.Context) ([]protocol.Task, error) {
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil, fmt.Errorf("source.path: %w", err)
	}
	defer fh.Close()
	data, err := readLimited(fh)
	if err != nil {
		return nil, fmt.Errorf("source.path: %s: %w", f.Path, err)
	}
	tasks, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return tasks, nil
}

// HTTP fetches the list with GET.
type HTTP struct {
	URL    string
	Client *http.Client
}

// ErrStatus is returned (wrapped) when the server answers other than 2xx.
var ErrStatus = errors.New("source: unexpected HTTP status")

// List fetches and parses the list.
func (h *HTTP) List(ctx context.Context) ([]protocol.Task, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("source.url: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/yaml")
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("source: GET %s: %w", redacted(h.URL), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("%w: GET %s: %s: %s", ErrStatus, redacted(h.URL), resp.Status, strings.TrimSpace(string(snippet)))
	}
	data, err := readLimited(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("source: GET %s: %w", redacted(h.URL), err)
	}
	tasks, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("source: GET %s: %w", redacted(h.URL), err)
	}
	return tasks, nil
}

func redacted(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

func readLimited(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxBody {
		return nil, fmt.Errorf("larger than %d bytes", MaxBody)
	}
	return data, nil
}

// Parse reads a task list in YAML or JSON: {"tasks": [...]} or a bare array.
// Errors give the line and the element ("line 7: tasks[2].task_id: ...").
// An empty document is an empty list.
func Parse(data []byte) ([]protocol.Task, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("task list: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return []protocol.Task{}, nil
	}
	root := doc.Content[0]
	switch root.Kind {
	case yaml.SequenceNode:
		return parseTasks(root)
	case yaml.MappingNode:
		var list *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			k := root.Content[i]
			if k.Value == "tasks" {
				list = root.Content[i+1]
			} else {
				return nil, fmt.Errorf("line %d: unknown field %q (want tasks)", k.Line, k.Value)
			}
		}
		if list == nil {
			return nil, fmt.Errorf("line %d: no tasks field", root.Line)
		}
		if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
			return []protocol.Task{}, nil
		}
		return parseTasks(list)
	default:
		return nil, fmt.Errorf("line %d: a task list is an object with tasks or an array, not %s", root.Line, kindName(root))
	}
}

// parseTasks decodes a task list and checks it, reporting every problem
// with its line: first those of its shape, then, when it has none, those
// of its ids.
func parseTasks(n *yaml.Node) ([]protocol.Task, error) {
	tasks, shape := decodeTasks(n, "tasks")
	if len(shape) > 0 {
		if len(shape) == 1 {
			return nil, errors.New(shape[0])
		}
		count := len(shape)
		if count > confyaml.MaxProblems {
			shape = append(shape[:confyaml.MaxProblems], fmt.Sprintf("and %d more problems", count-confyaml.MaxProblems))
		}
		return nil, fmt.Errorf("%d problems:\n  %s", count, strings.Join(shape, "\n  "))
	}
	if problems := checkTasks(tasks, "tasks", func(i int) int { return n.Content[i].Line }); len(problems) > 0 {
		return nil, &confyaml.Error{Problems: problems}
	}
	return tasks, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "an array"
	}
	return "a document"
}

// decodeTasks turns a sequence node into tasks. It only decodes: what is
// not a task's shape (an element that is not an object, an unknown field,
// a task_id that is not a string) is a problem here, each one listed as
// "line N: field[i]...: why"; whether the ids are valid and distinct is
// checkTasks' question, asked afterwards so that every problem is found.
func decodeTasks(n *yaml.Node, field string) ([]protocol.Task, []string) {
	if n.Kind != yaml.SequenceNode {
		return nil, []string{fmt.Sprintf("line %d: %s: want an array, got %s", n.Line, field, kindName(n))}
	}
	tasks := make([]protocol.Task, 0, len(n.Content))
	var problems []string
	for i, el := range n.Content {
		at := fmt.Sprintf("%s[%d]", field, i)
		if el.Kind != yaml.MappingNode {
			problems = append(problems, fmt.Sprintf("line %d: %s: want an object with task_id, got %s", el.Line, at, kindName(el)))
			continue
		}
		var t protocol.Task
		for j := 0; j+1 < len(el.Content); j += 2 {
			k, v := el.Content[j], el.Content[j+1]
			switch k.Value {
			case "task_id":
				if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && v.Tag != "!!int") {
					problems = append(problems, fmt.Sprintf("line %d: %s.task_id: want a string", v.Line, at))
					continue
				}
				t.TaskID = v.Value
			case "spec":
				var spec any
				if err := v.Decode(&spec); err != nil {
					problems = append(problems, fmt.Sprintf("line %d: %s.spec: %v", v.Line, at, err))
					continue
				}
				raw, err := json.Marshal(spec)
				if err != nil {
					problems = append(problems, fmt.Sprintf("line %d: %s.spec: not representable as JSON: %v", v.Line, at, err))
					continue
				}
				if spec != nil {
					t.Spec = raw
				}
			default:
				problems = append(problems, fmt.Sprintf("line %d: %s: unknown field %q (want task_id, spec)", k.Line, at, k.Value))
			}
		}
		tasks = append(tasks, t)
	}
	return tasks, problems
}

func checkID(id string) error {
	switch {
	case id == "":
		return errors.New("required (missing or empty)")
	case len(id) > MaxTaskID:
		return fmt.Errorf("%d bytes, more than %d", len(id), MaxTaskID)
	case !utf8.ValidString(id):
		return errors.New("not valid UTF-8")
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q has a control character", id)
		}
	}
	return nil
}

// checkTasks checks every task's id (present, valid, not repeated) and
// spec, listing every problem found (at most confyaml.MaxProblems, then a
// count) as a field error under field ("source.tasks[2].task_id"). line,
// when not nil, gives task i's line, put on its problems and named by a
// duplicate; without it (a Config built in code, or one whose lines the
// caller finds by path) the first holder of a duplicate id is named by
// index.
func checkTasks(tasks []protocol.Task, field string, line func(i int) int) []*confyaml.FieldError {
	var problems []*confyaml.FieldError
	bad := func(i int, sub, format string, args ...any) {
		fe := &confyaml.FieldError{Path: fmt.Sprintf("%s[%d].%s", field, i, sub), Msg: fmt.Sprintf(format, args...)}
		if line != nil {
			fe.Line = line(i)
		}
		problems = append(problems, fe)
	}
	seen := map[string]int{}
	for i, t := range tasks {
		if err := checkID(t.TaskID); err != nil {
			bad(i, "task_id", "%v", err)
		} else if j, dup := seen[t.TaskID]; dup {
			if line != nil {
				bad(i, "task_id", "duplicate %q (first on line %d)", t.TaskID, line(j))
			} else {
				bad(i, "task_id", "duplicate %q (also %s[%d])", t.TaskID, field, j)
			}
		} else {
			seen[t.TaskID] = i
		}
		if len(t.Spec) > 0 && !json.Valid(t.Spec) {
			bad(i, "spec", "not valid JSON")
		}
	}
	if len(problems) > confyaml.MaxProblems {
		more := len(problems) - confyaml.MaxProblems
		problems = append(problems[:confyaml.MaxProblems], &confyaml.FieldError{Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return problems
}
