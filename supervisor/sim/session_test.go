package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// A worker running RoomSession against the simulator, driven by a minimal
// supervisor over a real WebSocket: it assigns two rooms (one by spec URL,
// one by base URL) and receives their messages as payloads.
func TestRoomSessionThroughWorker(t *testing.T) {
	_, sim := newSim(t, Config{Rooms: 3, Rate: 100, Heartbeat: 20 * time.Millisecond})
	var mu sync.Mutex
	var payloads []protocol.Payload
	var lastSeen time.Time
	sup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		spec, _ := json.Marshal(map[string]string{"url": sim.URL + "/rooms/room-1/events"})
		in, _ := json.Marshal(protocol.Instruction{Type: protocol.TypeInstruction, Add: []protocol.Task{{TaskID: "room-1", Spec: spec}, {TaskID: "room-2"}}})
		if err := c.Write(r.Context(), websocket.MessageText, in); err != nil {
			return
		}
		for {
			_, data, err := c.Read(r.Context())
			if err != nil {
				return
			}
			var env protocol.Envelope
			_ = json.Unmarshal(data, &env)
			mu.Lock()
			switch env.Type {
			case protocol.TypePayload:
				var p protocol.Payload
				_ = json.Unmarshal(data, &p)
				payloads = append(payloads, p)
			case protocol.TypeReport:
				var rep protocol.Report
				_ = json.Unmarshal(data, &rep)
				for _, ts := range rep.Tasks {
					if ts.LastSeen.After(lastSeen) {
						lastSeen = ts.LastSeen
					}
				}
			}
			mu.Unlock()
		}
	}))
	defer sup.Close()
	w, err := worker.New(worker.Config{URL: "ws" + strings.TrimPrefix(sup.URL, "http") + "/ws", WorkerID: "w1", MaxLoad: 5,
		Session: &RoomSession{Base: sim.URL}, ReportInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	testenv.Eventually(t, "payloads from both rooms and a last_seen", func() bool {
		mu.Lock()
		defer mu.Unlock()
		rooms := map[string]bool{}
		for _, p := range payloads {
			rooms[p.TaskID] = true
		}
		return rooms["room-1"] && rooms["room-2"] && !lastSeen.IsZero()
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range payloads {
		var m Message
		if err := json.Unmarshal(p.Data, &m); err != nil || m.Room != p.TaskID || p.MessageID != m.ID() || p.WorkerID != "w1" {
			t.Fatalf("payload %+v: message %+v, %v", p, m, err)
		}
	}
}
