package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// minLease is the shortest lease the worker plans with when the server's
// expiry is closer than that (clock skew, a tiny max_processing_time).
const minLease = 200 * time.Millisecond

// heldTask is one task this worker holds, from hold until its outcome is
// reported (or the lease is lost). Its lease is renewed by the worker's
// heartbeat (one call for all the worker's tasks) at a third of the lease
// length, whether the task is queued, running or being reported.
type heldTask struct {
	w        *Worker
	task     Task
	lease    string
	leaseDur time.Duration
	// heldCtx is the context as held: a set sends the context only when
	// the handler replaced it (see sentContext).
	heldCtx json.RawMessage

	mu        sync.Mutex
	expiry    time.Time               // local, conservative estimate of the lease expiry
	due       time.Time               // when the lease wants renewing
	cancel    context.CancelCauseFunc // the running handler's, once started
	started   bool
	reporting bool // an outcome is queued or sent: the server may have ended the task
	lost      bool
	released  bool
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
		heldCtx:  t.TaskContext,
		expiry:   holdStart.Add(leaseDur),
		due:      holdStart.Add(leaseDur / 3),
	}
}

// armRenew hands the task to the heartbeat.
func (h *heldTask) armRenew() { h.w.track(h) }

// renewed applies a heartbeat's answer: still ours under the same lease,
// or lost. start is when the heartbeat was sent.
func (h *heldTask) renewed(start time.Time, lease string, listed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.released || h.lost:
	case listed && lease == h.lease:
		h.expiry, h.due = start.Add(h.leaseDur), start.Add(h.leaseDur/3)
	case h.reporting:
		// Not listed because our own outcome ended it (or it will be
		// refused with 409, and the reporter drops it).
	default:
		h.lost = true
		if h.cancel != nil {
			h.cancel(ErrLeaseLost)
		}
		h.w.log.Warn("flow worker: lease lost", "task_id", h.task.ID, "stage", h.task.Stage)
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
	h.mu.Unlock()
	h.w.untrack(h)
	h.w.unreserve(1)
}

// setRequest turns a handler's outcome into the set_task to send.
func (h *heldTask) setRequest(res Result, err error) flow.SetTaskRequest {
	req := flow.SetTaskRequest{TaskID: h.task.ID, Lease: h.lease, TaskStage: h.task.Stage, TaskContext: h.sentContext()}
	if err == nil {
		var ctxJSON []byte
		ctxJSON, err = encodeContext(res.Context, req.TaskContext)
		if err == nil {
			req.TaskContext = ctxJSON
			req.DelayMS = res.Delay.Milliseconds()
			switch res.Status {
			case 0, flow.StatusSuccess:
				req.Status = flow.StatusSuccess
			case flow.StatusPending:
				if res.PauseKey > 0 {
					// PauseKey: the same stage again after the pause.
					req.Status, req.Error = flow.StatusPending, res.Reason
					req.PauseRateKeyMS = int64((res.PauseKey + time.Millisecond - 1) / time.Millisecond)
					if res.Stage != "" {
						req.TaskStage = res.Stage
					}
					break
				}
				if res.Stage == "" {
					err = errors.New("handler returned Next with an empty stage")
				}
				req.Status, req.TaskStage = flow.StatusPending, res.Stage
			case flow.StatusWaiting:
				if len(res.Children) == 0 || res.JoinStage == "" {
					err = errors.New("handler returned FanOut without children or a join stage")
				}
				req.Status, req.Children, req.JoinStage, req.DelayMS = flow.StatusWaiting, res.Children, res.JoinStage, 0
			case flow.StatusFailed:
				// Failed is final; the reason goes to the schedule log.
				req.Status, req.Error = flow.StatusFailed, res.Reason
				h.w.log.Warn("flow worker: stage failed; the task ends failed", "task_id", h.task.ID, "task_type", h.task.Type,
					"stage", h.task.Stage, "attempt", h.task.Attempt, "err", res.Reason)
			default:
				err = errors.New("handler returned status " + statusName(res.Status) + "; want pending, success, failed or waiting (FanOut)")
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
		TaskStage: h.task.Stage, TaskContext: h.sentContext(), Error: msg,
	}
}

// sentContext is the task_context a set of this task sends when the
// handler returned none: nil (the server keeps the stored one) unless the
// handler assigned Task.Context. Echoing the held context back cost every
// set its bytes over HTTP and, on MySQL, a CASE arm per task in the
// UPDATE that rewrote each row's context with itself.
func (h *heldTask) sentContext() json.RawMessage {
	c := h.task.Context
	if len(c) == len(h.heldCtx) && (len(c) == 0 || &c[0] == &h.heldCtx[0]) {
		return nil
	}
	return c
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
	case flow.StatusWaiting:
		return "waiting"
	}
	return "unknown"
}

// track adds a held task to those the heartbeat renews. The heartbeat
// is woken only when the task is due before its timer: waking it for
// every task made it rescan every held task once per task held, O(n^2)
// in the backlog.
func (w *Worker) track(h *heldTask) {
	h.mu.Lock()
	due := h.due
	h.mu.Unlock()
	w.liveMu.Lock()
	w.live[h] = struct{}{}
	sooner := w.armed.IsZero() || due.Before(w.armed)
	w.liveMu.Unlock()
	if sooner {
		select {
		case w.liveCh <- struct{}{}:
		default:
		}
	}
}

func (w *Worker) untrack(h *heldTask) {
	w.liveMu.Lock()
	delete(w.live, h)
	w.liveMu.Unlock()
}

// heartbeatLoop renews every held lease with one POST /v1/heartbeat,
// timed by the task whose renewal is due first, until ctx ends.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	var retryAt time.Time // after a failed heartbeat
	for {
		next, ok := w.nextBeat(retryAt)
		var fire <-chan time.Time
		var timer *time.Timer
		if ok {
			timer = time.NewTimer(time.Until(next))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-w.liveCh: // a new task may be due sooner
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-fire:
		}
		if d, ok := w.beat(ctx); ok {
			retryAt = time.Time{}
		} else {
			retryAt = time.Now().Add(d)
		}
	}
}

// nextBeat is when the first held lease wants renewing (retryAt instead,
// after a failed heartbeat, while any is held), and arms track with it.
func (w *Worker) nextBeat(retryAt time.Time) (time.Time, bool) {
	w.liveMu.Lock()
	defer w.liveMu.Unlock()
	var next time.Time
	for h := range w.live {
		h.mu.Lock()
		if !h.lost && (next.IsZero() || h.due.Before(next)) {
			next = h.due
		}
		h.mu.Unlock()
	}
	if !retryAt.IsZero() && !next.IsZero() {
		next = retryAt
	}
	w.armed = next // what track compares a new task's due with
	return next, !next.IsZero()
}

// beat sends one heartbeat and applies its answer to every task held when
// it was sent. On failure it says how soon to try again.
func (w *Worker) beat(ctx context.Context) (retry time.Duration, ok bool) {
	w.liveMu.Lock()
	held := make([]*heldTask, 0, len(w.live))
	shortest := time.Duration(0)
	for h := range w.live {
		held = append(held, h)
		if shortest == 0 || h.leaseDur < shortest {
			shortest = h.leaseDur
		}
	}
	w.liveMu.Unlock()
	if len(held) == 0 {
		return 0, true
	}
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, shortest/3)
	leases, err := w.c.Heartbeat(bctx, w.cfg.WorkerID)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("flow worker: heartbeat failed; retrying", "tasks", len(held), "err", err)
		}
		return max(shortest/10, 50*time.Millisecond), false
	}
	got := make(map[string]string, len(leases))
	for _, l := range leases {
		got[l.TaskID] = l.Lease
	}
	for _, h := range held {
		lease, listed := got[h.task.ID]
		h.renewed(start, lease, listed)
	}
	return 0, true
}
