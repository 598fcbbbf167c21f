// Package gateway is Fulcrum's HTTP reverse proxy: it routes each request
// to a named upstream, picks a target with the upstream's balance strategy,
// forwards the request and relays the response.
//
// A request's path reads file by file:
//
//   - accept.go: connections, and each one's read loop; accept_tls.go:
//     with tls configured, the same accept loop and read loop, the TLS
//     handshake first on the connection's goroutine (within read_header);
//     ALPN "h2" is served on that goroutine by internal/h2srv, the
//     gateway's HTTP/2 server (frames read by one goroutine, each stream's
//     handler — transport_slow.go's, below — on a pooled goroutine, frames
//     written under the connection's lock and flushed by the last writer;
//     http2_server: net/http hands the bare *tls.Conn to net/http's
//     instead), anything else is HTTP/1.1 on the fast path
//     (X-Forwarded-Proto: https), and what it hands off keeps its TLS
//     state;
//   - parse.go (with internal/h1): the head, parsed in place and checked
//     strictly; the head sent upstream;
//   - route.go: host and path to an upstream, and the hash key;
//   - attempt.go: the attempt loop, shared by both transports — pick a
//     target, exchange, decide (relay, retry under the replay rule, or
//     answer with a reason), report to the balancer;
//   - transport_fast.go: HTTP/1.1 (cleartext or TLS) with no body or a
//     Content-Length body, over keep-alive pools (pool.go), nothing
//     allocated per request; transport_slow.go: everything else (HTTP/2,
//     upgrades, chunked uploads, Expect, HTTP/1.0, https targets), handed
//     connection and all to net/http (HTTP/2 over TLS: to h2srv, with the
//     same handler), whose handler runs the same attempt
//     loop with one of two exchanges: transport_h2.go's own for plain
//     request and response (every HTTP/2 stream too), sent as HTTP/1.1 on
//     the same pools by the same exchangeOn and relayed through the
//     ResponseWriter; or httputil.ReverseProxy over an http.Transport,
//     whose RoundTrip is the attempt loop, for upgrades and https
//     upstreams;
//   - relay.go: the response to the client, and the gateway's own answers;
//   - log.go: one access line per request.
//
// Both transports share the live configuration (upstream.go): balancer, retry
// budget, queueing on capacity and metrics. Reload and the admin API
// replace it atomically; upstreams and targets that stay keep
// their balancer state and pooled connections.
package gateway
