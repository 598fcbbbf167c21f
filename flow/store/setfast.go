package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// The set fast path (each driver's setFast): a batch whose outcome does
// not depend on the task's retry counters is applied by one UPDATE
// (PostgreSQL, SQLite: one round trip and one commit, no row read into
// Go; MySQL: a narrow locking read of the rows' status and lease first,
// in the same transaction), with no transaction left open while the
// client talks. That
// covers what workers send almost always: success, failed without an
// error, and pending without an error (next stage or the same stage
// again). A set carrying an error (a retry with backoff) and a
// batch naming one task twice take the general path (lock, flow.ApplySet,
// write), which stays the reference: TestSetFastMatchesApplySet in the
// conformance suite checks the two agree.
//
// The lease is the compare-and-swap: the UPDATE changes a row only while it
// is processing under the request's lease, so a stale, expired-and-reheld
// or ended task is left alone and reported per item.

// fastSettable reports whether every request of the batch can take the
// fast path.
func fastSettable(reqs []flow.SetTaskRequest) bool {
	seen := make(map[string]struct{}, len(reqs))
	for _, r := range reqs {
		if r.Error != "" || r.Lease == "" || r.PauseRateKeyMS != 0 {
			return false
		}
		switch r.Status {
		case flow.StatusPending, flow.StatusSuccess, flow.StatusFailed:
		default:
			return false
		}
		if _, dup := seen[r.TaskID]; dup {
			return false
		}
		seen[r.TaskID] = struct{}{}
	}
	return true
}

// setCols are a set batch's requests as columns, for the drivers' fast
// paths: the order time is now plus the request's delay.
type setCols struct {
	ids, leases, stages []string
	sts                 []int32
	ctxs                []*string
	ots                 []int64
}

func setColumns(reqs []flow.SetTaskRequest, now time.Time) setCols {
	n := len(reqs)
	c := setCols{ids: make([]string, n), leases: make([]string, n), stages: make([]string, n), sts: make([]int32, n), ctxs: make([]*string, n), ots: make([]int64, n)}
	for i, r := range reqs {
		c.ids[i], c.leases[i], c.stages[i], c.sts[i] = r.TaskID, r.Lease, r.TaskStage, int32(r.Status)
		if r.TaskContext != nil {
			x := string(r.TaskContext)
			c.ctxs[i] = &x
		}
		c.ots[i] = us(now.Add(time.Duration(r.DelayMS) * time.Millisecond))
	}
	return c
}

// setFastDone wakes holds of the types that got pending tasks and gives
// each refused request its reason.
func (s *SQLStore) setFastDone(ctx context.Context, reqs []flow.SetTaskRequest, done, pending map[string]bool, now time.Time) ([]error, error) {
	n := len(reqs)
	for typ := range pending {
		s.onDue(typ)
	}
	errs := make([]error, n)
	var general []int // children: the fast path leaves them to the general one
	for i, r := range reqs {
		if done[r.TaskID] {
			continue
		}
		// Refused: tell a missing task from a stale lease. The row is not
		// processing under this lease and never will be again (leases are
		// not reused), so ApplySet on what is there now gives the reason.
		rec, gerr := s.GetTask(ctx, r.TaskID)
		switch {
		case errors.Is(gerr, flow.ErrNotFound):
			errs[i] = gerr
		case gerr != nil:
			return nil, fmt.Errorf("set %d tasks: %w", n, gerr)
		default:
			if errs[i] = flow.ApplySet(&rec, r, now); errs[i] == nil {
				// Still processing under this lease: the row is a child
				// (parent_id kept the fast UPDATE off it).
				general = append(general, i)
			}
		}
	}
	if len(general) > 0 {
		sub := make([]flow.SetTaskRequest, len(general))
		for k, i := range general {
			sub[k] = reqs[i]
		}
		gerrs, err := s.setGeneral(ctx, sub, now)
		if err != nil {
			return nil, err
		}
		for k, i := range general {
			errs[i] = gerrs[k]
		}
	}
	return errs, nil
}
