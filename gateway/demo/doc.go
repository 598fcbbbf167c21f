// Package demo runs tiny HTTP upstreams that answer every request with
// their name: what `fulcrum demo` puts behind a gateway, and what the
// benchmarks and tests proxy to. With Options an upstream holds a number
// of permits and refuses one more with 503, as a full server does: what
// the capacity strategy learns a limit from.
package demo
