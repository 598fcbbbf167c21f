package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func msg(i int) Message {
	return Message{TaskID: fmt.Sprintf("room-%d", i%7), MessageID: fmt.Sprintf("m-%d", i), Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}
}

// sentinel is published last: FIFO per publisher means that once the
// consumer has it, every earlier message (and any repeat of one) has arrived.
var sentinel = Message{TaskID: "end", MessageID: "sentinel", Data: []byte(`"end"`)}

func TestStdout(t *testing.T) {
	var buf bytes.Buffer
	c := Config{}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := open(context.Background(), c, testLog(t), stdoutDialer(&buf))
	if err != nil {
		t.Fatal(err)
	}
	in := []Message{
		{TaskID: "r1", MessageID: "a", Data: []byte(`{"x":1}`)},
		{TaskID: "r1", Data: []byte("not json\n")},
	}
	for _, m := range in {
		if err := s.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{`{"task_id":"r1","message_id":"a","data":{"x":1}}`, `{"task_id":"r1","data":"not json\n"}`}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines %q, want %d", len(lines), lines, len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %s, want %s", i, lines[i], want[i])
		}
	}
	if s.Published() != 2 || s.Dropped() != 0 {
		t.Fatalf("published %d dropped %d, want 2 and 0", s.Published(), s.Dropped())
	}
	if err := s.Publish(context.Background(), in[0]); !errors.Is(err, ErrClosed) || s.Dropped() != 1 {
		t.Fatalf("Publish after Close = %v (dropped %d), want ErrClosed counted", err, s.Dropped())
	}
}

// Each message published once arrives once, with its id, task and body.
func TestBrokerExactlyOnce(t *testing.T) {
	const n = 3000
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			c, got := setup(t, k.name)
			s, err := Open(context.Background(), c, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				if err := s.Publish(context.Background(), msg(i)); err != nil {
					t.Fatal(err)
				}
			}
			_ = s.Publish(context.Background(), sentinel)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.Published() != n+1 || s.Dropped() != 0 {
				t.Fatalf("published %d dropped %d, want %d and 0", s.Published(), s.Dropped(), n+1)
			}
			testenv.EventuallyWithin(t, "the sentinel", 30*time.Second, func() bool { return got.has(sentinel.MessageID) })
			got.mu.Lock()
			defer got.mu.Unlock()
			for i := 0; i < n; i++ {
				m := msg(i)
				if c := got.count[m.MessageID]; c != 1 {
					t.Fatalf("message %s received %d times, want 1", m.MessageID, c)
				}
				if got.tasks[m.MessageID] != m.TaskID || got.bodies[m.MessageID] != string(m.Data) {
					t.Fatalf("message %s: task %q body %q, want %q %q", m.MessageID, got.tasks[m.MessageID], got.bodies[m.MessageID], m.TaskID, m.Data)
				}
			}
			if got.total != n+1 {
				t.Fatalf("consumer got %d messages, want %d", got.total, n+1)
			}
		})
	}
}

// The connection to the broker is cut while messages are in flight and
// buffered: after the sink reconnects, every message arrives.
func TestBrokerReconnect(t *testing.T) {
	const n = 4000
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			c, got := setup(t, k.name)
			p := newProxy(t, k.addr)
			c.URL = viaProxy(t, c.URL, p)
			s, err := Open(context.Background(), c, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n/2; i++ {
				_ = s.Publish(context.Background(), msg(i))
			}
			testenv.EventuallyWithin(t, "some messages confirmed", 30*time.Second, func() bool { return s.Published() > 0 })
			p.setRefuse(true)
			p.sever()
			for i := n / 2; i < n; i++ { // these wait in the buffer while the broker is unreachable
				if err := s.Publish(context.Background(), msg(i)); err != nil {
					t.Fatal(err)
				}
			}
			_ = s.Publish(context.Background(), sentinel)
			if s.Published() >= n {
				t.Fatalf("published %d of %d before the broker came back: the cut did not hold anything back", s.Published(), n)
			}
			p.setRefuse(false)
			testenv.EventuallyWithin(t, "the sentinel after reconnect", 60*time.Second, func() bool { return got.has(sentinel.MessageID) })
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.Dropped() != 0 {
				t.Fatalf("dropped %d, want 0", s.Dropped())
			}
			got.mu.Lock()
			defer got.mu.Unlock()
			dups := got.total - len(got.count)
			for i := 0; i < n; i++ {
				if got.count[msg(i).MessageID] == 0 {
					t.Fatalf("message %d lost across the reconnect", i)
				}
			}
			// Repeats can only be messages whose confirm was lost with the
			// connection: at most the batches in flight at the cut.
			if dups > 2*maxBatch {
				t.Fatalf("%d repeated deliveries, want at most %d", dups, 2*maxBatch)
			}
			if k.name == "jetstream" && dups != 0 {
				t.Fatalf("JetStream delivered %d repeats despite Nats-Msg-Id", dups)
			}
			t.Logf("%d messages, %d repeats after the reconnect", n, dups)
		})
	}
}

// With the broker unreachable the buffer fills; what does not fit is counted
// as dropped, and everything is accounted for: published + dropped = offered.
func TestBrokerBufferFull(t *testing.T) {
	const n, buffer = 1000, 50
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			c, got := setup(t, k.name)
			p := newProxy(t, k.addr)
			c.URL = viaProxy(t, c.URL, p)
			c.Buffer = buffer
			s, err := Open(context.Background(), c, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			p.setRefuse(true)
			p.sever()
			full := 0
			for i := 0; i < n; i++ {
				if err := s.Publish(context.Background(), msg(i)); errors.Is(err, ErrBufferFull) {
					full++
				}
			}
			if full == 0 || s.Dropped() != uint64(full) {
				t.Fatalf("%d ErrBufferFull, Dropped %d: want both equal and > 0", full, s.Dropped())
			}
			p.setRefuse(false)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.Published()+s.Dropped() != n {
				t.Fatalf("published %d + dropped %d != offered %d", s.Published(), s.Dropped(), n)
			}
			testenv.EventuallyWithin(t, "every published message at the consumer", 30*time.Second, func() bool { return uint64(got.distinct()) == s.Published() })
		})
	}
}

// A routing key that reaches no queue through an existing exchange: the
// broker confirms but cannot route, and the sink counts those messages as
// dropped instead of published.
func TestRabbitUnroutableCounted(t *testing.T) {
	c, _ := setup(t, "rabbitmq")
	c.Exchange, c.RoutingKey = "amq.direct", name(t, "nowhere")
	s, err := Open(context.Background(), c, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		_ = s.Publish(context.Background(), msg(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Dropped() != 10 || s.Published() != 0 {
		t.Fatalf("published %d dropped %d, want 0 and 10", s.Published(), s.Dropped())
	}
}

// With sink.queue the sink declares a durable queue and binds it to the
// exchange: every message is routed, none dropped.
func TestRabbitDeclaresQueue(t *testing.T) {
	c, _ := setup(t, "rabbitmq")
	q := name(t, "declared")
	conn, err := amqp.Dial(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(q, false, false, false) }()
	c.Exchange, c.RoutingKey, c.Queue = "amq.direct", q, q
	s, err := Open(context.Background(), c, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		_ = s.Publish(context.Background(), msg(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Published() != 10 || s.Dropped() != 0 {
		t.Fatalf("published %d dropped %d, want 10 and 0", s.Published(), s.Dropped())
	}
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil || st.Messages != 10 {
		t.Fatalf("queue %s holds %d messages (%v), want 10", q, st.Messages, err)
	}
}

func TestOpenFailsOnBadDestination(t *testing.T) {
	c, _ := setup(t, "rabbitmq")
	jc, _ := setup(t, "jetstream")
	ln := newProxy(t, "127.0.0.1:1")
	ln.setRefuse(true)
	tests := []struct {
		name, wantErr string
		c             Config
	}{
		{"missing exchange", "sink.exchange", Config{Type: TypeRabbitMQ, URL: c.URL, Exchange: name(t, "nope")}},
		{"missing queue on the default exchange", "sink.routing_key", Config{Type: TypeRabbitMQ, URL: c.URL, RoutingKey: name(t, "noqueue")}},
		{"rabbitmq unreachable", "sink.url", Config{Type: TypeRabbitMQ, URL: "amqp://guest:guest@" + ln.addr() + "/", RoutingKey: "q"}},
		{"nats unreachable", "sink.url", Config{Type: TypeNATS, URL: "nats://" + ln.addr(), Subject: "a"}},
		{"no stream for subject", "sink.subject", Config{Type: TypeNATS, URL: jc.URL, Subject: name(t, "nostream"), JetStream: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(context.Background(), tt.c, testLog(t))
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Open = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

// The stdout line format is JSON a downstream tool can parse.
func TestStdoutLineIsJSON(t *testing.T) {
	var buf bytes.Buffer
	p, _ := stdoutDialer(&buf)(context.Background())
	if _, _, err := p.publish(context.Background(), []Message{{TaskID: "t", Data: []byte{0xff, 0xfe}}}); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("line %q is not JSON: %v", buf.String(), err)
	}
}

// Close with the broker unreachable gives up at the flush timeout, counts
// what it could not deliver as dropped and says so.
func TestCloseDeadlineCountsUndelivered(t *testing.T) {
	c, _ := setup(t, "rabbitmq")
	p := newProxy(t, "127.0.0.1:5672")
	c.URL = viaProxy(t, c.URL, p)
	c.FlushTimeout = 300 * time.Millisecond
	s, err := Open(context.Background(), c, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p.setRefuse(true)
	p.sever()
	for i := 0; i < 20; i++ {
		_ = s.Publish(context.Background(), msg(i))
	}
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "not delivered") {
		t.Fatalf("Close = %v, want an error counting undelivered messages", err)
	}
	if s.Published()+s.Dropped() != 20 || s.Dropped() == 0 {
		t.Fatalf("published %d dropped %d, want them to add up to 20 with drops", s.Published(), s.Dropped())
	}
	if !strings.Contains(err.Error(), fmt.Sprint(s.Dropped())) {
		t.Fatalf("Close = %v, want it to name the %d dropped", err, s.Dropped())
	}
}

// The hand-written stdout lines read back as encoding/json writes them:
// awkward ids and data (spread-out JSON, not JSON, control characters,
// invalid UTF-8) each make one parseable line.
func TestStdoutLinesRoundTrip(t *testing.T) {
	cases := []Message{
		{TaskID: "room-1", MessageID: "m1", Data: []byte(`{"a":1}`)},
		{TaskID: `q"uo\te`, MessageID: "tab\there\nnl", Data: []byte("{\n  \"spread\": [1, 2]\n}")},
		{TaskID: "ctl\x01\x1f", Data: []byte("not json\x00")},
		{TaskID: "bad\xffutf8\u2028", MessageID: "ünï", Data: []byte(`"a string"`)},
	}
	var buf bytes.Buffer
	p, _ := stdoutDialer(&buf)(context.Background())
	if _, _, err := p.publish(context.Background(), cases); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d lines for %d messages:\n%s", len(lines), len(cases), buf.String())
	}
	for i, line := range lines {
		var got struct {
			TaskID    string          `json:"task_id"`
			MessageID string          `json:"message_id"`
			Data      json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		m := cases[i]
		wantTask := strings.ToValidUTF8(m.TaskID, "\ufffd")
		if got.TaskID != wantTask || got.MessageID != m.MessageID {
			t.Errorf("line %d: task %q message %q, want %q %q", i, got.TaskID, got.MessageID, wantTask, m.MessageID)
		}
		if json.Valid(m.Data) {
			var a, b any
			_ = json.Unmarshal(m.Data, &a)
			_ = json.Unmarshal(got.Data, &b)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("line %d: data %s, want %s", i, got.Data, m.Data)
			}
		} else {
			var s string
			if err := json.Unmarshal(got.Data, &s); err != nil || s != string(m.Data) {
				t.Errorf("line %d: data %s, want the string %q", i, got.Data, m.Data)
			}
		}
	}
}
