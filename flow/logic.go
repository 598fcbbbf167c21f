package flow

import (
	"encoding/json"
	"fmt"
	"time"
)

// Record is a task as a store keeps it: the API view plus the retry policy,
// which is copied from the task type when the task is created so that a
// later register_task does not change the backoff of tasks in flight.
type Record struct {
	Task
	RetryIntervalMS    int64
	MaxRetryIntervalMS int64
	// Existing is set by a store's CreateTasks when TaskID is that of a
	// live task with the same type and unique key, not a new one.
	Existing bool
}

// Schedule log events.
const (
	EventCreated   = "created"
	EventHeld      = "held"
	EventPending   = "pending"
	EventSuccess   = "success"
	EventFailed    = "failed"
	EventRetry     = "retry"
	EventExpired   = "expired"
	EventCancelled = "cancelled"
	EventRetried   = "retried" // an operator's retry_task
	EventWaiting   = "waiting" // fanned out: waits for its children
	EventJoined    = "joined"  // the last child ended: pending at the join stage
	EventPaused    = "paused"  // set pending with pause_rate_key_ms: runs again after the pause, no retry spent
	// EventReturned: a hold gave the task back unseen by any worker (an
	// older task of its sequence_key was live, or its rate_key was out of
	// its rate limit); no retry spent.
	EventReturned = "returned"
)

// Backoff is the delay before retry number n (1 for the first retry):
// retry_interval * 2^(n-1), capped at max_retry_interval.
func Backoff(retryInterval, maxRetryInterval time.Duration, n int) time.Duration {
	d := retryInterval
	for i := 1; i < n && d < maxRetryInterval; i++ {
		d *= 2
	}
	return min(d, maxRetryInterval)
}

// AppendLog adds e to the log and keeps the last ScheduleLogSize entries.
func AppendLog(log []LogEntry, e LogEntry) []LogEntry {
	log = append(log, e)
	if len(log) > ScheduleLogSize {
		log = append([]LogEntry(nil), log[len(log)-ScheduleLogSize:]...)
	}
	return log
}

// release clears the hold of a task leaving processing.
func (r *Record) release() {
	r.Owner, r.Lease, r.LeaseExpiry = "", "", nil
}

// retryOrFail counts a retry when one is left (pending after backoff, at
// least delay from now) or ends the task failed.
func (r *Record) retryOrFail(now time.Time, delay time.Duration, event, worker, errText string) {
	if r.CrtRetryNum < r.MaxRetryNum {
		r.CrtRetryNum++
		r.Status = StatusPending
		b := Backoff(time.Duration(r.RetryIntervalMS)*time.Millisecond, time.Duration(r.MaxRetryIntervalMS)*time.Millisecond, r.CrtRetryNum)
		r.OrderTime = now.Add(max(b, delay))
	} else {
		r.Status = StatusFailed
		if event != EventExpired {
			event = EventFailed
		}
	}
	r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Worker: worker, Stage: r.TaskStage, Event: event, Error: errText})
}

// ApplySet applies a validated set_task to r (which must be the current
// stored state). It returns ErrStaleLease, leaving r as it was, unless r is
// processing under req.Lease. A lease that expired but was not yet rescued
// is still accepted: nobody else holds the task.
//
// Outcomes:
//   - pending, no error: hand to req.TaskStage (or run the same stage again),
//     due after delay_ms; crt_retry_num restarts at 0 when the stage changes,
//     because retries are counted per stage.
//   - pending with error, or failed with error while retries are left: a
//     retry of the current stage after backoff; with none left, failed.
//   - success, or failed without error: the task ends.
func ApplySet(r *Record, req SetTaskRequest, now time.Time) error {
	if r.Status != StatusProcessing || r.Lease == "" || r.Lease != req.Lease {
		return fmt.Errorf("task %s is %s, lease %q is not its current lease: %w", r.TaskID, r.Status, clip(req.Lease), ErrStaleLease)
	}
	saved := *r
	worker := r.Owner
	if req.TaskContext != nil {
		r.TaskContext = req.TaskContext
	}
	r.release()
	r.ModifyTime = now
	delay := time.Duration(req.DelayMS) * time.Millisecond
	switch {
	case req.PauseRateKeyMS > 0:
		// Validated: status pending. The task waits out the pause it
		// asked for, its retries untouched.
		if r.RateKey == "" {
			*r = saved
			return &FieldError{Field: "pause_rate_key_ms", Msg: fmt.Sprintf("task %s has no rate_key to pause", r.TaskID)}
		}
		if req.TaskStage != "" && req.TaskStage != r.TaskStage {
			r.TaskStage, r.CrtRetryNum = req.TaskStage, 0
		}
		r.Status = StatusPending
		r.OrderTime = now.Add(max(delay, time.Duration(req.PauseRateKeyMS)*time.Millisecond))
		r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Worker: worker, Stage: r.TaskStage, Event: EventPaused, Error: req.Error})
	case req.Error != "" && req.Status == StatusPending:
		if req.TaskStage != "" && req.TaskStage != r.TaskStage {
			r.TaskStage, r.CrtRetryNum = req.TaskStage, 0
		}
		r.retryOrFail(now, delay, EventRetry, worker, req.Error)
	case req.Status == StatusWaiting:
		// The stage stays the one that fanned out until the join.
		r.Status = StatusWaiting
		r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Worker: worker, Stage: r.TaskStage, Event: EventWaiting})
	case req.Status == StatusPending:
		if req.TaskStage != "" && req.TaskStage != r.TaskStage {
			r.TaskStage, r.CrtRetryNum = req.TaskStage, 0
		}
		r.Status = StatusPending
		r.OrderTime = now.Add(delay)
		r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Worker: worker, Stage: r.TaskStage, Event: EventPending})
	default: // success, failed
		r.Status = req.Status
		ev := EventSuccess
		if req.Status == StatusFailed {
			ev = EventFailed
		}
		r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Worker: worker, Stage: r.TaskStage, Event: ev, Error: req.Error})
	}
	return nil
}

// ApplyJoin makes a waiting parent whose last child ended pending at its
// join stage, due now, its retries restarting (a new stage).
func ApplyJoin(r *Record, joinStage string, now time.Time) {
	r.release()
	r.Status, r.TaskStage, r.CrtRetryNum, r.OrderTime, r.ModifyTime = StatusPending, joinStage, 0, now, now
	r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Stage: joinStage, Event: EventJoined})
}

// ApplyCancel ends a pending, processing or waiting task as cancelled.
func ApplyCancel(r *Record, now time.Time) {
	r.release()
	r.Status, r.ModifyTime = StatusCancelled, now
	r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Stage: r.TaskStage, Event: EventCancelled})
}

// ApplyExpire rescues a processing task whose lease expired: it counts a
// retry and returns to pending after backoff, or fails when none are left.
func ApplyExpire(r *Record, now time.Time) {
	worker := r.Owner
	r.release()
	r.ModifyTime = now
	r.retryOrFail(now, 0, EventExpired, worker, "lease expired")
}

// ApplyRetry is an operator's retry of a failed or cancelled task: back
// to pending, due now, retries reset; stage and context replaced when given.
func ApplyRetry(r *Record, stage string, ctx json.RawMessage, now time.Time) error {
	if r.Status != StatusFailed && r.Status != StatusCancelled {
		return fmt.Errorf("task %s is %s; only failed or cancelled tasks are retried: %w", r.TaskID, r.Status, ErrConflict)
	}
	if stage != "" {
		r.TaskStage = stage
	}
	if ctx != nil {
		r.TaskContext = ctx
	}
	r.release()
	r.Status, r.CrtRetryNum, r.OrderTime, r.ModifyTime = StatusPending, 0, now, now
	r.ScheduleLog = AppendLog(r.ScheduleLog, LogEntry{At: now, Stage: r.TaskStage, Event: EventRetried})
	return nil
}

// NewRecord builds the stored form of a validated NewTask of type tt.
func NewRecord(id string, nt NewTask, tt TaskType, now time.Time) Record {
	order := now.Add(time.Duration(nt.DelayMS)*time.Millisecond - time.Duration(nt.Priority)*time.Second)
	return Record{
		Task: Task{
			TaskID:      id,
			TaskType:    nt.TaskType,
			TaskStage:   nt.TaskStage,
			Status:      StatusPending,
			TaskContext: nt.TaskContext,
			Priority:    nt.Priority,
			OrderTime:   order,
			MaxRetryNum: tt.MaxRetryNum,
			ScheduleLog: []LogEntry{{At: now, Stage: nt.TaskStage, Event: EventCreated}},
			CreateTime:  now,
			ModifyTime:  now,
			UniqueKey:   nt.UniqueKey,
			SequenceKey: nt.SequenceKey,
			RateKey:     nt.RateKey,
			FairnessKey: nt.FairnessKey,
		},
		RetryIntervalMS:    tt.RetryIntervalMS,
		MaxRetryIntervalMS: tt.MaxRetryIntervalMS,
	}
}

// MarshalLog encodes a schedule log for storage ("[]" when empty), byte
// for byte as json.Marshal would: every created task stores one, and
// json.Marshal's reflection was a third of a create's encoding time.
func MarshalLog(l []LogEntry) []byte {
	if len(l) == 0 {
		return []byte("[]")
	}
	b := make([]byte, 0, 112*len(l))
	b = append(b, '[')
	for i := range l {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendLogEntry(b, &l[i]); !ok {
			b, _ = json.Marshal(l) // LogEntry always marshals
			return b
		}
	}
	return append(b, ']')
}

// appendLogEntry appends e as json.Marshal encodes it, or reports false
// for what it leaves to json.Marshal: a time MarshalJSON refuses or
// formats differently, and strings that need escaping.
func appendLogEntry(b []byte, e *LogEntry) ([]byte, bool) {
	if y := e.At.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := e.At.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		return b, false // offsets RFC 3339 cannot write: MarshalJSON refuses them
	}
	b = append(b, `{"at":"`...)
	b = e.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	var ok bool
	for _, f := range [...]struct {
		key, val  string
		omitEmpty bool
	}{{`,"worker":"`, e.Worker, true}, {`,"stage":"`, e.Stage, true}, {`,"event":"`, e.Event, false}, {`,"error":"`, e.Error, true}} {
		if f.val == "" && f.omitEmpty {
			continue
		}
		b = append(b, f.key...)
		if b, ok = appendPlain(b, f.val); !ok {
			return b, false
		}
		b = append(b, '"')
	}
	return append(b, '}'), true
}

// appendPlain appends s if json.Marshal would write it unescaped: printable
// ASCII other than the quote, the backslash and the HTML characters it
// escapes (<, > and &).
func appendPlain(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	return append(b, s...), true
}
