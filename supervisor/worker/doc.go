// Package worker is the Go SDK for supervisor workers. A Worker connects to
// the supervisor over WebSocket, says who it is in a report every report
// interval (its id, its max load, the tasks it runs and when each last saw
// data), carries out the instruction sets it receives (reset, add, end) by
// starting and stopping sessions of a user-supplied Session, and sends the
// sessions' payloads.
//
// Sessions outlive connections: when the supervisor goes away the worker
// keeps its sessions running and reconnects with backoff; its first report on
// the new connection tells the restarted supervisor what it holds, and the
// supervisor's reset instruction ends whatever it should no longer run.
// The wire protocol is in docs/supervisor-protocol.md.
package worker
