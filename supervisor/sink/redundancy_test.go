package sink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
)

// The end-to-end claim for the data path: k=3 workers watching the
// same rooms send the same stream, interleaved however the scheduler likes;
// after dedup and the sink, a real RabbitMQ consumer and a real NATS
// subscriber each receive every message exactly once.
func TestRedundantWorkersExactlyOnceThroughBrokers(t *testing.T) {
	const k, rooms, perRoom = 3, 10, 300
	rc, rgot := setup(t, "rabbitmq")
	nc, ngot := setup(t, "nats")
	ctx := context.Background()
	rs, err := Open(ctx, rc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := Open(ctx, nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	d := dedup.New(time.Minute, 100_000)

	// The stream a room emits: every third message has no id, so the
	// content hash is exercised as the dedup key too.
	type payload struct {
		task, id string
		data     []byte
	}
	stream := make([]payload, 0, rooms*perRoom)
	for m := 0; m < perRoom; m++ {
		for r := 0; r < rooms; r++ {
			p := payload{task: fmt.Sprintf("room-%d", r), data: []byte(fmt.Sprintf(`{"room":%d,"seq":%d}`, r, m))}
			if m%3 != 0 {
				p.id = fmt.Sprintf("room-%d/%d", r, m)
			}
			stream = append(stream, p)
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range stream {
				if d.First(p.task, p.id, p.data, time.Now()) {
					m := Message{TaskID: p.task, MessageID: p.id, Data: p.data}
					if err := rs.Publish(ctx, m); err != nil {
						t.Error(err)
					}
					if err := ns.Publish(ctx, m); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range []*Buffered{rs, ns} {
		_ = s.Publish(ctx, sentinel)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s.Dropped() != 0 || s.Published() != uint64(len(stream)+1) {
			t.Fatalf("published %d dropped %d, want %d and 0", s.Published(), s.Dropped(), len(stream)+1)
		}
	}
	for name, got := range map[string]*received{"rabbitmq": rgot, "nats": ngot} {
		testenv.EventuallyWithin(t, name+" sentinel", 30*time.Second, func() bool { return got.has(sentinel.MessageID) })
		got.mu.Lock()
		for _, p := range stream {
			id := messageID(Message{MessageID: p.id, Data: p.data})
			if c := got.count[id]; c != 1 {
				t.Errorf("%s: message %s of %s received %d times, want 1", name, id, p.task, c)
			}
		}
		if got.total != len(stream)+1 {
			t.Errorf("%s: consumer got %d messages, want %d", name, got.total, len(stream)+1)
		}
		got.mu.Unlock()
	}
}
