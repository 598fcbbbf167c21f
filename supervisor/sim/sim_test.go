package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
)

func newSim(t *testing.T, c Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { cancel(); srv.Close() })
	return s, srv
}

// The room list is a task list the supervisor's http source accepts, and
// each spec points at a live stream.
func TestRoomsAsHTTPSource(t *testing.T) {
	_, srv := newSim(t, Config{Rooms: 5, Rate: 100})
	src, err := source.Open(source.Config{Type: "http", URL: srv.URL + "/rooms"})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := src.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 5 || tasks[0].TaskID != "room-1" || tasks[4].TaskID != "room-5" {
		t.Fatalf("tasks = %+v", tasks)
	}
	var spec struct{ URL string }
	if err := json.Unmarshal(tasks[2].Spec, &spec); err != nil || spec.URL != srv.URL+"/rooms/room-3/events" {
		t.Fatalf("spec = %s (%v)", tasks[2].Spec, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 10)
	go func() { _ = Watch(ctx, nil, spec.URL, func(e Event) { got <- e }) }()
	for e := range got {
		if e.Type == EventMessage {
			var m Message
			if err := json.Unmarshal(e.Data, &m); err != nil || m.Room != "room-3" || e.ID != m.ID() {
				t.Fatalf("message %q id %q: %v", e.Data, e.ID, err)
			}
			break
		}
	}
}

// Redundant watchers of one room see the same messages under the same ids.
func TestWatchersSeeTheSameStream(t *testing.T) {
	s, srv := newSim(t, Config{Rooms: 2, Rate: 200, Heartbeat: 20 * time.Millisecond})
	const watchers, want = 3, 30
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := make([]map[string]string, watchers) // id -> data
	beats := make([]int, watchers)
	for i := range seen {
		seen[i] = map[string]string{}
		go func() {
			_ = Watch(ctx, nil, srv.URL+"/rooms/room-1/events", func(e Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e.Type {
				case EventMessage:
					seen[i][e.ID] = string(e.Data)
				case EventHeartbeat:
					beats[i]++
				}
			})
		}()
	}
	testenv.Eventually(t, "three watchers", func() bool { return s.Stats().Watchers == watchers })
	// Messages from now on go to all three.
	mu.Lock()
	base := len(seen[0])
	mu.Unlock()
	testenv.Eventually(t, "messages and heartbeats at every watcher", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range seen {
			if len(seen[i]) < base+want || beats[i] < 3 {
				return false
			}
		}
		return true
	})
	cancel()
	mu.Lock()
	defer mu.Unlock()
	common := 0
	for id, data := range seen[0] {
		in := 0
		for i := 1; i < watchers; i++ {
			if d, ok := seen[i][id]; ok {
				in++
				if d != data {
					t.Fatalf("message %s differs between watchers: %s vs %s", id, data, d)
				}
			}
		}
		if in == watchers-1 {
			common++
		}
	}
	if common < want {
		t.Fatalf("only %d messages reached every watcher, want at least %d", common, want)
	}
}

func TestRoomGoneAndUnknown(t *testing.T) {
	s, srv := newSim(t, Config{Rooms: 3, Rate: 50})
	resp, err := http.Get(srv.URL + "/rooms/room-9/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown room: %d", resp.StatusCode)
	}
	done := make(chan error, 1)
	go func() { done <- Watch(context.Background(), nil, srv.URL+"/rooms/room-3/events", func(Event) {}) }()
	testenv.Eventually(t, "a watcher", func() bool { return s.Stats().Watchers == 1 })
	resp, err = http.Post(srv.URL+"/rooms?count=2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-done; !errors.Is(err, ErrRoomClosed) {
		t.Fatalf("Watch of a removed room = %v, want ErrRoomClosed", err)
	}
	for _, bad := range []string{"count=-1", "count=x", ""} {
		resp, err := http.Post(srv.URL+"/rooms?"+bad, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST /rooms?%s = %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Rooms: -1}, {Rate: -1}, {Rate: 1e6}, {Heartbeat: time.Minute}, {Heartbeat: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

func TestReadEvents(t *testing.T) {
	in := ": comment\nevent: message\nid: r:1\ndata: {\"a\":\ndata: 1}\n\nevent: heartbeat\ndata: {}\n\ndata: plain\n\n"
	var got []Event
	if err := ReadEvents(strings.NewReader(in), func(e Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "r:1" || string(got[0].Data) != "{\"a\":\n1}" || got[1].Type != EventHeartbeat || got[2].Type != EventMessage || string(got[2].Data) != "plain" {
		t.Fatalf("events = %+v", got)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, e := range []Event{{Type: EventMessage, ID: "room-1:7", Data: []byte(`{"x":1}`)}, {Type: EventHeartbeat, Data: []byte("{}")}} {
		var out Event
		if err := ReadEvents(bytes.NewReader(e.encode()), func(g Event) error { out = g; return nil }); err != nil || out.Type != e.Type || out.ID != e.ID || !bytes.Equal(out.Data, e.Data) {
			t.Fatalf("round trip of %+v: %+v, %v", e, out, err)
		}
	}
}

func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("event: message\nid: r:1\ndata: {}\n\n"))
	f.Add([]byte("data: a\ndata: b\n\n: x\nevent\n\n"))
	f.Add([]byte("id\nid:\n\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		// Any input: no panic, and every event has a type.
		_ = ReadEvents(bytes.NewReader(in), func(e Event) error {
			if e.Type == "" {
				t.Fatalf("event without a type from %q", in)
			}
			return nil
		})
	})
}
