package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Handler runs one stage of one task. It returns what comes next (see Next,
// Done, Fail) or an error, which asks the server to run the same stage again
// after its retry backoff. ctx ends when the task's lease is lost (the error
// is then context.Cause(ctx) == ErrLeaseLost) or when a shutdown runs out of
// time.
type Handler func(ctx context.Context, t *Task) (Result, error)

// ErrLeaseLost is the cause of a handler context cancelled because the
// server no longer counts this worker as the task's holder (the lease
// expired and the task was held again, or it was cancelled). The handler's
// outcome is then dropped.
var ErrLeaseLost = errors.New("flow worker: lease lost")

// Task is the held task a handler works on.
type Task struct {
	ID       string
	Type     string
	Stage    string
	Context  json.RawMessage // the context the previous stage left (may be empty)
	Attempt  int             // retries so far at this point (crt_retry_num)
	Priority int
	// Raw is the task as hold_tasks returned it.
	Raw flow.Task
}

// Decode unmarshals the task's context into v.
func (t *Task) Decode(v any) error {
	if len(t.Context) == 0 {
		return fmt.Errorf("task %s: empty context", t.ID)
	}
	if err := json.Unmarshal(t.Context, v); err != nil {
		return fmt.Errorf("task %s: decode context: %w", t.ID, err)
	}
	return nil
}

// Result is a handler's outcome. Build it with Next, Done or Fail.
type Result struct {
	// Status is flow.StatusPending (go on to Stage), flow.StatusSuccess or
	// flow.StatusFailed. Zero means success.
	Status flow.Status
	// Stage is the next stage, for StatusPending.
	Stage string
	// Context is the new task_context: a json.RawMessage or []byte holding
	// JSON, or any value to marshal. Nil keeps the current context.
	Context any
	// Delay postpones the next stage.
	Delay time.Duration
	// Reason says why, for StatusFailed; the server keeps it in the task's
	// schedule log.
	Reason string
	// Children and JoinStage, for flow.StatusWaiting (FanOut): the tasks
	// to create and the stage the task goes on to once all have ended.
	Children  []flow.NewTask
	JoinStage string
	// PauseKey, for StatusPending (PauseKey): how long no task of the
	// type with this task's rate_key is held, on any server; the task
	// itself runs the same stage again after it, no retry spent.
	PauseKey time.Duration
}

// Next hands the task to stage with a new context (nil keeps the current one).
func Next(stage string, context any) Result {
	return Result{Status: flow.StatusPending, Stage: stage, Context: context}
}

// Done ends the task with success and a final context (nil keeps the current one).
func Done(context any) Result { return Result{Status: flow.StatusSuccess, Context: context} }

// Fail ends the task as failed at once, without retrying; the worker logs
// reason. (To fail only after the retries run out, return an error.)
func Fail(reason string) Result { return Result{Status: flow.StatusFailed, Reason: reason} }

// FanOut creates children (at most flow.MaxBatch) with the task's set,
// in one transaction, and parks the task until every child has ended;
// then it is held again at joinStage, whose handler reads the children
// with client.GetTaskChildren. context, when not nil, replaces the task's.
func FanOut(joinStage string, children []flow.NewTask, context any) Result {
	return Result{Status: flow.StatusWaiting, JoinStage: joinStage, Children: children, Context: context}
}

// PauseKey answers an upstream's "slow down" (HTTP 429 and its
// Retry-After): the task's rate_key is paused for d (rounded up to a
// millisecond), so no pending task of the type with that key is held
// meanwhile, by this worker or any other, and the task runs this stage
// again after the pause without spending a retry. reason goes to the
// task's schedule log. The task must have been created with a rate_key.
func PauseKey(d time.Duration, reason string) Result {
	return Result{Status: flow.StatusPending, PauseKey: max(d, time.Millisecond), Reason: reason}
}

// After returns r with its next stage postponed by d.
func (r Result) After(d time.Duration) Result { r.Delay = d; return r }

// encodeContext turns a Result's Context into JSON, keeping cur for nil.
func encodeContext(v any, cur json.RawMessage) (json.RawMessage, error) {
	var b []byte
	switch c := v.(type) {
	case nil:
		return cur, nil
	case json.RawMessage:
		b = c
	case []byte:
		b = c
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("encode context: %w", err)
		}
	}
	if !json.Valid(b) {
		return nil, errors.New("context is not valid JSON")
	}
	if len(b) > flow.MaxContextBytes {
		return nil, fmt.Errorf("context is %d bytes, over the limit of %d", len(b), flow.MaxContextBytes)
	}
	return b, nil
}
