package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	roomsim "github.com/fulcrum-lb/fulcrum/supervisor/sim"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
	workersdk "github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// The whole system: simulated rooms as the task source, three SDK workers
// watching them with k=2, payloads through the real NATS broker. One worker
// dies midway; its rooms move, and every room's messages arrive exactly once
// and without a gap, since the other holder kept watching.
func TestEndToEndRoomsWorkersNATS(t *testing.T) {
	url := testenv.NATS(t)
	rooms, err := roomsim.New(roomsim.Config{Rooms: 6, Rate: 20, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rooms.Run(ctx)
	roomSrv := httptest.NewServer(rooms.Handler())
	defer roomSrv.Close()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := fmt.Sprintf("fulcrum.test.e2e.%d", time.Now().UnixNano())
	var mu sync.Mutex
	seqs := map[string][]uint64{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var msg roomsim.Message
		if err := json.Unmarshal(m.Data, &msg); err != nil {
			t.Errorf("bad message %s: %v", m.Data, err)
			return
		}
		mu.Lock()
		seqs[msg.Room] = append(seqs[msg.Room], msg.Seq)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	c := testConfig(nil)
	c.Redundancy = 2
	c.Source = source.Config{Type: source.TypeHTTP, URL: roomSrv.URL + "/rooms"}
	c.Sink = sink.Config{Type: sink.TypeNATS, URL: url, Subject: subject}
	s := startServer(t, c)

	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for i := range 3 {
		id := fmt.Sprintf("sdk-%d", i)
		w, err := workersdk.New(workersdk.Config{
			URL: "ws://" + s.Addr() + WorkerPath, Token: testToken, WorkerID: id, MaxLoad: 6,
			Session: &roomsim.RoomSession{Base: roomSrv.URL}, ReportInterval: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		stops[id] = stop
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx) }()
	}
	defer func() {
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
		wg.Wait()
	}()
	fullyHeld := func() bool {
		r := getTasks(t, s)
		if r.Phase != "running" || len(r.Tasks) != 6 || r.Deficit.Holders != 0 {
			return false
		}
		for _, ti := range r.Tasks {
			if slices.Contains(ti.Holders, "sdk-0") && stops["sdk-0"] == nil {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, "every room on 2 workers", fullyHeld)
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, q := range seqs {
			n += len(q)
		}
		return n
	}
	testenv.Eventually(t, "messages flowing", func() bool { return received() > 100 })

	stops["sdk-0"]()
	stops["sdk-0"] = nil
	testenv.Eventually(t, "sdk-0's rooms on the other two", fullyHeld)
	mark := received()
	testenv.Eventually(t, "more messages after the move", func() bool { return received() > mark+100 })

	// Stop the workers; once the supervisor has seen every connection close
	// it has handled every payload read before, and once the sink has
	// delivered all it was given, a NATS round trip brings in the rest.
	for _, stop := range stops {
		if stop != nil {
			stop()
		}
	}
	wg.Wait()
	testenv.Eventually(t, "all workers disconnected", func() bool {
		var ws struct{ Workers []WorkerView }
		admin(t, s, "GET", "/workers", "", &ws)
		for _, w := range ws.Workers {
			if w.Connected {
				return false
			}
		}
		return true
	})
	testenv.Eventually(t, "the sink to drain", func() bool {
		return s.sink.Published()+s.sink.Dropped() == s.offered.Load()
	})
	if s.sink.Dropped() != 0 {
		t.Fatalf("sink dropped %d", s.sink.Dropped())
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for room, q := range seqs {
		sorted := slices.Sorted(slices.Values(q))
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				t.Fatalf("%s: message %d arrived twice", room, sorted[i])
			}
			if sorted[i] != sorted[i-1]+1 {
				t.Fatalf("%s: messages %d..%d missing", room, sorted[i-1]+1, sorted[i]-1)
			}
		}
	}
	if len(seqs) != 6 {
		t.Fatalf("messages from %d rooms, want 6", len(seqs))
	}
}
