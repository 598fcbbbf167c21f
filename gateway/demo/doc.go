// Package demo runs tiny HTTP upstreams that answer every request with
// their name: what `fulcrum demo` puts behind a gateway, and what the
// benchmarks and tests proxy to.
package demo
