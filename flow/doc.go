// Package flow is the model of fulcrum flow, the multi-stage task service modelled on
// Asyncflow: the wire types of the HTTP API (api.go), the rules
// that validate what clients send, and the pure state transitions a task goes
// through when it is held, set, expired or cancelled.
//
// The rules live here, apart from storage and HTTP, so that every store
// (flow/store) applies the same transitions and a table test can pin them
// down. A task's life:
//
//	create_task ─► pending ─hold─► processing ─set pending+stage─► pending (next stage)
//	                  ▲                 │ set success / failed ─► success / failed
//	                  └── error/expiry ─┘ (retries left; else failed)
//	cancel_task: pending or processing ─► cancelled
package flow
