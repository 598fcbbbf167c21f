package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
)

// minLease is the shortest lease the worker plans with when the server's
// expiry is closer than that (clock skew, a tiny max_processing_time).
const minLease = 200 * time.Millisecond

// heldTask is one task this worker holds, from hold until its outcome is
// reported (or the lease is lost). Its timer renews the lease at a third of
// the lease length, whether the task is queued, running or being reported.
type heldTask struct {
	w        *Worker
	task     Task
	lease    string
	leaseDur time.Duration

	mu       sync.Mutex
	expiry   time.Time // local, conservative estimate of the lease expiry
	timer    *time.Timer
	cancel   context.CancelCauseFunc // the running handler's, once started
	started  bool
	lost     bool
	released bool
}

// newHeld wraps a task a hold returned. holdStart is when the hold was
// sent, so the local expiry estimate errs early. leaseDur is the type's
// max_processing_time when known; otherwise the server's expiry gives it.
func newHeld(w *Worker, t *flow.Task, holdStart time.Time, leaseDur time.Duration) *heldTask {
	if leaseDur <= 0 && t.LeaseExpiry != nil {
		leaseDur = t.LeaseExpiry.Sub(holdStart)
	}
	leaseDur = max(leaseDur, minLease)
	return &heldTask{
		w: w,
		task: Task{
			ID: t.TaskID, Type: t.TaskType, Stage: t.TaskStage, Context: t.TaskContext,
			Attempt: t.CrtRetryNum, Priority: t.Priority, Raw: *t,
		},
		lease:    t.Lease,
		leaseDur: leaseDur,
		expiry:   holdStart.Add(leaseDur),
	}
}

// armRenew starts the renewal timer.
func (h *heldTask) armRenew(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(h.leaseDur/3, func() { h.renew(ctx) })
}

func (h *heldTask) renew(ctx context.Context) {
	h.mu.Lock()
	if h.released || h.lost {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, h.leaseDur/3)
	_, err := h.w.c.RenewLease(rctx, flow.RenewLeaseRequest{TaskID: h.task.ID, Lease: h.lease})
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	switch {
	case err == nil:
		h.expiry = start.Add(h.leaseDur)
		h.timer.Reset(h.leaseDur / 3)
	case errors.Is(err, client.ErrStaleLease) || errors.Is(err, client.ErrNotFound):
		h.lost = true
		if h.cancel != nil {
			h.cancel(ErrLeaseLost)
		}
		h.w.log.Warn("flow worker: lease lost", "task_id", h.task.ID, "stage", h.task.Stage, "err", err)
	default:
		if ctx.Err() != nil {
			return
		}
		h.w.log.Warn("flow worker: renew failed; retrying", "task_id", h.task.ID, "err", err)
		if time.Now().Before(h.expiry) {
			h.timer.Reset(max(h.leaseDur/10, 50*time.Millisecond))
		}
	}
}

// start records that a runner took the task; false means the lease was lost
// while it was queued and the task must not run.
func (h *heldTask) start(cancel context.CancelCauseFunc) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started, h.cancel = true, cancel
	return !h.lost
}

func (h *heldTask) isLost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// leaseLeft reports whether the lease is (by the local estimate) still ours.
func (h *heldTask) leaseLeft() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost && time.Now().Before(h.expiry)
}

// release ends the worker's hold of the task: no more renewals, and its
// backlog slot is free. It is safe to call more than once.
func (h *heldTask) release() {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.w.unreserve(1)
}

// setRequest turns a handler's outcome into the set_task to send.
func (h *heldTask) setRequest(res Result, err error) flow.SetTaskRequest {
	req := flow.SetTaskRequest{TaskID: h.task.ID, Lease: h.lease, TaskStage: h.task.Stage, TaskContext: h.task.Context}
	if err == nil {
		var ctxJSON []byte
		ctxJSON, err = encodeContext(res.Context, h.task.Context)
		if err == nil {
			req.TaskContext = ctxJSON
			req.DelayMS = res.Delay.Milliseconds()
			switch res.Status {
			case 0, flow.StatusSuccess:
				req.Status = flow.StatusSuccess
			case flow.StatusPending:
				if res.Stage == "" {
					err = errors.New("handler returned Next with an empty stage")
				}
				req.Status, req.TaskStage = flow.StatusPending, res.Stage
			case flow.StatusFailed:
				// Failed is final; the reason goes to the schedule log.
				req.Status, req.Error = flow.StatusFailed, res.Reason
				h.w.log.Warn("flow worker: stage failed; the task ends failed", "task_id", h.task.ID, "task_type", h.task.Type,
					"stage", h.task.Stage, "attempt", h.task.Attempt, "err", res.Reason)
			default:
				err = errors.New("handler returned status " + statusName(res.Status) + "; want pending, success or failed")
			}
		}
	}
	if err != nil {
		h.w.log.Warn("flow worker: stage failed; the server retries it while retries are left", "task_id", h.task.ID, "task_type", h.task.Type,
			"stage", h.task.Stage, "attempt", h.task.Attempt, "err", err)
		return errorRequest(h, err.Error())
	}
	return req
}

// errorRequest asks for a retry of the same stage after backoff.
func errorRequest(h *heldTask, msg string) flow.SetTaskRequest {
	const maxErr = 1000
	if len(msg) > maxErr {
		msg = msg[:maxErr]
	}
	return flow.SetTaskRequest{
		TaskID: h.task.ID, Lease: h.lease, Status: flow.StatusPending,
		TaskStage: h.task.Stage, TaskContext: h.task.Context, Error: msg,
	}
}

func statusName(s flow.Status) string {
	switch s {
	case flow.StatusPending:
		return "pending"
	case flow.StatusProcessing:
		return "processing"
	case flow.StatusSuccess:
		return "success"
	case flow.StatusFailed:
		return "failed"
	case flow.StatusCancelled:
		return "cancelled"
	}
	return "unknown"
}
