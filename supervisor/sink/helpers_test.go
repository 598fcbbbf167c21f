package sink

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

var uniq atomic.Int64

// name returns a broker object name unique to this test run.
func name(t testing.TB, prefix string) string {
	return fmt.Sprintf("fulcrum-test-%s-%d-%d", prefix, time.Now().UnixNano(), uniq.Add(1))
}

// proxy is a TCP relay between the sink and the broker that the test can cut,
// like a network failure or a broker restart would.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	refuse bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.sever() })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, up); up.Close(); c.Close() }()
	}
}

// sever closes every relayed connection.
func (p *proxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// setRefuse makes new connections fail at once (true) or go through.
func (p *proxy) setRefuse(r bool) {
	p.mu.Lock()
	p.refuse = r
	p.mu.Unlock()
}

// viaProxy rewrites a broker URL to go through p.
func viaProxy(t *testing.T, raw string, p *proxy) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr()
	return u.String()
}

func hostOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// received collects message ids as a consumer sees them.
type received struct {
	mu     sync.Mutex
	count  map[string]int
	total  int
	tasks  map[string]string // message id -> task id header
	bodies map[string]string
}

func newReceived() *received {
	return &received{count: map[string]int{}, tasks: map[string]string{}, bodies: map[string]string{}}
}

func (r *received) add(id, task, body string) {
	r.mu.Lock()
	r.count[id]++
	r.total++
	r.tasks[id] = task
	r.bodies[id] = body
	r.mu.Unlock()
}

func (r *received) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[id] > 0
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.count)
}

// kinds are the real brokers every sink test runs against.
var kinds = []struct{ name, addr string }{
	{"rabbitmq", "127.0.0.1:5672"},
	{"nats", "127.0.0.1:4222"},
	{"jetstream", "127.0.0.1:4222"},
}

// setup returns a sink config and a started consumer for kind.
func setup(t *testing.T, kind string) (Config, *received) {
	t.Helper()
	switch kind {
	case "rabbitmq":
		return setupRabbit(t)
	case "nats":
		return setupNATS(t, false)
	case "jetstream":
		return setupNATS(t, true)
	}
	t.Fatalf("unknown broker %q", kind)
	return Config{}, nil
}

func setupRabbit(t *testing.T) (Config, *received) {
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
	q, err := ch.QueueDeclare(name(t, "q"), false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReceived()
	go func() {
		for d := range deliveries {
			task, _ := d.Headers[HeaderTaskID].(string)
			r.add(d.MessageId, task, string(d.Body))
		}
	}()
	return Config{Type: TypeRabbitMQ, URL: u, RoutingKey: q.Name}, r
}

func setupNATS(t *testing.T, js bool) (Config, *received) {
	u := testenv.NATS(t)
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subject := name(t, "subj")
	r := newReceived()
	handle := func(m *nats.Msg) { r.add(m.Header.Get(natsMsgID), m.Header.Get(HeaderTaskID), string(m.Data)) }
	if !js {
		sub, err := nc.Subscribe(subject, handle)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil { // the server knows the subscription before we publish
			t.Fatal(err)
		}
		return Config{Type: TypeNATS, URL: u, Subject: subject}, r
	}
	j, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream := "FULCRUM_TEST_" + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatInt(uniq.Add(1), 10)
	s, err := j.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), stream) })
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { handle(&nats.Msg{Header: m.Headers(), Data: m.Data()}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return Config{Type: TypeNATS, URL: u, Subject: subject, JetStream: true}, r
}
