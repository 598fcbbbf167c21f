package flow

import (
	"encoding/json"
	"time"
)

// This file is the wire contract of the flow HTTP API (docs/flow-api.md). The
// server, the command-line client and the worker SDK all use these types, so
// a field renamed here is renamed everywhere.

// Status is a task's state. The numbers are Asyncflow's and are stored as is.
type Status int

// Task statuses.
const (
	StatusPending    Status = 1
	StatusProcessing Status = 2
	StatusSuccess    Status = 3
	StatusFailed     Status = 4
	StatusCancelled  Status = 5
	// StatusWaiting: the task fanned out (set_task with children) and is
	// held by nobody until every child has ended; then it is pending at
	// its join_stage.
	StatusWaiting Status = 6
)

// MaxContextBytes is the largest task_context accepted (as in Asyncflow).
const MaxContextBytes = 4096

// TaskType is a task type's schedule config (POST /v1/register_task).
// Durations travel as milliseconds.
type TaskType struct {
	TaskType           string `json:"task_type"`
	ScheduleLimit      int    `json:"schedule_limit"`         // most tasks one hold returns
	ScheduleIntervalMS int64  `json:"schedule_interval_ms"`   // how often workers pull
	MaxProcessingMS    int64  `json:"max_processing_time_ms"` // lease length
	MaxRetryNum        int    `json:"max_retry_num"`
	RetryIntervalMS    int64  `json:"retry_interval_ms"`     // first retry delay, doubled per retry
	MaxRetryIntervalMS int64  `json:"max_retry_interval_ms"` // cap of the doubling
	// Paused is read-only here: set by pause_task_type, cleared by
	// resume_task_type. A paused type's tasks are never held.
	Paused bool `json:"paused,omitempty"`
	// Cron makes the type periodic: a 5-field cron expression (minute hour
	// day-of-month month day-of-week, or a descriptor such as @hourly),
	// in UTC. Each tick creates one task at stage CronStage with context
	// CronContext, exactly once across all servers.
	Cron        string          `json:"cron,omitempty"`
	CronStage   string          `json:"cron_stage,omitempty"`
	CronContext json.RawMessage `json:"cron_context,omitempty"`
	// RateLimitPerSecond, when above 0, caps the holds of each rate_key
	// of the type at this many tasks a second, across all servers (a
	// burst of up to one second's worth). Tasks without a rate_key are
	// not limited.
	RateLimitPerSecond float64 `json:"rate_limit_per_second,omitempty"`
	// PausedKeys is read-only: get_task_type lists the type's rate keys
	// that are paused now (set_task with pause_rate_key_ms, or out of
	// their rate limit) and until when.
	PausedKeys []PausedKey `json:"paused_keys,omitempty"`
	// Fair, when true, hands out each hold across the fairness keys that
	// have due tasks in proportion to FairnessWeights, instead of by due
	// time alone: a tenant with many queued tasks does not starve one with
	// few. Tasks without a fairness_key fill what the keyed ones leave.
	Fair bool `json:"fair,omitempty"`
	// FairnessWeights weighs a fair type's keys (fairness_key -> weight,
	// 1 to MaxFairnessWeight); a key not listed weighs 1.
	FairnessWeights map[string]int `json:"fairness_weights,omitempty"`
}

// PausedKey is a rate key whose pending tasks are not held until Until.
type PausedKey struct {
	RateKey string    `json:"rate_key"`
	Until   time.Time `json:"until"`
}

// LogEntry is one line of a task's short schedule log.
type LogEntry struct {
	At     time.Time `json:"at"`
	Worker string    `json:"worker,omitempty"`
	Stage  string    `json:"stage,omitempty"`
	Event  string    `json:"event"` // held, pending, success, failed, retry, expired, cancelled
	Error  string    `json:"error,omitempty"`
}

// Task is one task as the API returns it.
type Task struct {
	TaskID      string          `json:"task_id"`
	TaskType    string          `json:"task_type"`
	TaskStage   string          `json:"task_stage"`
	Status      Status          `json:"status"`
	TaskContext json.RawMessage `json:"task_context,omitempty"`
	Priority    int             `json:"priority"`
	OrderTime   time.Time       `json:"order_time"`
	CrtRetryNum int             `json:"crt_retry_num"`
	MaxRetryNum int             `json:"max_retry_num"`
	Owner       string          `json:"owner,omitempty"`
	Lease       string          `json:"lease,omitempty"` // set only in hold_tasks answers
	LeaseExpiry *time.Time      `json:"lease_expiry,omitempty"`
	ScheduleLog []LogEntry      `json:"schedule_log,omitempty"`
	CreateTime  time.Time       `json:"create_time"`
	ModifyTime  time.Time       `json:"modify_time"`
	UniqueKey   string          `json:"unique_key,omitempty"`
	SequenceKey string          `json:"sequence_key,omitempty"`
	RateKey     string          `json:"rate_key,omitempty"`
	FairnessKey string          `json:"fairness_key,omitempty"`
	// Children counts a fan-out parent's children by status name; get_task
	// fills it, and only for a task that has children.
	Children map[string]int64 `json:"children,omitempty"`
}

// NewTask is one task to create.
type NewTask struct {
	TaskType    string          `json:"task_type"`
	TaskStage   string          `json:"task_stage"`
	TaskContext json.RawMessage `json:"task_context,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	DelayMS     int64           `json:"delay_ms,omitempty"` // order_time = now + delay
	// UniqueKey, when set, makes the create return the id of a pending or
	// processing task of the same type with the same key, if there is one,
	// instead of creating another.
	UniqueKey string `json:"unique_key,omitempty"`
	// SequenceKey, when set, orders the type's tasks with the same key:
	// at most one of them is processing at a time, and they run in
	// creation order (a retry keeps its place). See docs/flow.md.
	SequenceKey string `json:"sequence_key,omitempty"`
	// RateKey names the upstream (an API key, a host) the task calls: a
	// worker's set_task with pause_rate_key_ms pauses every pending task
	// of the type with this key, and the type's rate_limit_per_second
	// caps each key's holds.
	RateKey string `json:"rate_key,omitempty"`
	// FairnessKey names who the task is for (a tenant, a customer): a
	// type registered with fair shares its holds across the keys that
	// have due tasks, by the type's fairness_weights.
	FairnessKey string `json:"fairness_key,omitempty"`
}

// CreateTaskRequest is the body of POST /v1/create_task: either the fields
// of one NewTask inline, or a batch in Tasks.
type CreateTaskRequest struct {
	NewTask
	Tasks []NewTask `json:"tasks,omitempty"`
}

// CreateTaskResponse lists the ids in request order. An id that belongs
// to a task that already existed (same type and unique_key, pending or
// processing) is flagged: Existing for the inline form, ExistingIndex
// (positions in tasks) for a batch.
type CreateTaskResponse struct {
	TaskIDs       []string `json:"task_ids"`
	Existing      bool     `json:"existing,omitempty"`
	ExistingIndex []int    `json:"existing_index,omitempty"`
}

// TaskTypeRequest is the body of POST /v1/pause_task_type and
// /v1/resume_task_type.
type TaskTypeRequest struct {
	TaskType string `json:"task_type"`
}

// RetryTaskRequest is the body of POST /v1/retry_task: a failed or
// cancelled task goes back to pending, due now, with its retries reset;
// TaskStage and TaskContext, when given, replace the task's.
type RetryTaskRequest struct {
	TaskID      string          `json:"task_id"`
	TaskStage   string          `json:"task_stage,omitempty"`
	TaskContext json.RawMessage `json:"task_context,omitempty"`
}

// HeartbeatRequest is the body of POST /v1/heartbeat: renew every lease
// the worker holds, each to now + its type's max_processing_time.
type HeartbeatRequest struct {
	WorkerID string `json:"worker_id"`
}

// HeldLease is one lease a heartbeat renewed.
type HeldLease struct {
	TaskID      string    `json:"task_id"`
	Lease       string    `json:"lease"`
	LeaseExpiry time.Time `json:"lease_expiry"`
}

// HeartbeatResponse lists the tasks the worker still holds, renewed; a
// task the worker thinks it holds that is missing (or has another lease)
// is no longer its.
type HeartbeatResponse struct {
	Tasks []HeldLease `json:"tasks"`
}

// WorkerGoneRequest is the body of POST /v1/worker_gone: the worker is
// declared dead, and its tasks are rescued now (as on lease expiry).
type WorkerGoneRequest struct {
	WorkerID string `json:"worker_id"`
}

// WorkerGoneResponse says how many tasks were rescued.
type WorkerGoneResponse struct {
	Rescued int `json:"rescued"`
}

// DeleteTaskRequest is the body of POST /v1/delete_task.
type DeleteTaskRequest struct {
	TaskID string `json:"task_id"`
}

// HoldTasksRequest is the body of POST /v1/hold_tasks.
type HoldTasksRequest struct {
	TaskType string `json:"task_type"`
	Limit    int    `json:"limit"`
	WorkerID string `json:"worker_id"`
	WaitMS   int64  `json:"wait_ms,omitempty"` // long-poll up to this long when nothing is due
	// OmitScheduleLog leaves each task's schedule_log out of the answer
	// (the hold still records its entry); the worker SDK sets it unless
	// its handlers ask for logs.
	OmitScheduleLog bool `json:"omit_schedule_log,omitempty"`
}

// HoldTasksResponse holds the claimed tasks, each with its Lease set.
type HoldTasksResponse struct {
	Tasks []Task `json:"tasks"`
}

// SetTaskRequest is the body of POST /v1/set_task. Status pending with a
// TaskStage hands the task to that stage; success and failed end it (Error
// with failed says why); Error with Status pending reschedules the stage with
// backoff while retries are left, else fails the task. DelayMS postpones the
// next stage.
type SetTaskRequest struct {
	TaskID      string          `json:"task_id"`
	Lease       string          `json:"lease"`
	Status      Status          `json:"status"`
	TaskStage   string          `json:"task_stage,omitempty"`
	TaskContext json.RawMessage `json:"task_context,omitempty"`
	Error       string          `json:"error,omitempty"`
	DelayMS     int64           `json:"delay_ms,omitempty"`
	// PauseRateKeyMS, with status 1 (pending), pauses the task's rate_key
	// (a worker that got a 429 passes its Retry-After): no pending task
	// of the type with that key is held for this long, on any server. The
	// task itself runs again after the pause without spending a retry.
	PauseRateKeyMS int64 `json:"pause_rate_key_ms,omitempty"`
	// Children, with status 6 (waiting), fans out: the children (create
	// items, at most MaxBatch, no unique_key) are created with the set, in
	// one transaction, and the task waits, held by nobody, until every
	// child has ended; then it is pending at JoinStage (required with
	// children). See docs/flow.md, "Fan-out and fan-in".
	Children  []NewTask `json:"children,omitempty"`
	JoinStage string    `json:"join_stage,omitempty"`
	// ChildRecords are Children as the server built them (ids, each
	// type's retry policy); stores insert these.
	ChildRecords []Record `json:"-"`
}

// TaskChild is one child of a fan-out as GET /v1/get_task_children
// answers it: its final status, context and error once it has ended.
type TaskChild struct {
	TaskID      string          `json:"task_id"`
	TaskType    string          `json:"task_type"`
	TaskStage   string          `json:"task_stage"`
	Status      Status          `json:"status"`
	TaskContext json.RawMessage `json:"task_context,omitempty"`
	// Error is the error of the child's last schedule-log entry that has
	// one, when the child failed.
	Error      string    `json:"error,omitempty"`
	ModifyTime time.Time `json:"modify_time"`
}

// TaskChildrenResponse is GET /v1/get_task_children?task_id=&limit=&cursor=,
// in task_id order.
type TaskChildrenResponse struct {
	Children   []TaskChild `json:"children"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// ChildOf is a child record as get_task_children shows it.
func ChildOf(r Record) TaskChild {
	c := TaskChild{TaskID: r.TaskID, TaskType: r.TaskType, TaskStage: r.TaskStage, Status: r.Status, TaskContext: r.TaskContext, ModifyTime: r.ModifyTime}
	if r.Status == StatusFailed {
		for i := len(r.ScheduleLog) - 1; i >= 0; i-- {
			if e := r.ScheduleLog[i].Error; e != "" {
				c.Error = e
				break
			}
		}
	}
	return c
}

// SetTasksRequest is the batch form: POST /v1/set_tasks.
type SetTasksRequest struct {
	Tasks []SetTaskRequest `json:"tasks"`
}

// SetTasksResponse has one result per request, in order; Error is empty on
// success and Code is the HTTP status the single form would have returned.
type SetTasksResponse struct {
	Results []SetResult `json:"results"`
}

// SetResult is the outcome of one set in a batch.
type SetResult struct {
	TaskID string `json:"task_id"`
	Code   int    `json:"code"`
	Error  string `json:"error,omitempty"`
}

// RenewLeaseRequest is the body of POST /v1/renew_lease.
type RenewLeaseRequest struct {
	TaskID string `json:"task_id"`
	Lease  string `json:"lease"`
	// ExtendMS is how long from now the lease lasts; 0 means the type's
	// max_processing_time.
	ExtendMS int64 `json:"extend_ms,omitempty"`
}

// RenewLeaseResponse carries the new expiry.
type RenewLeaseResponse struct {
	LeaseExpiry time.Time `json:"lease_expiry"`
}

// CancelTaskRequest is the body of POST /v1/cancel_task.
type CancelTaskRequest struct {
	TaskID string `json:"task_id"`
}

// TaskListResponse is GET /v1/get_task_list?task_type=&status=&task_stage=&limit=&cursor=.
type TaskListResponse struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// StatsResponse is GET /v1/stats: counts by type and status.
type StatsResponse struct {
	Types []TypeStats `json:"types"`
}

// TypeStats counts one type's tasks by status name (pending, processing, ...).
type TypeStats struct {
	TaskType string           `json:"task_type"`
	Counts   map[string]int64 `json:"counts"`
	Paused   bool             `json:"paused,omitempty"`
}

// ErrorResponse is the body of every 4xx/5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}
