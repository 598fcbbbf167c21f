package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// The set fast path (PostgreSQL): a batch whose outcome does not depend on
// the task's retry counters is applied by one UPDATE, in one round trip and
// one commit, with no row read into Go and no transaction left open while
// the client talks. That covers what workers send almost always: success,
// failed without an error, and pending without an error (next stage or the
// same stage again). A set carrying an error (a retry with backoff) and a
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
		if r.Error != "" || r.Lease == "" {
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

// pgSetFast is flow.ApplySet for requests without an error, in SQL:
//   - status becomes the requested one; owner, lease and expiry clear;
//   - pending: the stage becomes task_stage when given, crt_retry_num
//     restarts at 0 when that changes the stage, order_time = now + delay;
//   - success, failed: stage, retries and order_time stay;
//   - task_context is replaced when given;
//   - the schedule log gets {at, worker: the holder, stage: the new stage,
//     event} and keeps its last flow.ScheduleLogSize entries.
//
// The lease, status, stage and order time a batch's rows share (one hold
// hands all its tasks one lease) travel once, as in pgInsert.
//
// Arguments: the shared lease, status, stage and order time; ids, leases,
// statuses, stages, contexts, order times (an empty array for a shared
// column); now, log time, NOTIFY channel, NOTIFY payload prefix.
func pgSetFast(table string) string {
	pending, proc, success := sqlStatus(flow.StatusPending), sqlStatus(flow.StatusProcessing), sqlStatus(flow.StatusSuccess)
	stage := "(CASE WHEN v.st = " + pending + " AND v.stage <> '' THEN v.stage ELSE t.task_stage END)"
	return "WITH v AS (SELECT id, COALESCE(lease, ?::text) AS lease, COALESCE(st, ?::smallint) AS st, COALESCE(stage, ?::text) AS stage, ctx, COALESCE(ot, ?::bigint) AS ot" +
		" FROM unnest(?::text[], ?::text[], ?::smallint[], ?::text[], ?::text[], ?::bigint[]) AS v(id, lease, st, stage, ctx, ot))," +
		" u AS (UPDATE " + table + " t SET status = v.st, task_stage = " + stage + "," +
		" crt_retry_num = CASE WHEN v.st = " + pending + " AND v.stage <> '' AND v.stage <> t.task_stage THEN 0 ELSE t.crt_retry_num END," +
		" order_time = CASE WHEN v.st = " + pending + " THEN v.ot ELSE t.order_time END," +
		" task_context = COALESCE(v.ctx, t.task_context), owner = '', lease = '', lease_expiry = 0, modify_time = ?," +
		" schedule_log = " + pgAppendLog("t.schedule_log", pgLogEntry("?::text", "t.owner", stage,
		"CASE v.st WHEN "+pending+" THEN '"+flow.EventPending+"' WHEN "+success+" THEN '"+flow.EventSuccess+"' ELSE '"+flow.EventFailed+"' END")) +
		" FROM v WHERE t.task_id = v.id AND t.status + 0 = " + proc + " AND t.lease = v.lease AND t.lease <> ''" +
		" RETURNING t.task_id, t.task_type, t.status)" +
		// "status + 0" keeps the planner off the partial index of processing
		// rows (status = 2): with few processing rows in its statistics it
		// would hash-join over all of them instead of looking up 100 keys.
		// An uncorrelated subquery runs once, when the first row is out:
		// a NOTIFY per type that got pending tasks.
		" SELECT u.task_id, u.task_type, u.status, (SELECT count(pg_notify(?, ? || d.task_type)) FROM (SELECT DISTINCT task_type FROM u WHERE status = " + pending + ") d) FROM u"
}

// liteSetFast is pgSetFast for SQLite: one UPDATE ... FROM the batch,
// which travels as one JSON array of [id, context, lease, status, stage,
// order time] rows, so one prepared statement serves any batch size; a
// statement per row spent more in the driver than in SQLite. jsonb_each,
// not json_each: it hands each row over as binary JSON, which the ->>
// read directly, where json_each's text rows were parsed again by each of
// them (about 8% of the writer's CPU in BenchmarkCycle/sqlite). The lease,
// status, stage and order time a batch's rows share come as parameters
// instead (NULL when not shared), and a row then carries only its id and
// context: COALESCE reads no further than its first non-NULL argument,
// and each ->> was a JSON lookup in the one writer's time. In an UPDATE
// the right-hand side reads the row as it was, so t.owner and
// t.task_stage there are the holder and the old stage.
//
// Arguments: ?1 the rows, ?2 now, ?3 log time, ?4-?7 the shared lease,
// status, stage and order time.
func liteSetFast(table string) string {
	return "UPDATE " + table + " AS t SET" + liteSetClause("t.", "v.st", "v.stage", "v.ctx", "v.ot", "?2", "?3") +
		" FROM (SELECT value ->> 0 AS id, value ->> 1 AS ctx, COALESCE(?4, value ->> 2) AS lease, COALESCE(?5, value ->> 3) AS st," +
		" COALESCE(?6, value ->> 4) AS stage, COALESCE(?7, value ->> 5) AS ot FROM jsonb_each(?1)) AS v" +
		" WHERE t.task_id = v.id AND t.status = " + sqlStatus(flow.StatusProcessing) + " AND t.lease = v.lease AND t.lease <> ''" +
		" RETURNING task_id, task_type, status"
}

// liteSetOne is liteSetFast for a batch of one, with the request's values
// bound directly: a worker reporting each outcome alone (and every
// single set_task) skips the JSON and the UPDATE ... FROM machinery.
//
// Arguments: ?1 id, ?2 lease, ?3 status, ?4 stage, ?5 context, ?6 order
// time, ?7 now, ?8 log time.
func liteSetOne(table string) string {
	return "UPDATE " + table + " SET" + liteSetClause("", "?3", "?4", "?5", "?6", "?7", "?8") +
		" WHERE task_id = ?1 AND status = " + sqlStatus(flow.StatusProcessing) + " AND lease = ?2 AND lease <> '' RETURNING task_type, status"
}

// liteSetClause is what both set statements write: the new status, stage,
// context and order time, the lease cleared, and one schedule-log entry.
// The new values come as the SQL expressions given; col prefixes the
// row's own columns (the table's alias and a dot, or ""), which on the
// right-hand side of an UPDATE read the row as it was.
func liteSetClause(col, st, stage, ctx, ot, now, logAt string) string {
	pending, success := sqlStatus(flow.StatusPending), sqlStatus(flow.StatusSuccess)
	newStage := "(CASE WHEN " + st + " = " + pending + " AND " + stage + " <> '' THEN " + stage + " ELSE " + col + "task_stage END)"
	return " status = " + st + ", task_stage = " + newStage + "," +
		" crt_retry_num = CASE WHEN " + st + " = " + pending + " AND " + stage + " <> '' AND " + stage + " <> " + col + "task_stage THEN 0 ELSE " + col + "crt_retry_num END," +
		" order_time = CASE WHEN " + st + " = " + pending + " THEN " + ot + " ELSE " + col + "order_time END," +
		" task_context = COALESCE(" + ctx + ", " + col + "task_context), owner = '', lease = '', lease_expiry = 0, modify_time = " + now + "," +
		" schedule_log = " + liteAppendLog(col+"schedule_log", "json_object('at', "+logAt+", 'worker', "+col+"owner, 'stage', "+newStage+", 'event',"+
		" CASE "+st+" WHEN "+pending+" THEN '"+flow.EventPending+"' WHEN "+success+" THEN '"+flow.EventSuccess+"' ELSE '"+flow.EventFailed+"' END)")
}

func (s *SQLStore) setFast(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) ([]error, error) {
	n := len(reqs)
	ids, leases, stages := make([]string, n), make([]string, n), make([]string, n)
	sts := make([]int32, n)
	ctxs := make([]*string, n)
	ots := make([]int64, n)
	for i, r := range reqs {
		ids[i], leases[i], stages[i], sts[i] = r.TaskID, r.Lease, r.TaskStage, int32(r.Status)
		if r.TaskContext != nil {
			c := string(r.TaskContext)
			ctxs[i] = &c
		}
		ots[i] = us(now.Add(time.Duration(r.DelayMS) * time.Millisecond))
	}
	done := make(map[string]bool, n)
	pending := map[string]bool{}
	var err error
	if s.lw != nil {
		if n == 1 {
			err = s.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
				var c any
				if ctxs[0] != nil {
					c = *ctxs[0]
				}
				var typ string
				var st int
				err := tx.StmtContext(ctx, s.setOneStmt).QueryRowContext(ctx, ids[0], leases[0], sts[0], stages[0], c, ots[0], us(now), logAt(now)).Scan(&typ, &st)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					return nil // refused: not processing under this lease
				case err != nil:
					return err
				}
				done[ids[0]] = true
				if flow.Status(st) == flow.StatusPending {
					pending[typ] = true
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("set %d tasks: %w", n, err)
			}
			return s.setFastDone(ctx, reqs, done, pending, now)
		}
		// SQLite: the batch joins the writer's next group commit; it is
		// encoded here, outside the one writer.
		var shared [4]any // NULL unless every row has the same
		var rowLen int
		{
			ls, lease := sharedValue(leases)
			ss, st := sharedValue(sts)
			gs, stage := sharedValue(stages)
			os, ot := sharedValue(ots)
			if len(ls) == 0 && len(ss) == 0 && len(gs) == 0 && len(os) == 0 {
				shared, rowLen = [4]any{lease, st, stage, ot}, 2
			} else {
				rowLen = 6
			}
		}
		batch := make([][]any, n)
		for i := range ids {
			var c any // the context as a JSON string, so ->> gives back its exact text
			if ctxs[i] != nil {
				c = *ctxs[i]
			}
			batch[i] = []any{ids[i], c, leases[i], sts[i], stages[i], ots[i]}[:rowLen]
		}
		arg, merr := json.Marshal(batch)
		if merr != nil {
			return nil, fmt.Errorf("set %d tasks: %w", n, merr)
		}
		err = s.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
			return s.liteSetFastTx(ctx, tx, done, pending, string(arg), now, shared)
		})
		if err != nil {
			return nil, fmt.Errorf("set %d tasks: %w", n, err)
		}
		return s.setFastDone(ctx, reqs, done, pending, now)
	}
	// One statement is one transaction: a deadlock (a rescue or cancel
	// locking the same rows in another order) aborts all of it, so a retry
	// is safe.
	for attempt := 0; attempt < 5; attempt++ {
		err = s.setFastOnce(ctx, done, pending, ids, leases, sts, stages, ctxs, ots, now)
		if err == nil || !s.d.retryable(err) || ctx.Err() != nil {
			break
		}
		clear(done)
		clear(pending)
	}
	if err != nil {
		return nil, fmt.Errorf("set %d tasks: %w", n, err)
	}
	return s.setFastDone(ctx, reqs, done, pending, now)
}

// setFastDone wakes holds of the types that got pending tasks and gives
// each refused request its reason.
func (s *SQLStore) setFastDone(ctx context.Context, reqs []flow.SetTaskRequest, done, pending map[string]bool, now time.Time) ([]error, error) {
	n := len(reqs)
	for typ := range pending {
		s.onDue(typ)
	}
	errs := make([]error, n)
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
				errs[i] = fmt.Errorf("task %s: lease changed under the set: %w", r.TaskID, flow.ErrStaleLease)
			}
		}
	}
	return errs, nil
}

func (s *SQLStore) liteSetFastTx(ctx context.Context, tx *sql.Tx, done, pending map[string]bool, batch string, now time.Time, shared [4]any) error {
	rows, err := tx.StmtContext(ctx, s.setFastStmt).QueryContext(ctx, batch, us(now), logAt(now), shared[0], shared[1], shared[2], shared[3])
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, typ string
		var st int
		if err := rows.Scan(&id, &typ, &st); err != nil {
			return err
		}
		done[id] = true
		if flow.Status(st) == flow.StatusPending {
			pending[typ] = true
		}
	}
	return rows.Err()
}

func (s *SQLStore) setFastOnce(ctx context.Context, done, pending map[string]bool, ids, leases []string, sts []int32, stages []string, ctxs []*string, ots []int64, now time.Time) error {
	leases, lease := sharedValue(leases)
	sts, st := sharedValue(sts)
	stages, stage := sharedValue(stages)
	ots, ot := sharedValue(ots)
	rows, err := s.w.QueryContext(ctx, s.q.setFast, lease, st, stage, ot, ids, leases, sts, stages, ctxs, ots, us(now), logAt(now), s.d.channel(s.p), s.d.instance+":")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, typ string
		var st int
		var notified any
		if err := rows.Scan(&id, &typ, &st, &notified); err != nil {
			return err
		}
		done[id] = true
		if flow.Status(st) == flow.StatusPending {
			pending[typ] = true
		}
	}
	return rows.Err()
}
