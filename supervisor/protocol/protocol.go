// Package protocol holds the messages that supervisor and workers exchange
// over WebSocket (docs/supervisor-protocol.md). Every message is one JSON
// text frame with a "type" field; messages are one-way: a
// worker sends reports and payloads, the supervisor sends instruction sets.
// There is no handshake: a worker is known by its reports.
package protocol

import (
	"encoding/json"
	"time"
)

// Message types.
const (
	TypeReport      = "report"      // worker -> supervisor
	TypePayload     = "payload"     // worker -> supervisor
	TypeInstruction = "instruction" // supervisor -> worker
	TypeError       = "error"       // supervisor -> worker, for a rejected message
)

// LeaderHeader is how a standby supervisor answers a worker's connection:
// 503 with the leader's worker URL in this header (absent while it knows
// of no leader).
const LeaderHeader = "Fulcrum-Leader"

// Envelope is decoded first to learn a message's type.
type Envelope struct {
	Type string `json:"type"`
}

// Report is a worker's periodic statement of itself: sending one is what
// keeps a worker alive.
type Report struct {
	Type     string       `json:"type"` // "report"
	WorkerID string       `json:"worker_id"`
	MaxLoad  int          `json:"max_load"` // most tasks the worker will run
	Tasks    []TaskStatus `json:"tasks"`    // what it runs now
	SentAt   time.Time    `json:"sent_at,omitempty"`
	// Draining: the worker is stopping on purpose. The supervisor gives its
	// tasks to others first and ends each on it once the new holder has
	// shown life; the worker stops when it runs nothing.
	Draining bool `json:"draining,omitempty"`
}

// TaskStatus is one task a worker runs and when it last saw data for it.
type TaskStatus struct {
	TaskID   string    `json:"task_id"`
	LastSeen time.Time `json:"last_seen"`
	// Spec is the task's spec as the worker got it. Workers send it in the
	// first report of every connection, so that a supervisor that has just
	// started (a restart, a failover) knows the tasks its fleet runs before
	// its own task query. Optional: a worker that leaves it out loses only
	// that head start.
	Spec json.RawMessage `json:"spec,omitempty"`
}

// Payload is one piece of data a worker got from a task (a live room's
// message). Redundant workers send the same payload; the supervisor publishes
// it once. MessageID is the dedup key; without it the content hash is.
type Payload struct {
	Type      string          `json:"type"` // "payload"
	WorkerID  string          `json:"worker_id"`
	TaskID    string          `json:"task_id"`
	MessageID string          `json:"message_id,omitempty"`
	Data      json.RawMessage `json:"data"`
}

// Instruction is an instruction set for one worker.
type Instruction struct {
	Type string `json:"type"` // "instruction"
	// Reset: the worker ends every task it runs that is not in Add.
	Reset bool `json:"reset,omitempty"`
	// Add: tasks to start (already running ones are kept).
	Add []Task `json:"add,omitempty"`
	// End: task ids to stop.
	End []string `json:"end,omitempty"`
	// Term is the leadership term of the supervisor that sent the set (0
	// when it runs alone). A worker ignores a set whose term is below the
	// highest it has seen: it comes from a supervisor that lost its lease.
	Term uint64 `json:"term,omitempty"`
}

// Task is a supervised task as a worker needs it.
type Task struct {
	TaskID string          `json:"task_id"`
	Spec   json.RawMessage `json:"spec,omitempty"` // opaque to the supervisor (a room URL, say)
}

// Error tells a worker why a message was rejected.
type Error struct {
	Type   string `json:"type"` // "error"
	Reason string `json:"reason"`
}
