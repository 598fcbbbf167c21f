package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Fan-out and fan-in. A set with status waiting inserts the children, each
// with parent_id and fan_depth (the parent's plus one), and puts the join
// stage and the number of open children (children_open) on the parent, in
// the set's transaction. Whatever ends a child (a set, a cancel, a rescue
// out of retries) decrements its parent's children_open in its own
// transaction, under the parent's row lock (an UPDATE's lock on
// PostgreSQL and MySQL, the one writer on SQLite), and the transaction
// that takes it to 0 while the parent is waiting makes the parent pending
// at its join stage: of concurrent last children exactly one sees 0, so
// the parent joins once.
//
// These columns are not in cols: a task that never fans out never reads
// them. The set fast path leaves children alone (parent_id = '' in its
// UPDATE) and they take the general path, which settles their parents.

// fanOutMigration is the fan-out schema for PostgreSQL and SQLite: the
// columns (add, the database's ALTERs), the children of a parent by id
// (only children are in it) and the waiting tasks by type (get_task_list
// and stats read each status from its own index).
func fanOutMigration(add ...string) []string {
	return append(add,
		`CREATE INDEX IF NOT EXISTS {p}tasks_parent ON {p}tasks (parent_id, task_id) WHERE parent_id <> ''`,
		`CREATE INDEX IF NOT EXISTS {p}tasks_waiting ON {p}tasks (task_type, task_id) WHERE status = 6`)
}

// childrenOf is the condition for a parent's children; parent_id <> ”
// lets the planners match the partial index with a bound parameter.
const childrenOf = "parent_id = ? AND parent_id <> ''"

func (s *SQLStore) tasks() string { return s.p + "tasks" }

// fanOut inserts req's children under parent r (already set waiting by
// ApplySet) in tx. A parent at the depth limit gets a FieldError and
// nothing is written.
func (s *SQLStore) fanOut(ctx context.Context, tx *sql.Tx, r *flow.Record, req flow.SetTaskRequest) error {
	var depth int
	if err := tx.QueryRowContext(ctx, s.drv.rebind("SELECT fan_depth FROM "+s.tasks()+" WHERE task_id = ?"), r.TaskID).Scan(&depth); err != nil {
		return err
	}
	if depth >= flow.MaxFanOutDepth {
		return &flow.FieldError{Field: "children", Msg: fmt.Sprintf("task %s is at fan-out depth %d, the most fan-outs nest; it may not fan out again", r.TaskID, depth)}
	}
	kids := req.ChildRecords
	if len(kids) != len(req.Children) || len(kids) == 0 {
		return fmt.Errorf("task %s: %d children but %d child records (the server builds them)", r.TaskID, len(req.Children), len(kids))
	}
	if err := s.seqCycle(ctx, tx, r, kids); err != nil {
		return err
	}
	// Rows of ncols+2 values; 100 a statement stays under every
	// database's parameter limit.
	const chunk = 100
	for i := 0; i < len(kids); i += chunk {
		part := kids[i:min(i+chunk, len(kids))]
		q := "INSERT INTO " + s.tasks() + " (" + cols + ", parent_id, fan_depth) VALUES "
		args := make([]any, 0, len(part)*(ncols+2))
		for k := range part {
			if k > 0 {
				q += ", "
			}
			q += "(" + in(ncols+2) + ")"
			args = append(append(args, insertArgs(&part[k])...), r.TaskID, depth+1)
		}
		if _, err := tx.ExecContext(ctx, s.drv.rebind(q), args...); err != nil {
			return err
		}
	}
	if err := s.count(ctx, tx, insertTally(kids)); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.drv.rebind("UPDATE "+s.tasks()+" SET join_stage = ?, children_open = ? WHERE task_id = ?"), req.JoinStage, len(kids), r.TaskID)
	if err != nil {
		return err
	}
	return s.drv.notify(ctx, sqlTx{tx}, dueTypes(kids)...)
}

// seqCycle refuses a child with the sequence key (and type) of the
// fanning-out task or of one of its ancestors: that waiting task is the
// older live task of the key, so the child would never be held and the
// fan-out never join.
func (s *SQLStore) seqCycle(ctx context.Context, tx *sql.Tx, r *flow.Record, kids []flow.Record) error {
	keyed := false
	for i := range kids {
		keyed = keyed || kids[i].SequenceKey != ""
	}
	if !keyed {
		return nil
	}
	type tk struct{ typ, key string }
	held := map[tk]string{}
	id, typ, key, parent := r.TaskID, r.TaskType, r.SequenceKey, ""
	q := s.drv.rebind("SELECT task_type, sequence_key, parent_id FROM " + s.tasks() + " WHERE task_id = ?")
	for level := 0; level <= flow.MaxFanOutDepth && id != ""; level++ {
		if err := tx.QueryRowContext(ctx, q, id).Scan(&typ, &key, &parent); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			return err
		}
		if key != "" {
			held[tk{typ, key}] = id
		}
		id = parent
	}
	for i := range kids {
		if by, ok := held[tk{kids[i].TaskType, kids[i].SequenceKey}]; ok && kids[i].SequenceKey != "" {
			return &flow.FieldError{Field: fmt.Sprintf("children[%d].sequence_key", i),
				Msg: fmt.Sprintf("%q of type %s is the key of task %s, which waits for this fan-out: the child would never run", kids[i].SequenceKey, kids[i].TaskType, by)}
		}
	}
	return nil
}

// settleParents counts ended (ids of tasks that ended in tx) off their
// parents' open children and joins each waiting parent whose count
// reaches 0; it returns the joined parents (now pending).
func (s *SQLStore) settleParents(ctx context.Context, tx *sql.Tx, ended []string, now time.Time) ([]*flow.Record, error) {
	if len(ended) == 0 {
		return nil, nil
	}
	args := make([]any, len(ended))
	for i, id := range ended {
		args[i] = id
	}
	rows, err := tx.QueryContext(ctx, s.drv.rebind("SELECT parent_id FROM "+s.tasks()+" WHERE task_id IN ("+in(len(ended))+") AND parent_id <> ''"), args...)
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return nil, err
		}
		n[p]++
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(n) == 0 {
		return nil, err
	}
	parents := make([]string, 0, len(n))
	for p := range n {
		parents = append(parents, p)
	}
	sort.Strings(parents) // one lock order for every transaction
	var joined []*flow.Record
	var was []countKey
	for _, p := range parents {
		// The UPDATE holds the parent's row until commit: no other child's
		// transaction reads the count between our decrement and our check.
		if _, err := tx.ExecContext(ctx, s.drv.rebind("UPDATE "+s.tasks()+" SET children_open = children_open - ? WHERE task_id = ?"), n[p], p); err != nil {
			return nil, err
		}
		var st, open int
		var join string
		err := tx.QueryRowContext(ctx, s.drv.rebind("SELECT status, children_open, join_stage FROM "+s.tasks()+" WHERE task_id = ?"), p).Scan(&st, &open, &join)
		if errors.Is(err, sql.ErrNoRows) {
			continue // the parent was deleted (after a cancel); nothing waits
		}
		if err != nil {
			return nil, err
		}
		if flow.Status(st) != flow.StatusWaiting || open > 0 {
			continue
		}
		recs, err := s.lockRows(ctx, tx, []string{p})
		if err != nil {
			return nil, err
		}
		if r, ok := recs[p]; ok {
			was = append(was, keyOf(r))
			flow.ApplyJoin(r, join, now)
			joined = append(joined, r)
		}
	}
	return joined, s.writeRecords(ctx, tx, joined, was)
}

// endedIDs are the ids of recs that have ended.
func endedIDs(recs []*flow.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Status.Ended() {
			out = append(out, r.TaskID)
		}
	}
	return out
}

// cancelTx cancels a task that the one-statement cancel left alone (a
// waiting parent, a child, or one that is not live) and, for a parent,
// its live descendants, settling the parents of all it cancelled.
func (s *SQLStore) cancelTx(ctx context.Context, taskID string, now time.Time) error {
	var changed []*flow.Record
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		changed = nil
		recs, err := s.lockRows(ctx, tx, []string{taskID})
		if err != nil {
			return err
		}
		r, ok := recs[taskID]
		switch {
		case !ok:
			return fmt.Errorf("task %s: %w", taskID, flow.ErrNotFound)
		case r.Status == flow.StatusCancelled:
			return nil
		case r.Status.Ended():
			return fmt.Errorf("task %s already ended %s: %w", taskID, r.Status, flow.ErrStaleLease)
		}
		was := []countKey{keyOf(r)}
		flow.ApplyCancel(r, now)
		changed = append(changed, r)
		// Breadth first down the fan-outs; a level is at most what the
		// depth limit lets nest.
		frontier := []string{taskID}
		for level := 0; len(frontier) > 0 && level <= flow.MaxFanOutDepth; level++ {
			args := make([]any, len(frontier))
			for i, id := range frontier {
				args[i] = id
			}
			rows, err := tx.QueryContext(ctx, s.drv.rebind("SELECT task_id FROM "+s.tasks()+" WHERE parent_id IN ("+in(len(frontier))+") AND parent_id <> ''"+
				" AND status IN ("+sqlStatus(flow.StatusPending, flow.StatusProcessing, flow.StatusWaiting)+")"), args...)
			if err != nil {
				return err
			}
			var live []string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				live = append(live, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(live) == 0 {
				break
			}
			sort.Strings(live)
			kids, err := s.lockRows(ctx, tx, live)
			if err != nil {
				return err
			}
			frontier = frontier[:0]
			for _, id := range live {
				if k, ok := kids[id]; ok && !k.Status.Ended() {
					was = append(was, keyOf(k))
					flow.ApplyCancel(k, now)
					changed = append(changed, k)
					frontier = append(frontier, id)
				}
			}
		}
		if err := s.writeRecords(ctx, tx, changed, was); err != nil {
			return err
		}
		joined, err := s.settleParents(ctx, tx, endedIDs(changed), now)
		changed = append(changed, joined...)
		return err
	})
	if err != nil {
		if errors.Is(err, flow.ErrNotFound) || errors.Is(err, flow.ErrStaleLease) {
			return err
		}
		return fmt.Errorf("cancel %s: %w", taskID, err)
	}
	s.dueP(changed)
	return nil
}

// reopenChild counts a retried child back into its parent's open
// children; a parent that is no longer waiting (it joined, or was
// cancelled) refuses: its join must not see a child run again.
func (s *SQLStore) reopenChild(ctx context.Context, tx *sql.Tx, taskID string) error {
	var parent string
	if err := tx.QueryRowContext(ctx, s.drv.rebind("SELECT parent_id FROM "+s.tasks()+" WHERE task_id = ?"), taskID).Scan(&parent); err != nil || parent == "" {
		return err
	}
	recs, err := s.lockRows(ctx, tx, []string{parent})
	if err != nil {
		return err
	}
	p, ok := recs[parent]
	if !ok {
		return nil // the parent is gone: nothing waits for this child
	}
	if p.Status != flow.StatusWaiting {
		return fmt.Errorf("task %s is a child of %s, which is %s, no longer waiting for its children: %w", taskID, parent, p.Status, flow.ErrConflict)
	}
	_, err = tx.ExecContext(ctx, s.drv.rebind("UPDATE "+s.tasks()+" SET children_open = children_open + 1 WHERE task_id = ?"), parent)
	return err
}

// TaskChildren implements Store.
func (s *SQLStore) TaskChildren(ctx context.Context, parentID, after string, limit int) ([]flow.Record, error) {
	rows, err := s.r.QueryContext(ctx, s.drv.rebind("SELECT "+s.q.cols+" FROM "+s.tasks()+" WHERE "+childrenOf+" AND task_id > ? ORDER BY task_id LIMIT ?"),
		parentID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("children of %s: %w", parentID, err)
	}
	return scanRecords(rows)
}

// ChildCounts implements Store.
func (s *SQLStore) ChildCounts(ctx context.Context, parentID string) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, s.drv.rebind("SELECT status, COUNT(*) FROM "+s.tasks()+" WHERE "+childrenOf+" GROUP BY status"), parentID)
	if err != nil {
		return nil, fmt.Errorf("children of %s: %w", parentID, err)
	}
	defer rows.Close()
	var out map[string]int64
	for rows.Next() {
		var st int
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[flow.Status(st).String()] = n
	}
	return out, rows.Err()
}
