package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

const token = "s3cret"

// testSupervisor speaks the supervisor's side of the protocol over a real
// WebSocket: it checks the token, records reports and payloads, and sends
// instruction sets.
type testSupervisor struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	conn     *websocket.Conn
	cancel   context.CancelFunc
	conns    int
	reports  []protocol.Report
	payloads []protocol.Payload
	refused  int
	down     atomic.Bool // answer 503, as a supervisor being restarted
	frozen   atomic.Bool // stop reading (so pings go unanswered), as a stopped process
	leader   string      // with down: the Fulcrum-Leader header, as a standby
}

func newTestSupervisor(t *testing.T) *testSupervisor {
	s := &testSupervisor{t: t}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *testSupervisor) url() string { return "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/ws" }

func (s *testSupervisor) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ws" {
		http.NotFound(w, r)
		return
	}
	if s.down.Load() {
		if s.leader != "" {
			w.Header().Set(LeaderHeader, s.leader)
		}
		http.Error(w, "restarting", http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		s.mu.Lock()
		s.refused++
		s.mu.Unlock()
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	s.mu.Lock()
	s.conn, s.cancel = c, cancel
	s.conns++
	s.mu.Unlock()
	defer c.CloseNow()
	for {
		if s.frozen.Load() {
			<-ctx.Done()
			return
		}
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		var env protocol.Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			s.t.Errorf("worker sent non-JSON %q", data)
			return
		}
		s.mu.Lock()
		switch env.Type {
		case protocol.TypeReport:
			var rep protocol.Report
			if err := json.Unmarshal(data, &rep); err != nil {
				s.t.Errorf("bad report %s: %v", data, err)
			}
			s.reports = append(s.reports, rep)
		case protocol.TypePayload:
			var p protocol.Payload
			if err := json.Unmarshal(data, &p); err != nil {
				s.t.Errorf("bad payload %s: %v", data, err)
			}
			s.payloads = append(s.payloads, p)
		default:
			s.t.Errorf("worker sent type %q", env.Type)
		}
		s.mu.Unlock()
	}
}

func (s *testSupervisor) send(v any) {
	s.t.Helper()
	var c *websocket.Conn
	// The worker may see its dial succeed before serve has stored the
	// connection.
	testenv.Eventually(s.t, "a connection to send on", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		c = s.conn
		return c != nil
	})
	b, _ := json.Marshal(v)
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		s.t.Fatal(err)
	}
}

// drop cuts the current connection as a supervisor crash would.
func (s *testSupervisor) drop() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	c.CloseNow()
}

func (s *testSupervisor) lastReport() (protocol.Report, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reports) == 0 {
		return protocol.Report{}, 0
	}
	return s.reports[len(s.reports)-1], len(s.reports)
}

func reportTasks(r protocol.Report) []string {
	ids := []string{}
	for _, t := range r.Tasks {
		ids = append(ids, t.TaskID)
	}
	return ids
}

// fakeRoom is a Session that records starts and stops and emits on demand.
type fakeRoom struct {
	mu      sync.Mutex
	running map[string]*Output
	starts  map[string]int
	stops   map[string]int
	overlap atomic.Bool // two sessions of one task at once
}

func newFakeRoom() *fakeRoom {
	return &fakeRoom{running: map[string]*Output{}, starts: map[string]int{}, stops: map[string]int{}}
}

func (f *fakeRoom) Run(ctx context.Context, task protocol.Task, out *Output) error {
	f.mu.Lock()
	if _, ok := f.running[task.TaskID]; ok {
		f.overlap.Store(true)
	}
	f.running[task.TaskID] = out
	f.starts[task.TaskID]++
	f.mu.Unlock()
	<-ctx.Done()
	time.Sleep(time.Millisecond) // a session takes a moment to shut down
	f.mu.Lock()
	delete(f.running, task.TaskID)
	f.stops[task.TaskID]++
	f.mu.Unlock()
	return nil
}

func (f *fakeRoom) out(id string) *Output {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[id]
}

func (f *fakeRoom) count(m map[string]int, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[id]
}

func (f *fakeRoom) runningIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := []string{}
	for id := range f.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func startWorker(t *testing.T, c Config) (*Worker, func()) {
	t.Helper()
	w, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return w, stop
}

func tasks(ids ...string) []protocol.Task {
	out := make([]protocol.Task, len(ids))
	for i, id := range ids {
		out[i] = protocol.Task{TaskID: id, Spec: json.RawMessage(fmt.Sprintf(`{"room":%q}`, id))}
	}
	return out
}

func TestReportsAndInstructions(t *testing.T) {
	sup := newTestSupervisor(t)
	room := newFakeRoom()
	w, stop := startWorker(t, Config{URL: sup.url(), Token: token, WorkerID: "w1", MaxLoad: 3, Session: room, ReportInterval: 50 * time.Millisecond})

	// The first report comes at once, then one per interval.
	testenv.Eventually(t, "three reports", func() bool { _, n := sup.lastReport(); return n >= 3 })
	r, _ := sup.lastReport()
	if r.Type != protocol.TypeReport || r.WorkerID != "w1" || r.MaxLoad != 3 || len(r.Tasks) != 0 {
		t.Fatalf("report = %+v", r)
	}

	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Add: tasks("r1", "r2")})
	testenv.Eventually(t, "r1 and r2 running", func() bool { return slices.Equal(room.runningIDs(), []string{"r1", "r2"}) })
	testenv.Eventually(t, "a report with r1, r2", func() bool { r, _ := sup.lastReport(); return slices.Equal(reportTasks(r), []string{"r1", "r2"}) })

	// Payloads carry the worker and task; non-JSON data becomes a string.
	room.out("r1").Emit("m1", []byte(`{"text":"hi"}`))
	room.out("r2").Emit("", []byte("raw bytes"))
	if room.out("r2").Emit("big", make([]byte, DefaultMaxPayloadBytes+1)) || w.Stats().Dropped != 1 {
		t.Fatal("a payload over MaxPayloadBytes was not dropped and counted")
	}
	room.out("r2").Emit("n", []byte(" null"))
	testenv.Eventually(t, "three payloads", func() bool { sup.mu.Lock(); defer sup.mu.Unlock(); return len(sup.payloads) == 3 })
	sup.mu.Lock()
	p0, p1, p2 := sup.payloads[0], sup.payloads[1], sup.payloads[2]
	sup.mu.Unlock()
	if string(p2.Data) != `" null"` {
		t.Fatalf("null data sent as %s, want the JSON string", p2.Data)
	}
	if p0.WorkerID != "w1" || p0.TaskID != "r1" || p0.MessageID != "m1" || string(p0.Data) != `{"text":"hi"}` {
		t.Fatalf("payload 0 = %+v", p0)
	}
	if p1.TaskID != "r2" || p1.MessageID != "" || string(p1.Data) != `"raw bytes"` {
		t.Fatalf("payload 1 = %+v", p1)
	}
	// last_seen follows data.
	testenv.Eventually(t, "r1 last_seen in a report", func() bool {
		r, _ := sup.lastReport()
		return len(r.Tasks) == 2 && !r.Tasks[0].LastSeen.IsZero() && r.Tasks[0].TaskID == "r1"
	})

	// End stops one; adding a running task does not restart it.
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, End: []string{"r1"}, Add: tasks("r2", "r3")})
	testenv.Eventually(t, "r2 and r3 running", func() bool { return slices.Equal(room.runningIDs(), []string{"r2", "r3"}) })
	if room.count(room.starts, "r2") != 1 {
		t.Fatalf("r2 started %d times, want 1", room.count(room.starts, "r2"))
	}

	// Reset keeps what is listed in add and ends the rest.
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Reset: true, Add: tasks("r3", "r4")})
	testenv.Eventually(t, "r3 and r4 running", func() bool { return slices.Equal(room.runningIDs(), []string{"r3", "r4"}) })
	if room.count(room.starts, "r3") != 1 || room.count(room.stops, "r2") != 1 {
		t.Fatalf("r3 started %d times (want 1), r2 stopped %d (want 1)", room.count(room.starts, "r3"), room.count(room.stops, "r2"))
	}
	testenv.Eventually(t, "a report with r3, r4", func() bool { r, _ := sup.lastReport(); return slices.Equal(reportTasks(r), []string{"r3", "r4"}) })

	// Never past max load (3): of r5, r6 only one starts.
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Add: tasks("r5", "r6")})
	testenv.Eventually(t, "three running", func() bool { return len(room.runningIDs()) == 3 })
	if got := w.Tasks(); len(got) != 3 {
		t.Fatalf("Tasks = %v, want 3 (max load)", got)
	}

	// End and add of one task in one set restarts it, never overlapping.
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, End: []string{"r3"}, Add: tasks("r3")})
	testenv.Eventually(t, "r3 restarted", func() bool { return room.count(room.starts, "r3") == 2 && room.out("r3") != nil })
	if room.overlap.Load() {
		t.Fatal("two sessions of one task ran at once")
	}

	// Malformed messages from the supervisor are ignored, not fatal.
	sup.mu.Lock()
	c := sup.conn
	sup.mu.Unlock()
	_ = c.Write(context.Background(), websocket.MessageText, []byte("{not json"))
	_ = c.Write(context.Background(), websocket.MessageText, []byte(`{"type":"instruction","add":"nope"}`))
	sup.send(protocol.Error{Type: protocol.TypeError, Reason: "test"})
	testenv.Eventually(t, "the rejection counted", func() bool { return w.Stats().Rejections == 1 })
	if w.Stats().Connects != 1 {
		t.Fatalf("connects = %d, want 1: malformed input must not cost the connection", w.Stats().Connects)
	}

	stop()
	if ids := room.runningIDs(); len(ids) != 0 {
		t.Fatalf("after Run returned, sessions %v still run", ids)
	}
}

// A supervisor restart (the connection drops) leaves sessions running; the
// first report on the new connection lists them.
func TestReconnectKeepsSessions(t *testing.T) {
	sup := newTestSupervisor(t)
	room := newFakeRoom()
	w, _ := startWorker(t, Config{URL: sup.url(), Token: token, WorkerID: "w1", MaxLoad: 10, Session: room,
		ReportInterval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	testenv.Eventually(t, "connected", func() bool { return w.Stats().Connected })
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Add: tasks("r1", "r2")})
	testenv.Eventually(t, "two running", func() bool { return len(room.runningIDs()) == 2 })
	_, before := sup.lastReport()

	sup.drop()
	testenv.Eventually(t, "a second connection", func() bool { sup.mu.Lock(); defer sup.mu.Unlock(); return sup.conns == 2 })
	// The report interval is an hour: this report is the on-connect one.
	testenv.Eventually(t, "a report on the new connection", func() bool { _, n := sup.lastReport(); return n > before })
	r, _ := sup.lastReport()
	if !slices.Equal(reportTasks(r), []string{"r1", "r2"}) {
		t.Fatalf("report after reconnect lists %v, want [r1 r2]", reportTasks(r))
	}
	if room.count(room.stops, "r1") != 0 || room.count(room.starts, "r1") != 1 {
		t.Fatal("the reconnect restarted or stopped a session")
	}
	// Payloads emitted while connected again arrive.
	room.out("r1").Emit("after", []byte(`1`))
	testenv.Eventually(t, "the payload after reconnect", func() bool {
		sup.mu.Lock()
		defer sup.mu.Unlock()
		return len(sup.payloads) > 0 && sup.payloads[len(sup.payloads)-1].MessageID == "after"
	})
}

// With the supervisor down, payloads wait in the send queue and arrive when
// it is back; past the queue they are dropped and counted.
func TestSendQueueWhileDisconnected(t *testing.T) {
	sup := newTestSupervisor(t)
	room := newFakeRoom()
	w, _ := startWorker(t, Config{URL: sup.url(), Token: token, WorkerID: "w1", MaxLoad: 10, Session: room, SendQueue: 5,
		ReportInterval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	testenv.Eventually(t, "connected", func() bool { return w.Stats().Connected })
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Add: tasks("r1")})
	testenv.Eventually(t, "r1 running", func() bool { return room.out("r1") != nil })

	// Turn away reconnects so the queue must hold the payloads.
	sup.down.Store(true)
	sup.drop()
	testenv.Eventually(t, "disconnected", func() bool { return !w.Stats().Connected })
	sent := 0
	for i := 0; i < 8; i++ {
		if room.out("r1").Emit(fmt.Sprint(i), []byte(`0`)) {
			sent++
		}
	}
	if sent != 5 || w.Stats().Dropped != 3 {
		t.Fatalf("queued %d, dropped %d; want 5 and 3", sent, w.Stats().Dropped)
	}
	sup.down.Store(false)
	testenv.Eventually(t, "queued payloads delivered", func() bool { sup.mu.Lock(); defer sup.mu.Unlock(); return len(sup.payloads) == 5 })
}

// A wrong token (401) or a URL with no worker endpoint (404) cannot be fixed
// by retrying: Run stops and says why.
func TestRefusedStops(t *testing.T) {
	sup := newTestSupervisor(t)
	for _, c := range []struct {
		url, token string
		status     int
	}{{sup.url(), "wrong", 401}, {strings.TrimSuffix(sup.url(), "/ws") + "/wss", token, 404}} {
		w, err := New(Config{URL: c.url, Token: c.token, WorkerID: "w1", MaxLoad: 1, Session: newFakeRoom(),
			MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Run(context.Background())
		var fe *FatalError
		if !errors.As(err, &fe) || fe.Status != c.status {
			t.Fatalf("%s: Run = %v, want a FatalError with %d", c.url, err, c.status)
		}
		t.Log(err)
	}
	if sup.refused != 1 {
		t.Fatalf("%d refused attempts with the wrong token, want 1", sup.refused)
	}
}

// The first report of a connection carries the specs; after a reconnect the
// worker replays what it sent lately, and ignores instruction sets from an
// older term than one it has seen.
func TestSpecsReplayAndTerms(t *testing.T) {
	sup := newTestSupervisor(t)
	room := newFakeRoom()
	w, _ := startWorker(t, Config{URL: sup.url(), Token: token, WorkerID: "w1", MaxLoad: 10, Session: room,
		ReportInterval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	testenv.Eventually(t, "connected", func() bool { return w.Stats().Connected })
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Term: 5,
		Add: []protocol.Task{{TaskID: "r1", Spec: json.RawMessage(`{"url":"u1"}`)}}})
	testenv.Eventually(t, "r1 running", func() bool { return room.out("r1") != nil })
	room.out("r1").Emit("m1", []byte(`1`))
	testenv.Eventually(t, "m1 arrived", func() bool { sup.mu.Lock(); defer sup.mu.Unlock(); return len(sup.payloads) == 1 })
	_, before := sup.lastReport()

	sup.drop()
	testenv.Eventually(t, "m1 replayed on the new connection", func() bool {
		sup.mu.Lock()
		defer sup.mu.Unlock()
		return len(sup.payloads) == 2 && sup.payloads[1].MessageID == "m1"
	})
	sup.mu.Lock()
	first := sup.reports[before] // the new connection's first report
	sup.mu.Unlock()
	if len(first.Tasks) != 1 || string(first.Tasks[0].Spec) != `{"url":"u1"}` {
		t.Fatalf("first report after reconnect: %+v, want r1 with its spec", first.Tasks)
	}
	if w.Stats().Replayed != 1 {
		t.Fatalf("replayed %d, want 1", w.Stats().Replayed)
	}

	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Term: 4, Reset: true}) // a deposed leader
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Term: 5, Add: tasks("r2")})
	testenv.Eventually(t, "r2 running", func() bool { return room.out("r2") != nil })
	if st := w.Stats(); st.Stale != 1 || st.Term != 5 || !slices.Equal(w.Tasks(), []string{"r1", "r2"}) {
		t.Fatalf("stale %d, term %d, tasks %v: want the term-4 reset ignored", st.Stale, st.Term, w.Tasks())
	}
}

// A supervisor that stops answering (frozen, its socket still open) is left:
// an unanswered ping ends the connection and the worker connects again.
func TestLeavesFrozenSupervisor(t *testing.T) {
	sup := newTestSupervisor(t)
	w, _ := startWorker(t, Config{URL: sup.url(), Token: token, WorkerID: "w1", MaxLoad: 1, Session: newFakeRoom(),
		ReportInterval: 20 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	testenv.Eventually(t, "connected", func() bool { return w.Stats().Connected })
	sup.frozen.Store(true)
	testenv.Eventually(t, "a second connection", func() bool { sup.mu.Lock(); defer sup.mu.Unlock(); return sup.conns >= 2 })
}

// A standby answers 503 naming the leader; the worker goes there.
func TestFollowsLeaderHint(t *testing.T) {
	leader := newTestSupervisor(t)
	standby := newTestSupervisor(t)
	standby.leader = leader.url()
	standby.down.Store(true)
	w, _ := startWorker(t, Config{URL: standby.url(), WorkerID: "w1", Token: token, MaxLoad: 1, Session: newFakeRoom(),
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	testenv.Eventually(t, "connected to the leader", func() bool { leader.mu.Lock(); defer leader.mu.Unlock(); return leader.conns == 1 })
	testenv.Eventually(t, "the worker's connection counted", func() bool { return w.Stats().Connects == 1 })
}

// frozenListener accepts TCP connections and never answers, as a SIGSTOPped
// supervisor's kernel does; it counts the connections and notes when the
// client gives one up.
type frozenListener struct {
	ln              net.Listener
	accepted, given atomic.Int32
}

func newFrozenListener(t *testing.T) *frozenListener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &frozenListener{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c) // never a byte back; EOF when the worker gives up
				f.given.Add(1)
			}()
		}
	}()
	return f
}

func (f *frozenListener) url() string { return "ws://" + f.ln.Addr().String() + "/ws" }

// A standby names a leader that is frozen (its socket accepts and never
// answers): the worker gives the handshake up after HandshakeTimeout and
// goes to the next supervisor, which leads now.
func TestHandshakeBoundedAgainstFrozenSupervisor(t *testing.T) {
	frozen := newFrozenListener(t)
	standby := newTestSupervisor(t)
	standby.leader = frozen.url()
	standby.down.Store(true)
	next := newTestSupervisor(t)
	var logs syncBuffer
	w, _ := startWorker(t, Config{URL: standby.url(), URLs: []string{next.url()}, WorkerID: "w1", Token: token, MaxLoad: 1,
		Session: newFakeRoom(), HandshakeTimeout: 200 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	testenv.Eventually(t, "connected to the next supervisor", func() bool { next.mu.Lock(); defer next.mu.Unlock(); return next.conns == 1 })
	if frozen.accepted.Load() == 0 {
		t.Fatal("the worker never dialed the frozen supervisor the standby named")
	}
	testenv.Eventually(t, "the frozen handshake given up", func() bool { return frozen.given.Load() >= 1 })
	if !strings.Contains(logs.String(), "no answer to the WebSocket handshake") {
		t.Fatalf("the frozen supervisor was not left by the handshake bound; log:\n%s", logs.String())
	}
	// The supervisor counts the connection before the worker's side of the
	// handshake returns, so await the worker's count too.
	testenv.Eventually(t, "the worker's one connection counted", func() bool { return w.Stats().Connects == 1 })
	next.mu.Lock()
	conns := next.conns
	next.mu.Unlock()
	if conns != 1 {
		t.Fatalf("the next supervisor saw %d connections, want 1", conns)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A session that fails or panics is restarted while its task is assigned.
func TestFailingSessionRestarts(t *testing.T) {
	sup := newTestSupervisor(t)
	var runs atomic.Int32
	sess := SessionFunc(func(ctx context.Context, task protocol.Task, out *Output) error {
		switch runs.Add(1) {
		case 1:
			return errors.New("room closed")
		case 2:
			panic("bad frame")
		}
		<-ctx.Done()
		return nil
	})
	w, _ := startWorker(t, Config{URL: sup.url(), Token: token, WorkerID: "w1", MaxLoad: 1, Session: sess,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	testenv.Eventually(t, "connected", func() bool { return w.Stats().Connected })
	sup.send(protocol.Instruction{Type: protocol.TypeInstruction, Add: tasks("r1")})
	testenv.Eventually(t, "a third run", func() bool { return runs.Load() == 3 })
	if got := w.Tasks(); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("Tasks = %v", got)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := Config{URL: "ws://127.0.0.1:7300/ws", WorkerID: "w", MaxLoad: 1, Session: newFakeRoom()}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "URL is required"},
		{"bad scheme", func(c *Config) { c.URL = "ftp://h/" }, "scheme"},
		{"no scheme", func(c *Config) { c.URL = "127.0.0.1:7300/ws" }, `"127.0.0.1:7300/ws" has no scheme: give ws://127.0.0.1:7300/ws`},
		{"no scheme nor path", func(c *Config) { c.URL = "127.0.0.1:7300" }, "give ws://127.0.0.1:7300/ws"},
		{"no path", func(c *Config) { c.URL = "ws://127.0.0.1:7300" }, "worker endpoint is /ws (ws://127.0.0.1:7300/ws)"},
		{"a further URL without its path", func(c *Config) { c.URLs = []string{"ws://127.0.0.1:7301/"} }, "(ws://127.0.0.1:7301/ws)"},
		{"no id", func(c *Config) { c.WorkerID = "" }, "WorkerID"},
		{"zero load", func(c *Config) { c.MaxLoad = 0 }, "MaxLoad"},
		{"no session", func(c *Config) { c.Session = nil }, "Session"},
		{"negative", func(c *Config) { c.SendQueue = -1 }, "negative"},
		{"negative handshake", func(c *Config) { c.HandshakeTimeout = -time.Second }, "HandshakeTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if _, err := New(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
}
