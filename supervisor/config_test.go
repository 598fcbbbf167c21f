package supervisor

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/loopback"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

const goodYAML = `listen: 127.0.0.1:7300
token: t0ken
warmup: 10s
redundancy: 3
source:
  type: static
  tasks:
    - task_id: room-1
      spec: {url: "http://127.0.0.1:7400/rooms/room-1/events"}
sink:
  type: stdout
dedup:
  window: 1m
`

func TestParseConfigDefaultsAndValues(t *testing.T) {
	c, err := ParseConfig([]byte(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	if c.Warmup != 10*time.Second || c.Redundancy != 3 || c.WorkerTimeout != 30*time.Second ||
		c.QueryInterval != 30*time.Minute || c.Tick != time.Second || c.Dedup.Window != time.Minute ||
		c.Dedup.MaxEntries != 1_000_000 || c.Rebalance.Threshold != 0.1 || len(c.Source.Tasks) != 1 {
		t.Fatalf("parsed %+v", c)
	}
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte(goodYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path + ".missing"); err == nil {
		t.Fatal("missing file accepted")
	}
}

// Bad configs are refused naming the field and its line.
func TestParseConfigRefusesBadFields(t *testing.T) {
	base := "token: t\nsource: {type: static, tasks: []}\n"
	cases := []struct{ yaml, want string }{
		{"token: t\nsource: {type: static}\nredundancy: 0\n", "line 3: redundancy: 0 is not between 1 and 64"},
		{base + "tick: 0s\n", "line 3: tick"},
		{base + "worker_timeout: 10ms\n", "line 3: worker_timeout: 10ms is shorter than tick"},
		{base + "warmup: -1s\n", "line 3: warmup"},
		{base + "listen: nowhere\n", "line 3: listen"},
		{"listen: 0.0.0.0:7300\nsource: {type: static}\n", "token: required because listen \"0.0.0.0:7300\" is not a loopback address"},
		{base + "dedup:\n  window: 0s\n", "line 4: dedup.window"},
		{base + "dedup:\n  max_entries: -1\n", "line 4: dedup.max_entries"},
		{base + "rebalance:\n  threshold: 2\n", "line 4: rebalance.threshold"},
		{base + "redundency: 2\n", "line 3: redundency: unknown field (did you mean redundancy?)"},
		{base + "warmup: 5\n", "line 3: warmup: 5 has no unit"},
		{base + "dedup:\n  windw: 1m\n", "line 4: dedup.windw: unknown field (did you mean window?)"},
		{"token: t\nsource:\n  type: static\n  timout: 1s\n", "line 4: source.timout: unknown field (did you mean timeout?)"},
		{base + "warmup: soon\n", "line 3"},
		{"token: t\n", "source.type: required"},
		{"token: t\nsource: {type: static}\nha: {database: 'sqlite:///x', advertise: 'ws://h/ws'}\n", "line 3: ha.database: want a postgres:// or mysql:// URL"},
		{"token: t\nsource: {type: static}\nha: {database: 'postgres://db/x'}\n", "line 3: ha.advertise: required"},
		{"token: t\nsource: {type: static}\nha: {database: 'mysql://db/x', advertise: 'ws://h/ws', lease: 2s}\n", "ha.lease: 2s is shorter than five ticks"},
		{"token: t\nsource:\n  type: ftp\n", "line 3: source.type: unknown"},
		{"token: t\nsource: {type: static}\ndedup: {path: w.dedup}\nha: {database: 'postgres://db/x', advertise: 'ws://h/ws'}\n", "line 3: dedup.path: not used with ha.database"},
		{base + "sink:\n  type: nats\n  url: nats://127.0.0.1:4222\n", "line 3: sink.subject: required"},
		{base + "sink:\n  type: rabbitmq\n  url: http://x\n", "line 5: sink.url"},
		{"token: [\n", "invalid YAML"},
	}
	for _, tc := range cases {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

// Validation reports every problem at once, each with its field and line,
// in the order of the fields, the source's and the sink's included.
func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := ParseConfig([]byte("token: t\nredundancy: 0\ntick: 0s\nsource:\n  type: ftp\ndedup:\n  window: 0s\nsink:\n  type: nats\n  url: nats://127.0.0.1:4222\n"))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("ParseConfig = %v (%T), want a *ConfigError", err, err)
	}
	want := []string{ // in file order
		"line 2: redundancy: 0 is not between 1 and 64",
		"line 3: tick: 0s is below 1ms", // and no "shorter than tick" for the timeouts measured in it
		"line 5: source.type: unknown \"ftp\"",
		"line 7: dedup.window: 0s must be positive",
		"line 8: sink.subject: required",
	}
	if len(ce.Problems) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(ce.Problems), len(want), err)
	}
	for i, w := range want {
		if got := ce.Problems[i].Error(); !strings.HasPrefix(got, w) {
			t.Errorf("problem %d = %q, want %q", i, got, w)
		}
	}
	if !strings.HasPrefix(err.Error(), "5 problems:\n  line 2: redundancy") {
		t.Errorf("message: %q", err)
	}

	// A missing token is on listen's line, which requires it; problems
	// not in the file come last.
	_, err = ParseConfig([]byte("send_queue: 0\nlisten: 0.0.0.0:7300\nsource: {type: static}\n"))
	if !errors.As(err, &ce) || len(ce.Problems) != 2 || ce.Problems[0].Path != "send_queue" || ce.Problems[1].Error() != `line 2: token: required because listen "0.0.0.0:7300" is not a loopback address (workers and admin calls authenticate with it): set token in the file or FULCRUM_TOKEN` {
		t.Errorf("missing token: %v", err)
	}
	_, err = ParseConfigWith([]byte("source: {type: static}\nsend_queue: 0\n"), func(c *Config) { c.Listen = "0.0.0.0:7300" })
	if !errors.As(err, &ce) || len(ce.Problems) != 2 || ce.Problems[0].Path != "send_queue" || ce.Problems[1].Path != "token" || ce.Problems[1].Line != 0 {
		t.Errorf("problems not in the file come last: %v", err)
	}

	// A Config built in Go gets the same list, without lines.
	c := DefaultConfig()
	c.Listen, c.SendQueue, c.Source.Type = "0.0.0.0:7300", 0, "static"
	err = c.Validate()
	if !errors.As(err, &ce) || len(ce.Problems) != 2 || ce.Problems[0].Path != "token" || ce.Problems[1].Path != "send_queue" || ce.Problems[0].Line != 0 {
		t.Errorf("Validate = %v, want token and send_queue", err)
	}

	// Every problem of a static task list, not only the first, each on its line.
	_, err = ParseConfig([]byte("token: t\nsource:\n  type: static\n  tasks:\n    - task_id: a\n    - task_id: \"\"\n    - spec: {x: 1}\n    - task_id: a\n"))
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("task list with 3 problems: %v", err)
	}
	for i, w := range []string{"line 6: source.tasks[1].task_id: required", "line 7: source.tasks[2].task_id: required", `line 8: source.tasks[3].task_id: duplicate "a"`} {
		if got := ce.Problems[i].Error(); !strings.HasPrefix(got, w) {
			t.Errorf("problem %d = %q, want %q", i, got, w)
		}
	}

	// Every problem of the sink, each on its own line; one missing from
	// the file (sink.subject) on its section's.
	_, err = ParseConfig([]byte("token: t\nsource: {type: static}\nsink:\n  type: nats\n  url: amqp://h/\n  exchange: x\n  buffer: -1\n"))
	if !errors.As(err, &ce) || len(ce.Problems) != 4 {
		t.Fatalf("sink with 4 problems: %v", err)
	}
	for i, w := range []string{"line 3: sink.subject: required", "line 5: sink.url: scheme", "line 6: sink.exchange: only used by type rabbitmq", "line 7: sink.buffer: -1 is negative"} {
		if got := ce.Problems[i].Error(); !strings.HasPrefix(got, w) {
			t.Errorf("problem %d = %q, want %q", i, got, w)
		}
	}

	// The source's and sink's own paths, indexes included, find their lines.
	_, err = ParseConfig([]byte("token: t\nsource:\n  type: static\n  tasks:\n    - task_id: a\n    - task_id: a\n"))
	if err == nil || !strings.Contains(err.Error(), "line 6: source.tasks[1].task_id: duplicate") {
		t.Errorf("duplicate task: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodYAML))
	f.Add([]byte("token: t\nsource: {type: http, url: 'http://x/rooms'}\nsink: {type: nats, url: 'nats://x', subject: a.b}\n"))
	f.Add([]byte("token: t\nsource: {type: file, path: /tmp/x}\nrebalance: {threshold: .5}\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("- a\n- b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		// What parses must be valid and start-able in principle.
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config fails Validate: %v", err)
		}
		if host, _, _ := net.SplitHostPort(c.Listen); c.Tick <= 0 || c.Redundancy < 1 || (c.Token == "" && !loopback.Is(host)) {
			t.Fatalf("accepted %+v", c)
		}
	})
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"report","worker_id":"w1","max_load":10,"tasks":[{"task_id":"a","last_seen":"2026-01-02T15:04:05Z"}]}`,
		`{"type":"payload","worker_id":"w1","task_id":"a","message_id":"a:1","data":{"x":1}}`,
		`{"type":"payload","worker_id":"w1","task_id":"a","data":"text"}`,
		`{"type":"report","worker_id":"w1","max_load":9223372036854775807}`,
		`{"type":"instruction"}`, `{"type":5}`, `[]`, `null`, `{"type":"report","tasks":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := decodeMessage(data)
		if err != nil {
			if msg != nil || err.Error() == "" {
				t.Fatalf("error %v with message %v", err, msg)
			}
			return
		}
		switch m := msg.(type) {
		case *protocolReport:
			if m.WorkerID == "" || m.MaxLoad < 1 || m.MaxLoad > maxMaxLoad {
				t.Fatalf("accepted report %+v", m)
			}
			// The engine takes whatever decodes.
			e, _ := NewEngine(2)
			e.Assign(tasks(0, 3), nil, false)
			ids := make([]string, len(m.Tasks))
			for i, ts := range m.Tasks {
				ids[i] = ts.TaskID
			}
			e.Report(m.WorkerID, m.MaxLoad, ids, true)
			check(t, e, fleet{}, false)
		case *protocolPayload:
			if m.WorkerID == "" || m.TaskID == "" || len(m.Data) == 0 {
				t.Fatalf("accepted payload %+v", m)
			}
		default:
			t.Fatalf("decoded %T", msg)
		}
	})
}

type (
	protocolReport  = protocol.Report
	protocolPayload = protocol.Payload
)

// dedup.path, like a file source's path, is read against the config
// file's folder, wherever the process was started.
func TestLoadConfigResolvesDedupPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "supervisor.yaml")
	if err := os.WriteFile(path, []byte("source: {type: static}\ndedup: {path: state/window}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "state", "window"); c.Dedup.Path != want {
		t.Fatalf("dedup.path = %q, want %q", c.Dedup.Path, want)
	}
}
