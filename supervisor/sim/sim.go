package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Defaults.
const (
	DefaultRooms     = 50
	DefaultRate      = 1.0
	DefaultHeartbeat = 10 * time.Second
	watcherBuffer    = 1024
)

// Config shapes the simulation.
type Config struct {
	Rooms     int           // number of rooms, room-1 … room-N (default 50)
	Rate      float64       // messages per second in each watched room (default 1)
	Heartbeat time.Duration // heartbeat interval on every stream (default 10s, at most 30s)
	Logger    *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Rooms < 0:
		return fmt.Errorf("rooms: %d is negative", c.Rooms)
	case c.Rate < 0:
		return fmt.Errorf("rate: %v is negative", c.Rate)
	case c.Rate > 10_000:
		return fmt.Errorf("rate: %v is more than 10000 messages/s per room", c.Rate)
	case c.Heartbeat < 0 || c.Heartbeat > 30*time.Second:
		return fmt.Errorf("heartbeat: %v is not in (0, 30s] (a room is dead after 30 s of silence)", c.Heartbeat)
	}
	if c.Rooms == 0 {
		c.Rooms = DefaultRooms
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Message is what a room sends: the same for every watcher.
type Message struct {
	Room string    `json:"room"`
	Seq  uint64    `json:"seq"`
	Text string    `json:"text"`
	At   time.Time `json:"at"`
}

// ID is the message's id, shared by every watcher of the room.
func (m Message) ID() string { return m.Room + ":" + strconv.FormatUint(m.Seq, 10) }

// Server serves the rooms. Create it with New, mount Handler, and call Run to
// make the rooms talk.
type Server struct {
	c Config

	mu    sync.Mutex
	count int              // rooms room-1 … room-count exist
	rooms map[string]*room // rooms with watchers (or that had)
	sent  atomic.Uint64    // messages sent to watchers
	slow  atomic.Uint64    // messages a slow watcher missed
}

type room struct {
	seq      uint64
	watchers map[chan Message]struct{}
}

// New returns a Server.
func New(c Config) (*Server, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Server{c: c, count: c.Rooms, rooms: map[string]*room{}}, nil
}

// Stats of the simulation.
type Stats struct {
	Rooms    int    `json:"rooms"`
	Watchers int    `json:"watchers"`
	Sent     uint64 `json:"sent"`
	Missed   uint64 `json:"missed"` // dropped for watchers too slow to read
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := 0
	for _, r := range s.rooms {
		w += len(r.watchers)
	}
	return Stats{Rooms: s.count, Watchers: w, Sent: s.sent.Load(), Missed: s.slow.Load()}
}

// SetRooms changes the number of rooms; watchers of rooms that no longer
// exist see their stream end. A room that comes back continues its sequence,
// so message ids are never reused.
func (s *Server) SetRooms(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count = n
	for name, r := range s.rooms {
		if !s.existsLocked(name) {
			for ch := range r.watchers {
				close(ch)
				delete(r.watchers, ch)
			}
		}
	}
}

func roomName(i int) string { return "room-" + strconv.Itoa(i) }

func (s *Server) existsLocked(name string) bool {
	var i int
	if _, err := fmt.Sscanf(name, "room-%d", &i); err != nil || roomName(i) != name {
		return false
	}
	return i >= 1 && i <= s.count
}

// Run makes every watched room send Rate messages per second until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(time.Duration(float64(time.Second) / s.c.Rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.tick(now)
		}
	}
}

func (s *Server) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, r := range s.rooms {
		if len(r.watchers) == 0 {
			continue
		}
		r.seq++
		m := Message{Room: name, Seq: r.seq, Text: fmt.Sprintf("message %d in %s", r.seq, name), At: now.UTC()}
		for ch := range r.watchers {
			select {
			case ch <- m:
				s.sent.Add(1)
			default:
				s.slow.Add(1)
			}
		}
	}
}

func (s *Server) watch(name string) (chan Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.existsLocked(name) {
		return nil, false
	}
	r := s.rooms[name]
	if r == nil {
		r = &room{watchers: map[chan Message]struct{}{}}
		s.rooms[name] = r
	}
	ch := make(chan Message, watcherBuffer)
	r.watchers[ch] = struct{}{}
	return ch, true
}

func (s *Server) unwatch(name string, ch chan Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rooms[name]; r != nil {
		delete(r.watchers, ch)
	}
}

// Handler serves:
//
//	GET  /rooms                 the rooms as a task list: {"tasks":[{"task_id":"room-1","spec":{"url":"http://host/rooms/room-1/events"}}]}
//	POST /rooms?count=N         set the number of rooms (to demo task queries)
//	GET  /rooms/{room}/events   the room's stream (text/event-stream)
//	GET  /stats                 counters
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rooms", s.list)
	mux.HandleFunc("POST /rooms", s.setCount)
	mux.HandleFunc("GET /rooms/{room}/events", s.events)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
	})
	return mux
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := s.count
	s.mu.Unlock()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	type spec struct {
		URL string `json:"url"`
	}
	tasks := make([]protocol.Task, n)
	for i := range tasks {
		name := roomName(i + 1)
		b, _ := json.Marshal(spec{URL: scheme + "://" + r.Host + "/rooms/" + name + "/events"})
		tasks[i] = protocol.Task{TaskID: name, Spec: b}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"tasks": tasks})
}

func (s *Server) setCount(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("count"))
	if err != nil || n < 0 || n > 1_000_000 {
		http.Error(w, "count: want an integer in [0, 1000000]", http.StatusBadRequest)
		return
	}
	s.SetRooms(n)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("room")
	ch, ok := s.watch(name)
	if !ok {
		http.Error(w, fmt.Sprintf("room %q does not exist", name), http.StatusNotFound)
		return
	}
	defer s.unwatch(name, ch)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	hb := time.NewTicker(s.c.Heartbeat)
	defer hb.Stop()
	// A heartbeat at once tells the watcher the room is live before the
	// first message.
	if err := writeEvent(w, rc, Event{Type: EventHeartbeat}); err != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case m, open := <-ch:
			if !open {
				_ = writeEvent(w, rc, Event{Type: EventClosed})
				return
			}
			data, _ := json.Marshal(m)
			if err := writeEvent(w, rc, Event{Type: EventMessage, ID: m.ID(), Data: data}); err != nil {
				return
			}
		case <-hb.C:
			if err := writeEvent(w, rc, Event{Type: EventHeartbeat}); err != nil {
				return
			}
		}
	}
}

func writeEvent(w http.ResponseWriter, rc *http.ResponseController, e Event) error {
	if _, err := w.Write(e.encode()); err != nil {
		return err
	}
	return rc.Flush()
}

// ErrRoomClosed is returned by Watch when the room went away.
var ErrRoomClosed = errors.New("sim: room closed")
