// Package sink publishes the supervisor's deduplicated payloads downstream:
// to stdout (one JSON line each), to RabbitMQ (publisher confirms), or to
// NATS (core publish, or JetStream publish with an ack).
//
// Open returns a Buffered sink: Publish only enqueues into a bounded buffer
// and never blocks the supervisor; one goroutine drains the buffer in batches,
// waits for the broker to confirm each message, and on failure reconnects with
// capped exponential backoff and sends the unconfirmed messages again.
// Delivery is at least once: a message whose confirmation was lost with the
// connection is sent again, so consumers that must see each message once key
// on the message id (AMQP message-id property, NATS Nats-Msg-Id header, which
// JetStream also uses to drop the repeat). A message that cannot be buffered,
// that the broker could not route, or that is still unconfirmed when Close's
// flush deadline passes is counted in Dropped and logged, never lost silently.
package sink
