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
		tasks, err := decodeTasks(&raw.Tasks, "source.tasks")
		if err != nil {
			return err
		}
		c.Tasks = tasks
	}
	return nil
}

// Validate checks c, naming the bad field as "source.<field>", and fills
// defaults.
func (c *Config) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("source.timeout: %v is negative", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch c.Type {
	case TypeStatic:
		if c.Path != "" || c.URL != "" {
			return fmt.Errorf("source: type static takes tasks, not path or url")
		}
		return checkTasks(c.Tasks, "source.tasks")
	case TypeFile:
		if c.Path == "" {
			return fmt.Errorf("source.path: required for type file")
		}
		if len(c.Tasks) > 0 || c.URL != "" {
			return fmt.Errorf("source: type file takes path, not tasks or url")
		}
	case TypeHTTP:
		if c.URL == "" {
			return fmt.Errorf("source.url: required for type http")
		}
		u, err := url.Parse(c.URL)
		if err != nil {
			return fmt.Errorf("source.url: %w", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("source.url: %q is not an http(s) URL with a host", u.Redacted())
		}
		if len(c.Tasks) > 0 || c.Path != "" {
			return fmt.Errorf("source: type http takes url, not tasks or path")
		}
	case "":
		return fmt.Errorf("source.type: required (static, file or http)")
	default:
		return fmt.Errorf("source.type: unknown %q (want static, file or http)", c.Type)
	}
	return nil
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
		return decodeTasks(root, "tasks")
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
		return decodeTasks(list, "tasks")
	default:
		return nil, fmt.Errorf("line %d: a task list is an object with tasks or an array, not %s", root.Line, kindName(root))
	}
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

// decodeTasks turns a sequence node into tasks, checking each.
func decodeTasks(n *yaml.Node, field string) ([]protocol.Task, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s: want an array, got %s", n.Line, field, kindName(n))
	}
	tasks := make([]protocol.Task, 0, len(n.Content))
	firstLine := map[string]int{}
	for i, el := range n.Content {
		at := fmt.Sprintf("line %d: %s[%d]", el.Line, field, i)
		if el.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: want an object with task_id, got %s", at, kindName(el))
		}
		var t protocol.Task
		var seenID bool
		for j := 0; j+1 < len(el.Content); j += 2 {
			k, v := el.Content[j], el.Content[j+1]
			switch k.Value {
			case "task_id":
				if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && v.Tag != "!!int") {
					return nil, fmt.Errorf("%s.task_id: want a string", at)
				}
				t.TaskID, seenID = v.Value, true
			case "spec":
				var spec any
				if err := v.Decode(&spec); err != nil {
					return nil, fmt.Errorf("%s.spec: %w", at, err)
				}
				raw, err := json.Marshal(spec)
				if err != nil {
					return nil, fmt.Errorf("%s.spec: not representable as JSON: %w", at, err)
				}
				if spec != nil {
					t.Spec = raw
				}
			default:
				return nil, fmt.Errorf("line %d: %s[%d]: unknown field %q (want task_id, spec)", k.Line, field, i, k.Value)
			}
		}
		if !seenID {
			return nil, fmt.Errorf("%s.task_id: required", at)
		}
		if err := checkID(t.TaskID); err != nil {
			return nil, fmt.Errorf("%s.task_id: %w", at, err)
		}
		if l, dup := firstLine[t.TaskID]; dup {
			return nil, fmt.Errorf("%s.task_id: duplicate %q (first on line %d)", at, t.TaskID, l)
		}
		firstLine[t.TaskID] = el.Line
		tasks = append(tasks, t)
	}
	return tasks, nil
}

func checkID(id string) error {
	switch {
	case id == "":
		return errors.New("empty")
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

// checkTasks validates tasks built in code (a static list not read from YAML).
func checkTasks(tasks []protocol.Task, field string) error {
	seen := map[string]int{}
	for i, t := range tasks {
		if err := checkID(t.TaskID); err != nil {
			return fmt.Errorf("%s[%d].task_id: %w", field, i, err)
		}
		if j, dup := seen[t.TaskID]; dup {
			return fmt.Errorf("%s[%d].task_id: duplicate %q (also %s[%d])", field, i, t.TaskID, field, j)
		}
		if len(t.Spec) > 0 && !json.Valid(t.Spec) {
			return fmt.Errorf("%s[%d].spec: not valid JSON", field, i)
		}
		seen[t.TaskID] = i
	}
	return nil
}
