package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
	roomsim "github.com/fulcrum-lb/fulcrum/supervisor/sim"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	workersdk "github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// childEnv names the config file a re-executed test binary runs a
// supervisor with: the fault tests kill real supervisor processes.
const childEnv = "FULCRUM_SUPERVISOR_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	os.Exit(m.Run())
}

// runChild is the supervisor process: config from path, stdout sink to
// stdout, logs to stderr, SIGTERM stops it cleanly.
func runChild(path string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := LoadConfig(path)
	if err != nil {
		log.Error("child config", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s, err := Start(ctx, cfg, log)
	if err != nil {
		log.Error("child start", "err", err)
		return 1
	}
	<-ctx.Done()
	if err := s.Close(); err != nil {
		log.Error("child close", "err", err)
		return 1
	}
	return 0
}

// child is one supervisor process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild runs a supervisor with cfg (written as YAML) in a new process;
// every stdout line goes to lines.
func startChild(t *testing.T, cfg Config, lines func(string)) *child {
	t.Helper()
	data, err := yaml.Marshal(cfgYAML(cfg))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "supervisor.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines(sc.Text())
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { c.kill(); <-c.done })
	return c
}

func (c *child) kill() { _ = c.cmd.Process.Signal(syscall.SIGKILL) }

// stop ends the process with SIGTERM and waits until its output is read.
func (c *child) stop() { _ = c.cmd.Process.Signal(syscall.SIGTERM); <-c.done }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("supervisor: %s", p)
	return len(p), nil
}

// cfgYAML is the config as its YAML file would say it.
func cfgYAML(c Config) map[string]any {
	m := map[string]any{
		"listen": c.Listen, "token": c.Token, "warmup": c.Warmup.String(),
		"worker_timeout": c.WorkerTimeout.String(), "task_timeout": c.TaskTimeout.String(),
		"tick": c.Tick.String(), "query_interval": c.QueryInterval.String(),
		"query_retry": c.QueryRetry.String(), "redundancy": c.Redundancy,
		"source": map[string]any{"type": c.Source.Type, "url": c.Source.URL},
		"sink":   map[string]any{"type": c.Sink.Type},
	}
	if c.Sink.URL != "" {
		m["sink"] = map[string]any{"type": c.Sink.Type, "url": c.Sink.URL, "subject": c.Sink.Subject, "jetstream": c.Sink.JetStream,
			"queue": c.Sink.Queue, "routing_key": c.Sink.RoutingKey}
	}
	if c.Dedup.Path != "" {
		m["dedup"] = map[string]any{"path": c.Dedup.Path}
	}
	if c.HA.Database != "" {
		m["ha"] = map[string]any{"database": c.HA.Database, "name": c.HA.Name, "advertise": c.HA.Advertise,
			"lease": c.HA.Lease.String()}
	}
	return m
}

// freeAddr returns a loopback address nothing listens on now, so that a
// restarted supervisor can take the address its workers know.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// seqLog counts, per room, the sequence numbers that reached a sink.
type seqLog struct {
	mu    sync.Mutex
	seqs  map[string]map[uint64]int
	total int
}

func newSeqLog() *seqLog { return &seqLog{seqs: map[string]map[uint64]int{}} }

func (l *seqLog) add(t *testing.T, data []byte) {
	var m roomsim.Message
	if err := json.Unmarshal(data, &m); err != nil || m.Room == "" {
		t.Errorf("not a room message: %s", data)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seqs[m.Room] == nil {
		l.seqs[m.Room] = map[uint64]int{}
	}
	l.seqs[m.Room][m.Seq]++
	l.total++
}

func (l *seqLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

type repeat struct {
	room string
	seq  uint64
	n    int
}

// repeated lists the messages received more than once.
func (l *seqLog) repeated() []repeat {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []repeat
	for room, got := range l.seqs {
		for seq, n := range got {
			if n > 1 {
				out = append(out, repeat{room, seq, n})
			}
		}
	}
	return out
}

// gaps returns, over all rooms, the sequence numbers missing between a
// room's first and last received message, the distinct messages received,
// and those received more than once.
func (l *seqLog) gaps() (lost, distinct, twice int, where []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for room, got := range l.seqs {
		seqs := slices.Sorted(func(yield func(uint64) bool) {
			for s := range got {
				if !yield(s) {
					return
				}
			}
		})
		distinct += len(seqs)
		for _, n := range got {
			if n > 1 {
				twice++
			}
		}
		for i := 1; i < len(seqs); i++ {
			if d := seqs[i] - seqs[i-1]; d > 1 {
				lost += int(d - 1)
				where = append(where, fmt.Sprintf("%s: %d..%d", room, seqs[i-1]+1, seqs[i]-1))
			}
		}
	}
	return lost, distinct, twice, where
}

// procFleet runs simulated rooms and SDK workers in this process.
type procFleet struct {
	rooms   *roomsim.Server
	roomURL string
	workers []*workersdk.Worker
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startProcFleet(t *testing.T, rooms, workers, maxLoad int, rate float64, urls []string) *procFleet {
	t.Helper()
	sim, err := roomsim.New(roomsim.Config{Rooms: rooms, Rate: rate, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &procFleet{rooms: sim, cancel: cancel}
	go sim.Run(ctx)
	srv := httptest.NewServer(sim.Handler())
	f.roomURL = srv.URL
	for i := range workers {
		w, err := workersdk.New(workersdk.Config{
			URL: urls[0], URLs: urls[1:], Token: testToken, WorkerID: fmt.Sprintf("w%d", i), MaxLoad: maxLoad,
			Session: &roomsim.RoomSession{Base: srv.URL}, ReportInterval: 100 * time.Millisecond,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		f.workers = append(f.workers, w)
		f.wg.Add(1)
		go func() { defer f.wg.Done(); _ = w.Run(ctx) }()
	}
	t.Cleanup(func() { f.stop(); srv.Close() })
	return f
}

func (f *procFleet) stop() { f.cancel(); f.wg.Wait() }

func (f *procFleet) allConnected() bool {
	for _, w := range f.workers {
		if !w.Stats().Connected {
			return false
		}
	}
	return true
}

// kill -9 the supervisor under load and start it again at the same
// address, once per sink: the workers report what they hold and replay
// what they sent lately, so with k=2 no message is missing at the sink
// (counted by sequence number), and the window kept in dedup.path makes
// the restarted supervisor recognise what its predecessor published: no
// message reaches the sink twice, but for those the killed supervisor had
// handed to the sink and not yet seen confirmed (publish, then record: the
// window cannot tell those from unpublished ones, so they are published
// again rather than risk losing them). The test reads that uncertain set
// from the window's file after the kill and fails on any other duplicate.
// JetStream keeps its own duplicate window (2 min), which drops those too:
// there, not one duplicate is allowed. Core NATS
// acknowledges nothing, but the sink's flush round trip comes before the
// record, so what it had not flushed is published again from the replay.
func TestProcessKillRestartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts supervisor processes")
	}
	for _, sk := range []string{"stdout", "rabbitmq", "nats", "jetstream"} {
		t.Run(sk, func(t *testing.T) { killRestart(t, sk) })
	}
}

func killRestart(t *testing.T, sinkType string) {
	addr := freeAddr(t)
	url := "ws://" + addr + WorkerPath
	log := newSeqLog()
	cfg := testConfig(nil)
	cfg.Sink = procSink(t, sinkType, log)
	f := startProcFleet(t, 10, 4, 10, 20, []string{url})
	cfg.Listen = addr
	cfg.Redundancy = 2
	cfg.Warmup = time.Second
	cfg.Tick = 50 * time.Millisecond
	cfg.Source.Type, cfg.Source.URL = "http", f.roomURL+"/rooms"
	cfg.Dedup.Path = filepath.Join(t.TempDir(), "dedup.window")
	lines := func(string) {}
	if sinkType == "stdout" {
		lines = func(line string) {
			var l struct{ Data json.RawMessage }
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Errorf("stdout line %q: %v", line, err)
				return
			}
			log.add(t, l.Data)
		}
	}
	first := startChild(t, cfg, lines)
	testenv.Eventually(t, "messages flowing through the first supervisor", func() bool { return log.count() > 500 })

	first.kill()
	<-first.done
	// What the killed supervisor had handed to the sink unconfirmed: the
	// only payloads its successor may publish again.
	_, unsure, err := dedup.ReadFile(cfg.Dedup.Path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	uncertain := map[uint64]bool{}
	for _, e := range unsure {
		uncertain[e.Key] = true
	}
	sent := f.rooms.Stats().Sent
	testenv.Eventually(t, "rooms talking while no supervisor runs", func() bool { return f.rooms.Stats().Sent > sent+200 })
	mark := log.count()
	second := startChild(t, cfg, lines)
	testenv.Eventually(t, "workers back", f.allConnected)
	testenv.Eventually(t, "messages flowing through the second supervisor", func() bool { return log.count() > mark+1000 })
	var replayed uint64
	for _, w := range f.workers {
		replayed += w.Stats().Replayed
	}
	f.stop()
	second.stop()
	settle := procSettle[sinkType]
	if settle != nil {
		settle(t, log)
	}

	lost, distinct, twice, where := log.gaps()
	t.Logf("%s: distinct messages %d, lost %d, published more than once %d (uncertain at the kill: %d); payloads the workers replayed %d",
		sinkType, distinct, lost, twice, len(uncertain), replayed)
	if replayed == 0 {
		t.Fatal("no worker replayed anything: the restart tested nothing")
	}
	if lost != 0 {
		t.Fatalf("%d messages lost across the restart: %v", lost, where)
	}
	// Every duplicate must be one the killed supervisor had in flight to
	// the sink: publish-then-record cannot tell those from unpublished.
	if sinkType == "jetstream" && twice != 0 {
		t.Fatalf("%d messages twice in the stream, which drops repeated message ids", twice)
	}
	for _, d := range log.repeated() {
		if !uncertain[dedup.Key(d.room, roomsim.Message{Room: d.room, Seq: d.seq}.ID(), nil)] {
			t.Errorf("%s #%d published %d times, though the window had it as published", d.room, d.seq, d.n)
		}
	}
}

// procSettle waits, per sink, until what the supervisors confirmed has
// reached the test's consumer (set by procSink).
var procSettle = map[string]func(*testing.T, *seqLog){}

// procSink makes a sink of the given type whose messages the test reads
// into log: a fresh RabbitMQ queue, NATS subject or JetStream stream.
func procSink(t *testing.T, typ string, log *seqLog) sink.Config {
	t.Helper()
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	switch typ {
	case "stdout":
		return sink.Config{Type: sink.TypeStdout}
	case "rabbitmq":
		u := testenv.AMQP(t)
		conn, err := amqp.Dial(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q := "fulcrum-test-restart-" + id
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
		ds, err := ch.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range ds {
				log.add(t, d.Body)
			}
		}()
		procSettle[typ] = func(t *testing.T, _ *seqLog) {
			testenv.Eventually(t, "the queue drained", func() bool {
				qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
				return err == nil && qi.Messages == 0
			})
		}
		return sink.Config{Type: sink.TypeRabbitMQ, URL: u, Queue: q, RoutingKey: q}
	case "nats":
		u := testenv.NATS(t)
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		subject := "fulcrum.test.restart." + id
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) { log.add(t, m.Data) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		procSettle[typ] = func(t *testing.T, _ *seqLog) {
			if err := nc.Flush(); err != nil { // what the server delivered before is handled
				t.Fatal(err)
			}
		}
		return sink.Config{Type: sink.TypeNATS, URL: u, Subject: subject}
	case "jetstream":
		u := testenv.NATS(t)
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		subject := "fulcrum.test.restart." + id
		// The broker's duplicate window as a user has it (2 min): it takes
		// the uncertain ones the supervisor's window cannot.
		st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "FULCRUM_RESTART_" + id, Subjects: []string{subject},
			Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), "FULCRUM_RESTART_"+id) })
		cons, err := st.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { log.add(t, m.Data()) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
		procSettle[typ] = func(t *testing.T, l *seqLog) {
			testenv.Eventually(t, "the stream read to its end", func() bool {
				info, err := st.Info(context.Background())
				return err == nil && uint64(l.count()) == info.State.Msgs
			})
		}
		return sink.Config{Type: sink.TypeNATS, URL: u, Subject: subject, JetStream: true}
	}
	t.Fatalf("no sink %q", typ)
	return sink.Config{}
}
