package store

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Store keeps task types and tasks. Errors callers branch on wrap
// flow.ErrNotFound, flow.ErrUnknownType and flow.ErrStaleLease. Times are
// passed in by the caller (the server's clock) and kept to the microsecond.
type Store interface {
	// RegisterType creates or replaces a task type's config.
	RegisterType(ctx context.Context, t flow.TaskType, now time.Time) error
	// GetType returns a type's config or an error wrapping ErrUnknownType.
	GetType(ctx context.Context, name string) (flow.TaskType, error)
	// ListTypes returns every registered type, by name.
	ListTypes(ctx context.Context) ([]flow.TaskType, error)

	// CreateTasks stores new pending records, all or none. A record with a
	// UniqueKey whose type already has a live (pending or processing) task
	// with that key is not stored: its TaskID becomes that task's and
	// Existing is set. Atomic across stores sharing the database. Every
	// record's type must be registered (RegisterType): the server and
	// TxCreator check it, and PruneEnded finds ended tasks by their type's
	// row on SQLite.
	CreateTasks(ctx context.Context, recs []flow.Record) error
	// Hold claims up to p.Limit due tasks of p.TaskType, oldest order_time
	// first, marking them processing under p.Lease until p.LeaseExpiry. No
	// task is returned to two holds unless released in between. A task
	// whose rate_key is paused, or whose sequence_key has an older live
	// task or a processing one, is not returned.
	Hold(ctx context.Context, p HoldParams) ([]flow.Record, error)
	// SetTasks applies a batch of validated set_task requests in one
	// transaction. A request with status waiting fans out: its
	// ChildRecords are created in the same transaction (a parent at
	// flow.MaxFanOutDepth gets a FieldError); a set that ends a child
	// makes its parent pending at the join stage when it was the last. errs has one entry per request (nil, or wrapping
	// ErrNotFound / ErrStaleLease); a failed entry changes nothing. err is
	// for the batch as a whole, when nothing was applied.
	SetTasks(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) (errs []error, err error)
	// RenewLease moves a held task's lease expiry to expiry.
	RenewLease(ctx context.Context, taskID, lease string, expiry time.Time) error
	// CancelTask ends a pending or processing task as cancelled. Cancelling
	// a cancelled task succeeds; one that ended otherwise gets ErrStaleLease.
	CancelTask(ctx context.Context, taskID string, now time.Time) error
	// FireCron creates the task of every tick of a periodic type due by
	// now (next gives the tick after a time; task builds a tick's record),
	// each exactly once across all stores sharing the database, and says
	// how many this call created. A type without a cron creates none.
	FireCron(ctx context.Context, taskType string, now time.Time, next func(time.Time) time.Time, task func(tick time.Time) flow.Record) (int, error)
	// Heartbeat renews every lease workerID holds to now + its type's
	// max_processing_time and returns them.
	Heartbeat(ctx context.Context, workerID string, now time.Time) ([]flow.HeldLease, error)
	// RescueWorker rescues every task workerID holds now, as if their
	// leases had expired (a retry counted, or failed).
	RescueWorker(ctx context.Context, workerID string, now time.Time) (int, error)
	// SetPaused pauses (no hold returns the type's tasks) or resumes a
	// type; an unknown type gives ErrUnknownType.
	SetPaused(ctx context.Context, taskType string, paused bool, now time.Time) error
	// PausedKeys lists up to limit rate keys of a type paused at now
	// (by a set with pause_rate_key_ms or by the type's rate limit), by
	// key.
	PausedKeys(ctx context.Context, taskType string, now time.Time, limit int) ([]flow.PausedKey, error)
	// RetryTask puts a failed or cancelled task back to pending (see
	// flow.ApplyRetry) and returns it; another status, or a unique key now
	// held by a live task, gives ErrConflict.
	RetryTask(ctx context.Context, taskID, stage string, taskContext json.RawMessage, now time.Time) (flow.Record, error)
	// DeleteTask deletes a task that is not processing (ErrConflict).
	DeleteTask(ctx context.Context, taskID string) error
	// GetTask returns one task.
	GetTask(ctx context.Context, taskID string) (flow.Record, error)
	// TaskChildren returns up to limit children of a fan-out parent with
	// ids after after, in task_id order.
	TaskChildren(ctx context.Context, parentID, after string, limit int) ([]flow.Record, error)
	// ChildCounts counts a parent's children by status name; nil when it
	// has none.
	ChildCounts(ctx context.Context, parentID string) (map[string]int64, error)
	// ListTasks returns tasks matching f in task_id order.
	ListTasks(ctx context.Context, f ListFilter) ([]flow.Record, error)
	// Stats counts tasks by type and status (registered types with none
	// included), from Counts.
	Stats(ctx context.Context) ([]flow.TypeStats, error)
	// Counts counts tasks by type, stage and status (of one type, unless
	// taskType is ""), omitting zeros, from counts kept as tasks change:
	// its cost does not grow with the tasks table. Exact: it adds what
	// FoldCounts has not folded yet.
	Counts(ctx context.Context, taskType string) ([]Count, error)
	// FoldCounts moves the counts' committed changes into their totals
	// (PostgreSQL, MySQL; a no-op on SQLite) and says how many it moved.
	// Servers call it every second so that reads sum few rows; one fold
	// runs at a time across servers (a call that finds another running
	// returns 0).
	FoldCounts(ctx context.Context) (int, error)
	// RebuildCounts recounts the counts from the tasks table, exactly,
	// without stopping writers (the repair for a count that drifted).
	RebuildCounts(ctx context.Context) error
	// NextDue is the earliest order_time of a pending task of the type.
	NextDue(ctx context.Context, taskType string) (t time.Time, ok bool, err error)

	// RescueExpired returns up to limit processing tasks whose lease expired
	// before now to pending (or failed), counting a retry.
	RescueExpired(ctx context.Context, now time.Time, limit int) (int, error)
	// PruneEnded deletes up to limit ended tasks last modified before
	// before, of registered types (see CreateTasks).
	PruneEnded(ctx context.Context, before time.Time, limit int) (int, error)

	// Dialect names the database: "sqlite", "postgres" or "mysql".
	Dialect() string
	Close() error
}

// HoldParams is one claim.
type HoldParams struct {
	TaskType    string
	WorkerID    string
	Limit       int
	Lease       string
	Now         time.Time
	LeaseExpiry time.Time
	// OmitLog leaves the held tasks' schedule logs out of the answer
	// (ScheduleLog nil); the hold still appends its entry to each.
	OmitLog bool
	// Fair and FairnessWeights are the type's (flow.TaskType): a fair
	// hold shares its tasks across the fairness keys with due tasks (see
	// fair.go). The caller passes them from its cache of the type, so a
	// hold of a type that is not fair reads nothing more.
	Fair            bool
	FairnessWeights map[string]int
	// fairKey, when set, restricts the claim to one fairness key.
	fairKey string
}

// ListFilter selects tasks; zero fields match everything. After is the last
// task id of the previous page.
type ListFilter struct {
	TaskType  string
	Status    flow.Status
	TaskStage string
	After     string
	Limit     int
}

// Locker serialises holds of one task type across servers (Asyncflow's
// Redis lock); see package redislock. Without one, a store relies on the
// database's row locks (SKIP LOCKED).
type Locker interface {
	Lock(ctx context.Context, key string) (unlock func(), err error)
}

// Options tune a store; the zero value is usable.
type Options struct {
	// TablePrefix starts every table and index name; default "flow_".
	// Letters, digits and _ only. Tests use a unique one per run.
	TablePrefix string
	// HoldLock, when set, is taken around each hold, and the claim uses no
	// SKIP LOCKED (Asyncflow's design, for comparison and for databases
	// without it).
	HoldLock Locker
	// OnDue is called after a commit that made tasks of a type pending
	// (created, handed to a stage, retried, rescued), and on PostgreSQL
	// when another server did. "" means any type (after a reconnect).
	OnDue func(taskType string)
	// Logger receives background errors; default slog.Default().
	Logger *slog.Logger
}
