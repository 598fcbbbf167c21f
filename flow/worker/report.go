package worker

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
)

// outcome is one set_task waiting to be sent.
type outcome struct {
	h     *heldTask
	req   flow.SetTaskRequest
	tries int
}

// outbox is the unbounded queue of outcomes the reporter sends. Outcomes
// that finish together leave in one set_tasks.
type outbox struct {
	mu     sync.Mutex
	items  []*outcome
	notify chan struct{}
	closed bool
}

func (o *outbox) init() { o.notify = make(chan struct{}, 1) }

func (o *outbox) push(x *outcome) {
	x.h.mu.Lock()
	x.h.reporting = true
	x.h.mu.Unlock()
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		x.h.w.reported(x, ErrNotReported)
		x.h.release()
		return
	}
	o.items = append(o.items, x)
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// take waits for outcomes and returns up to n of them; nil once the outbox
// is closed and empty.
func (o *outbox) take(n int) []*outcome {
	for {
		o.mu.Lock()
		if len(o.items) > 0 {
			k := min(n, len(o.items))
			batch := append([]*outcome(nil), o.items[:k]...)
			o.items = o.items[k:]
			more := len(o.items) > 0
			o.mu.Unlock()
			if more {
				// One notification may stand for many pushes: hand what
				// is left to another reporter.
				select {
				case o.notify <- struct{}{}:
				default:
				}
			}
			return batch
		}
		closed := o.closed
		o.mu.Unlock()
		if closed {
			// Wake the next reporter: it is done too.
			select {
			case o.notify <- struct{}{}:
			default:
			}
			return nil
		}
		<-o.notify
	}
}

// dropAll releases every queued outcome without sending it and makes later
// pushes do the same: the server retries those tasks when their leases end.
func (o *outbox) dropAll() {
	o.mu.Lock()
	items := o.items
	o.items, o.closed = nil, true
	o.mu.Unlock()
	for _, x := range items {
		x.h.w.reported(x, ErrNotReported)
		x.h.release()
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// reporters is how many set_tasks one worker has in flight at most. One
// at a time, a batch that finished while the last was on the wire waited
// its whole round trip (a group commit and its fsync on SQLite); at the
// end of a burst the last outcomes queued behind two or three such round
// trips. Two overlap them, and on SQLite land in the same group commit.
const reporters = 2

// reportLoop sends outcomes until the outbox is closed and empty; the
// worker runs reporters of them.
func (w *Worker) reportLoop(ctx context.Context) {
	for {
		batch := w.out.take(w.cfg.ReportBatch)
		if batch == nil {
			return
		}
		w.send(ctx, batch)
	}
}

func (w *Worker) send(ctx context.Context, batch []*outcome) {
	if len(batch) == 1 {
		err := w.c.SetTask(ctx, batch[0].req)
		if retryable(err) {
			w.log.Warn("flow worker: report failed; retrying", "tasks", 1, "err", err)
		}
		w.settle(batch[0], err)
		return
	}
	reqs := make([]flow.SetTaskRequest, len(batch))
	for i, o := range batch {
		reqs[i] = o.req
	}
	results, err := w.c.SetTasks(ctx, reqs)
	var apiErr *client.APIError
	switch {
	case err == nil:
		for i, o := range batch {
			w.settle(o, client.ResultErr(results[i]))
		}
	case errors.As(err, &apiErr) && apiErr.Status < 500:
		// The batch as a whole was refused; send each alone so one bad
		// outcome does not sink the others.
		for _, o := range batch {
			w.settle(o, w.c.SetTask(ctx, o.req))
		}
	default:
		w.log.Warn("flow worker: report failed; retrying", "tasks", len(batch), "err", err)
		for _, o := range batch {
			w.settle(o, err)
		}
	}
}

// retryable reports whether a set's error calls for sending it again: a
// transport failure, a 5xx or a 429.
func retryable(err error) bool {
	if err == nil || errors.Is(err, client.ErrStaleLease) || errors.Is(err, client.ErrNotFound) {
		return false
	}
	var apiErr *client.APIError
	return !errors.As(err, &apiErr) || apiErr.Status >= 500 || apiErr.Status == http.StatusTooManyRequests
}

// settle acts on the answer to one outcome.
func (w *Worker) settle(o *outcome, err error) {
	var apiErr *client.APIError
	switch {
	case err == nil:
		w.reported(o, nil)
		o.h.release()
	case errors.Is(err, client.ErrStaleLease), errors.Is(err, client.ErrNotFound):
		w.reported(o, err)
		// The task is no longer ours (lease expired and re-held, cancelled,
		// or a retried set that had in fact landed): nothing to do.
		w.log.Warn("flow worker: outcome refused, lease is stale", "task_id", o.h.task.ID, "stage", o.h.task.Stage, "err", err)
		o.h.release()
	case errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests:
		// The server will never take this outcome (e.g. a context it finds
		// too large). Ask for a retry of the stage instead, once.
		if o.req.Error == "" || o.req.Status != flow.StatusPending {
			w.log.Warn("flow worker: outcome refused; reporting it as an error", "task_id", o.h.task.ID, "err", err)
			w.out.push(&outcome{h: o.h, req: errorRequest(o.h, "outcome refused by server: "+apiErr.Message)})
			return
		}
		w.log.Error("flow worker: error outcome refused; the task retries when its lease expires", "task_id", o.h.task.ID, "err", err)
		w.reported(o, err)
		o.h.release()
	default:
		// Transport failure or 5xx: try again while the lease lasts (the
		// renewal timer keeps it alive meanwhile).
		if !o.h.leaseLeft() {
			w.log.Error("flow worker: could not report outcome before the lease ended; the server will retry the task", "task_id", o.h.task.ID, "err", err)
			w.reported(o, err)
			o.h.release()
			return
		}
		o.tries++
		d := min(50*time.Millisecond<<min(o.tries, 6), 2*time.Second)
		w.log.Debug("flow worker: report failed; retrying", "task_id", o.h.task.ID, "in", d, "err", err)
		time.AfterFunc(jitter(d), func() { w.out.push(o) })
	}
}

// reported tells Config.OnReported what became of an outcome.
func (w *Worker) reported(o *outcome, err error) {
	if w.cfg.OnReported == nil {
		return
	}
	r := Report{TaskID: o.h.task.ID, TaskType: o.h.task.Type, Stage: o.h.task.Stage, Status: o.req.Status, Err: err}
	if o.req.Status == flow.StatusPending {
		r.NextStage = o.req.TaskStage
	}
	w.cfg.OnReported(r)
}
