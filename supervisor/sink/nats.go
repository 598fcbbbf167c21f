package sink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func natsDialer(c Config) dialFunc {
	return func(ctx context.Context) (publisher, error) {
		u, _ := url.Parse(c.URL)
		// The sink reconnects itself (one policy for every broker), so the
		// client's own reconnect and its hidden reconnect buffer are off: a
		// publish during an outage fails and stays in our counted buffer.
		gone := make(chan struct{})
		var once sync.Once
		lost := func(*nats.Conn) { once.Do(func() { close(gone) }) }
		nc, err := nats.Connect(c.URL,
			nats.ClosedHandler(lost),
			nats.DisconnectErrHandler(func(nc *nats.Conn, _ error) { lost(nc) }),
			nats.Name("fulcrum-supervisor-sink"),
			nats.NoReconnect(),
			nats.ReconnectBufSize(-1),
			nats.Timeout(10*time.Second),
		)
		if err != nil {
			return nil, fmt.Errorf("sink.url: connect to %s: %w", u.Redacted(), err)
		}
		p := &natsPub{nc: nc, subject: c.Subject, gone: gone}
		if c.JetStream {
			js, err := jetstream.New(nc)
			if err != nil {
				nc.Close()
				return nil, fmt.Errorf("sink.jetstream: %w", err)
			}
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := js.StreamNameBySubject(lctx, c.Subject); err != nil {
				nc.Close()
				return nil, fmt.Errorf("sink.subject: no JetStream stream captures %q: %w", c.Subject, err)
			}
			p.js = js
		}
		return p, nil
	}
}

type natsPub struct {
	nc      *nats.Conn
	js      jetstream.JetStream // nil for core NATS
	subject string
	gone    chan struct{} // closed when the connection is lost
}

func (p *natsPub) msg(m Message) *nats.Msg {
	h := nats.Header{}
	h.Set(natsMsgID, messageID(m))
	h.Set(HeaderTaskID, m.TaskID)
	return &nats.Msg{Subject: p.subject, Header: h, Data: m.Data}
}

func (p *natsPub) publish(ctx context.Context, batch []Message) ([]Message, int, error) {
	if p.js != nil {
		return p.publishJS(ctx, batch)
	}
	for i, m := range batch {
		if err := p.nc.PublishMsg(p.msg(m)); err != nil {
			// Earlier messages may sit unflushed in the client: send all again.
			return batch, 0, fmt.Errorf("publish %d of %d: %w", i+1, len(batch), err)
		}
	}
	// Core NATS has no per-message ack; a flush round trip proves the
	// server read everything before it. If it fails, all of the batch is
	// sent again (repeats carry the same Nats-Msg-Id).
	if err := p.nc.FlushTimeout(confirmTimeout); err != nil {
		return batch, 0, err
	}
	return nil, 0, nil
}

func (p *natsPub) publishJS(ctx context.Context, batch []Message) ([]Message, int, error) {
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	var pubErr error
	for _, m := range batch {
		f, err := p.js.PublishMsgAsync(p.msg(m), jetstream.WithMsgID(messageID(m)))
		if err != nil {
			pubErr = err
			break
		}
		futures = append(futures, f)
	}
	var retry []Message
	for i, f := range futures {
		select {
		case <-f.Ok(): // an ack that already came wins over a lost connection
			continue
		default:
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			retry = append(retry, batch[i])
			if pubErr == nil {
				pubErr = err
			}
		case <-p.gone:
			// Acks of a lost connection never come.
			retry = append(retry, batch[i])
			if pubErr == nil {
				pubErr = errors.New("connection lost while waiting for JetStream acks")
			}
		case <-ctx.Done():
			retry = append(retry, batch[i])
			if pubErr == nil {
				pubErr = fmt.Errorf("waiting for JetStream acks: %w", ctx.Err())
			}
		}
	}
	retry = append(retry, batch[len(futures):]...)
	if pubErr == nil && !p.nc.IsConnected() {
		pubErr = errors.New("connection lost")
	}
	return retry, 0, pubErr
}

func (p *natsPub) close() error { p.nc.Close(); return nil }
