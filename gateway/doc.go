// Package gateway is Fulcrum's HTTP reverse proxy: it routes each request
// to a named upstream, picks a target with the upstream's balance strategy,
// forwards the request and relays the response.
//
// A request flows listener → route → pick → target connection → response:
//
//   - Cleartext HTTP/1.1 requests with no body or a Content-Length body take
//     the fast path (fast.go): one goroutine per client connection, heads
//     parsed in place by internal/h1, a keep-alive connection pool per
//     target (pool.go), pooled buffers, no per-request goroutine or map.
//   - Everything else — HTTP/2 (h2c or TLS), WebSocket and other upgrades,
//     chunked uploads, Expect: 100-continue, HTTP/1.0 clients — is handed,
//     connection and all, to a net/http server whose handler is
//     httputil.ReverseProxy over the same picks and retries (slow.go).
//
// Both paths share the upstream runtime (runtime.go): balancer, retry
// budget, queueing on capacity and metrics. Reload and the admin API
// replace the runtime atomically; upstreams and targets that stay keep
// their balancer state and pooled connections.
package gateway
