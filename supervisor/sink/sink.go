package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Message is one deduplicated payload.
type Message struct {
	TaskID    string
	MessageID string // may be empty; brokers then get a content hash as id
	Data      []byte // the body; the sink keeps it until delivered, so do not reuse it
	// Key and At are the caller's (the supervisor's dedup key and time),
	// handed back unchanged to the OnDelivered hook.
	Key uint64
	At  int64
}

// Sink takes payloads for delivery downstream.
type Sink interface {
	Publish(ctx context.Context, m Message) error
	Close() error
}

// Errors Publish returns; the message is counted in Dropped either way.
var (
	ErrBufferFull = errors.New("sink: buffer full, message dropped")
	ErrClosed     = errors.New("sink: closed, message dropped")
)

// Tuning that is not worth a config field.
const (
	maxBatch       = 256              // messages per confirm round
	confirmTimeout = 30 * time.Second // a broker silent this long is treated as gone
	minBackoff     = 100 * time.Millisecond
	maxBackoff     = 10 * time.Second
)

// publisher is one live connection to a destination.
type publisher interface {
	// publish sends batch and waits for the destination to take it. It
	// returns the messages to send again (not confirmed), how many were
	// confirmed but unroutable (dropped by the broker), and an error when
	// the connection is no longer usable.
	publish(ctx context.Context, batch []Message) (retry []Message, unroutable int, err error)
	close() error
}

type dialFunc func(ctx context.Context) (publisher, error)

// Buffered is a Sink whose Publish never blocks: messages wait in a bounded
// buffer while one goroutine delivers them with retries and reconnects.
type Buffered struct {
	log          *slog.Logger
	dial         dialFunc
	flushTimeout time.Duration

	mu     sync.RWMutex // guards closed against Publish racing Close
	closed bool
	in     chan Message

	delivered, sending atomic.Pointer[func([]Message)]
	idle               atomic.Pointer[func()]

	published, dropped atomic.Uint64
	droppedAtClose     atomic.Uint64
	lastDropLog        atomic.Int64 // unix ns; drop warnings are rate-limited

	ctx       context.Context // cancelled when Close's deadline passes
	cancel    context.CancelFunc
	closing   chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open validates c, connects to the destination once (so a wrong URL,
// credentials, exchange or stream fails here, not later in a log), and starts
// the delivery goroutine. ctx bounds only this first connection.
func Open(ctx context.Context, c Config, log *slog.Logger) (*Buffered, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("sink", c.Type)
	return open(ctx, c, log, dialer(c))
}

func dialer(c Config) dialFunc {
	switch c.Type {
	case TypeRabbitMQ:
		return amqpDialer(c)
	case TypeNATS:
		return natsDialer(c)
	}
	return stdoutDialer(nil)
}

// Check connects to c's destination once, as Open does first, and closes
// the connection again, for `fulcrum supervisor --check`: a broker that
// is down, a wrong user or password, a missing exchange, queue or
// JetStream stream fail here with the field to fix. It publishes nothing;
// as at start, a RabbitMQ sink.queue is declared (created if missing).
// The stdout sink needs nothing.
func Check(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Type == TypeStdout {
		return nil
	}
	p, err := dialer(c)(ctx)
	if err != nil {
		return err
	}
	return p.close()
}

func open(ctx context.Context, c Config, log *slog.Logger, dial dialFunc) (*Buffered, error) {
	first, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	b := &Buffered{
		log: log, dial: dial, flushTimeout: c.FlushTimeout,
		in: make(chan Message, c.Buffer), ctx: bctx, cancel: cancel,
		closing: make(chan struct{}), done: make(chan struct{}),
	}
	go b.run(first)
	return b, nil
}

// Publish enqueues m and returns at once. It returns ErrBufferFull or
// ErrClosed (and counts m in Dropped) when m cannot be enqueued. ctx is
// unused: enqueueing never waits.
func (b *Buffered) Publish(_ context.Context, m Message) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		b.drop(1, "closed")
		return ErrClosed
	}
	select {
	case b.in <- m:
		return nil
	default:
		b.drop(1, "buffer full")
		return ErrBufferFull
	}
}

// OnDelivered sets f to hear, on the delivery goroutine, each group of
// messages right after the destination confirmed them (unroutable ones
// included: sending those again would not route them either). f must be
// quick and must not keep the slice. Set it before the first Publish.
func (b *Buffered) OnDelivered(f func([]Message)) { b.delivered.Store(&f) }

// OnSending sets f to hear, on the delivery goroutine, each group of
// messages right before it is handed to the destination (again on a
// retry). The same rules as OnDelivered.
func (b *Buffered) OnSending(f func([]Message)) { b.sending.Store(&f) }

// OnIdle sets f to be called on the delivery goroutine when it has
// delivered everything buffered and is about to wait for more.
func (b *Buffered) OnIdle(f func()) { b.idle.Store(&f) }

// Published is how many messages the destination confirmed.
func (b *Buffered) Published() uint64 { return b.published.Load() }

// Dropped is how many messages will never be delivered: buffer full,
// published after Close, unroutable, or unconfirmed at Close's deadline.
func (b *Buffered) Dropped() uint64 { return b.dropped.Load() }

// Pending is how many messages wait in the buffer.
func (b *Buffered) Pending() int { return len(b.in) }

// Close stops taking messages, delivers what is buffered for at most the
// flush timeout, counts the rest as dropped and closes the connection. It
// returns an error saying how many were dropped at close, if any.
func (b *Buffered) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		close(b.closing)
		t := time.NewTimer(b.flushTimeout)
		select {
		case <-b.done:
		case <-t.C:
			b.cancel()
			<-b.done
		}
		t.Stop()
		b.cancel()
		if n := b.droppedAtClose.Load(); n > 0 {
			b.closeErr = fmt.Errorf("sink: %d messages not delivered within the %v flush timeout", n, b.flushTimeout)
		}
	})
	return b.closeErr
}

func (b *Buffered) drop(n int, why string) {
	total := b.dropped.Add(uint64(n))
	// One warning per second at most: a full buffer drops per message.
	now := time.Now().UnixNano()
	last := b.lastDropLog.Load()
	if now-last >= int64(time.Second) && b.lastDropLog.CompareAndSwap(last, now) {
		b.log.Warn("sink dropped messages", "count", n, "reason", why, "dropped_total", total)
	}
}

// run is the delivery goroutine: it owns the publisher.
func (b *Buffered) run(pub publisher) {
	defer close(b.done)
	defer func() {
		if pub != nil {
			_ = pub.close()
		}
	}()
	batch := make([]Message, 0, maxBatch)
	for {
		batch = batch[:0]
		if f := b.idle.Load(); f != nil && len(b.in) == 0 {
			(*f)()
		}
		select {
		case m := <-b.in:
			batch = append(batch, m)
		case <-b.closing:
			// No more Publish calls can enqueue; deliver what is left.
			for {
				batch = b.fill(batch[:0])
				if len(batch) == 0 {
					if f := b.idle.Load(); f != nil {
						(*f)()
					}
					return
				}
				pub = b.deliver(pub, batch)
			}
		}
		batch = b.fill(batch)
		pub = b.deliver(pub, batch)
	}
}

// fill tops batch up from the buffer without waiting.
func (b *Buffered) fill(batch []Message) []Message {
	for len(batch) < maxBatch {
		select {
		case m := <-b.in:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

// confirmedOf is batch without retry (a subset of it, in any order),
// matched by Key and At, which the hook's user makes unique.
func confirmedOf(batch, retry []Message) []Message {
	if len(retry) == 0 {
		return batch
	}
	type id struct {
		key uint64
		at  int64
	}
	again := make(map[id]int, len(retry))
	for _, m := range retry {
		again[id{m.Key, m.At}]++
	}
	out := make([]Message, 0, len(batch)-len(retry))
	for _, m := range batch {
		if k := (id{m.Key, m.At}); again[k] > 0 {
			again[k]--
			continue
		}
		out = append(out, m)
	}
	return out
}

// deliver sends batch until all of it is confirmed or b.ctx ends (then the
// rest is dropped). It returns the publisher to use next (nil if none).
func (b *Buffered) deliver(pub publisher, batch []Message) publisher {
	backoff := minBackoff
	wait := func() bool {
		// Full jitter keeps many supervisors from reconnecting in step.
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-b.ctx.Done():
			return false
		}
	}
	for len(batch) > 0 {
		if b.ctx.Err() != nil {
			b.droppedAtClose.Add(uint64(len(batch)))
			b.drop(len(batch), "flush timeout")
			return pub
		}
		if pub == nil {
			p, err := b.dial(b.ctx)
			if err != nil {
				b.log.Warn("sink connect failed; retrying", "err", err, "pending", len(batch)+len(b.in))
				wait()
				continue
			}
			b.log.Info("sink reconnected")
			pub = p
		}
		n := len(batch)
		if f := b.sending.Load(); f != nil {
			(*f)(batch)
		}
		retry, unroutable, err := pub.publish(b.ctx, batch)
		confirmed := n - len(retry)
		if f := b.delivered.Load(); f != nil && confirmed > 0 {
			(*f)(confirmedOf(batch, retry))
		}
		if unroutable > 0 {
			b.drop(unroutable, "unroutable")
		}
		b.published.Add(uint64(confirmed - unroutable))
		batch = retry
		if err != nil {
			b.log.Warn("sink publish failed; reconnecting", "err", err, "unconfirmed", len(retry))
			_ = pub.close()
			pub = nil
		}
		if len(batch) > 0 {
			wait()
		}
	}
	return pub
}
