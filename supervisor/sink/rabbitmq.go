package sink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Header names set on every published message.
const (
	HeaderTaskID = "Fulcrum-Task-Id" // NATS header and AMQP header table key
	natsMsgID    = "Nats-Msg-Id"     // JetStream's dedup header
)

// messageID is the id brokers see: the payload's, or a content hash.
func messageID(m Message) string {
	if m.MessageID != "" {
		return m.MessageID
	}
	return "xxh64:" + strconv.FormatUint(xxhash.Sum64(m.Data), 16)
}

func amqpDialer(c Config) dialFunc {
	// amqp091 dials without a context; its own 10 s dial timeout bounds it.
	return func(context.Context) (publisher, error) {
		u, _ := url.Parse(c.URL)
		cfg := amqp.Config{
			Heartbeat:  10 * time.Second, // notice a half-open TCP connection
			Properties: amqp.Table{"connection_name": "fulcrum-supervisor-sink"},
			Dial:       amqp.DefaultDial(10 * time.Second),
		}
		conn, err := amqp.DialConfig(c.URL, cfg)
		if err != nil {
			return nil, fmt.Errorf("sink.url: connect to %s: %w", u.Redacted(), err)
		}
		if err := declare(conn, c); err != nil {
			conn.Close()
			return nil, err
		}
		ch, err := conn.Channel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("sink: open channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			conn.Close()
			return nil, fmt.Errorf("sink: enable publisher confirms: %w", err)
		}
		p := &amqpPub{conn: conn, ch: ch, exchange: c.Exchange, key: c.RoutingKey}
		// Buffered so the client's reader never blocks on us: at most one
		// batch of returns is outstanding and we drain after each batch.
		p.returns = ch.NotifyReturn(make(chan amqp.Return, maxBatch))
		return p, nil
	}
}

// declare makes sure what the sink publishes to can take it, so a missing
// queue fails at start instead of every message being dropped as
// unroutable: it declares sink.queue (durable) and binds it to the
// exchange; without a queue it checks passively that the exchange exists
// (its type and bindings are the user's), or, with the default exchange,
// that the queue the routing key names does.
// It uses a channel of its own: a failed passive declaration closes it.
func declare(conn *amqp.Connection, c Config) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("sink: open channel: %w", err)
	}
	defer ch.Close()
	if c.Exchange != "" {
		if err := ch.ExchangeDeclarePassive(c.Exchange, "direct", false, false, false, false, nil); err != nil {
			return fmt.Errorf("sink.exchange: %q: %w (declare it; the sink does not create exchanges, whose type is yours to choose)", c.Exchange, err)
		}
	}
	switch {
	case c.Queue != "":
		if _, err := ch.QueueDeclare(c.Queue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("sink.queue: declare %q: %w", c.Queue, err)
		}
		if c.Exchange != "" {
			if err := ch.QueueBind(c.Queue, c.RoutingKey, c.Exchange, false, nil); err != nil {
				return fmt.Errorf("sink.queue: bind %q to exchange %q with key %q: %w", c.Queue, c.Exchange, c.RoutingKey, err)
			}
		}
	case c.Exchange == "":
		_, err := ch.QueueDeclarePassive(c.RoutingKey, false, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.ResourceLocked {
			return nil // it exists, exclusive to another connection: it still takes messages
		}
		if err != nil {
			return fmt.Errorf("sink.routing_key: no queue %q: every message would be dropped as unroutable (declare the queue, or set sink.queue to have the sink declare it): %w", c.RoutingKey, err)
		}
	}
	return nil
}

type amqpPub struct {
	conn          *amqp.Connection
	ch            *amqp.Channel
	exchange, key string
	returns       chan amqp.Return
}

func (p *amqpPub) publish(ctx context.Context, batch []Message) ([]Message, int, error) {
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	now := time.Now()
	confs := make([]*amqp.DeferredConfirmation, 0, len(batch))
	var pubErr error
	for _, m := range batch {
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, p.key,
			true, // mandatory: an unroutable message comes back instead of vanishing
			false, amqp.Publishing{
				ContentType:  "application/json",
				DeliveryMode: amqp.Persistent,
				MessageId:    messageID(m),
				Timestamp:    now,
				Headers:      amqp.Table{HeaderTaskID: m.TaskID},
				Body:         m.Data,
			})
		if err != nil {
			pubErr = err
			break
		}
		confs = append(confs, dc)
	}
	var retry []Message
	acked := make([]int, 0, len(confs))
	for i, dc := range confs {
		ok, err := dc.WaitContext(ctx)
		if err != nil && pubErr == nil {
			pubErr = fmt.Errorf("waiting for confirms: %w", err)
		}
		if ok {
			acked = append(acked, i)
		} else {
			retry = append(retry, batch[i])
		}
	}
	retry = append(retry, batch[len(confs):]...)
	// The broker sends basic.return before the ack of the same message and
	// the client hands the return to our buffered channel before it
	// processes the ack, so every return of an acked message is here now.
	returned := map[string]int{}
drain:
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				break drain
			}
			returned[r.MessageId]++
		default:
			break drain
		}
	}
	unroutable := 0
	for _, i := range acked {
		if id := messageID(batch[i]); returned[id] > 0 {
			returned[id]--
			unroutable++
		}
	}
	if pubErr == nil && p.conn.IsClosed() {
		pubErr = errors.New("connection closed")
	}
	return retry, unroutable, pubErr
}

func (p *amqpPub) close() error { return p.conn.Close() }
