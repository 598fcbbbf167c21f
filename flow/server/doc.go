// Package server is fulcrum flow's HTTP server: the API of docs/flow-api.md
// over a store (flow/store), Prometheus metrics, long-polling holds woken by
// an in-process signal (and PostgreSQL LISTEN/NOTIFY across servers), and the
// background loops that rescue expired leases and prune finished tasks.
//
// Any number of servers may share one database; each runs the same loops,
// which skip rows another server has locked.
package server
