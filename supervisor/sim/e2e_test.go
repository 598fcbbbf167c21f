package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
	"github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// The whole demo over real sockets: the simulator's room list is the
// supervisor's http source, four SDK workers run RoomSession with k=2, and
// the supervisor publishes to a real NATS subject. Every room message the
// subscriber gets arrives exactly once, including across a worker's death;
// and messages of every room arrive.
func TestDemoEndToEnd(t *testing.T) {
	natsURL := testenv.NATS(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := fmt.Sprintf("fulcrum-test-e2e-%d", time.Now().UnixNano())
	var mu sync.Mutex
	count := map[string]int{}
	rooms := map[string]bool{}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		count[m.Header.Get("Nats-Msg-Id")]++
		rooms[m.Header.Get(sink.HeaderTaskID)] = true
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	_, simSrv := newSim(t, Config{Rooms: 6, Rate: 50, Heartbeat: 100 * time.Millisecond})

	cfg := supervisor.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Token = "e2e"
	cfg.Tick = 10 * time.Millisecond
	cfg.Warmup = 300 * time.Millisecond
	cfg.WorkerTimeout = time.Second
	cfg.TaskTimeout = time.Second
	cfg.Redundancy = 2
	cfg.Source = source.Config{Type: source.TypeHTTP, URL: simSrv.URL + "/rooms"}
	cfg.Sink = sink.Config{Type: sink.TypeNATS, URL: natsURL, Subject: subject}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup, err := supervisor.Start(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()

	stops := map[string]func(){}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("w%d", i)
		w, err := worker.New(worker.Config{URL: "ws://" + sup.Addr() + "/ws", Token: "e2e", WorkerID: id, MaxLoad: 6,
			Session: &RoomSession{}, ReportInterval: 100 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = w.Run(wctx); close(done) }()
		stops[id] = func() { wcancel(); <-done }
		defer stops[id]()
	}

	received := func() (ids, roomsSeen int) {
		mu.Lock()
		defer mu.Unlock()
		return len(count), len(rooms)
	}
	testenv.Eventually(t, "messages from all six rooms", func() bool { n, r := received(); return r == 6 && n > 100 })
	stops["w1"]() // a worker dies; its rooms move to the others
	before, _ := received()
	testenv.Eventually(t, "messages keep coming after the death", func() bool { n, _ := received(); return n > before+300 })

	mu.Lock()
	defer mu.Unlock()
	for id, n := range count {
		if n != 1 {
			t.Fatalf("message %s published %d times, want once", id, n)
		}
		if !strings.HasPrefix(id, "room-") {
			t.Fatalf("unexpected message id %q", id)
		}
	}
	t.Logf("%d distinct messages from %d rooms, each once", len(count), len(rooms))
}
