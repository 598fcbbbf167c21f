package store

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Order per key (sequence_key) and pausing a key (rate_key).
//
// The claim (qparts.due) skips a pending task
//   - whose rate_key is paused: its {p}rate_keys row has paused_until
//     after now (a primary-key probe, only for tasks with a rate key);
//   - whose sequence_key has an older live task (pending, processing or
//     waiting; older by (create_time, task_id)) or a processing one:
//     two probes of partial indexes that hold only live keyed tasks, the
//     first an empty range for the head of its key.
//
// Tasks without keys pay two comparisons with '' on rows the claim reads
// anyway; no index they are in changes (PostgreSQL and SQLite index only
// keyed rows; MySQL's generated columns stay NULL for the others).
//
// One statement's snapshot can miss a concurrent change on PostgreSQL
// and MySQL: an older task of the key whose create commits after a newer
// one was held, or two holds at once on either side of that commit. So
// after a claim commits, admit checks the claimed keyed tasks again with
// a fresh read and gives back (pending, no retry spent, log entry
// "returned") any with an older live task of its key, before any worker
// sees it: of two tasks of a key, the younger's check runs after its
// claim committed and so sees the older if the older could be claimed.
// admit also applies the type's rate_limit_per_second per rate key (a
// GCRA over one {p}rate_keys row per key, locked in a transaction).

// keyMigration is the keys' schema shared by PostgreSQL and SQLite:
// add are the databases' ALTERs of the two tables, rateKeys the table of
// paused and limited keys.
func keyMigration(rateKeys string, add ...string) []string {
	return append(add, rateKeys,
		// The paused keys, for a planner that reads them once per claim
		// (PostgreSQL hashes them) rather than probing per row.
		`CREATE INDEX IF NOT EXISTS {p}rate_keys_paused ON {p}rate_keys (paused_until)`,
		// The older-live probe: keyed live tasks of a type and key in
		// creation order. Unkeyed rows are never in it; keyed rows enter
		// at create and leave when they end.
		`CREATE INDEX IF NOT EXISTS {p}tasks_seq ON {p}tasks (task_type, sequence_key, create_time, task_id) WHERE sequence_key <> '' AND status IN (1, 2, 6)`,
		// The processing probe: at most one row per key.
		`CREATE INDEX IF NOT EXISTS {p}tasks_seq_proc ON {p}tasks (task_type, sequence_key) WHERE sequence_key <> '' AND status = 2`,
		// A pause moves the key's pending tasks past its end (pauseKeys).
		`CREATE INDEX IF NOT EXISTS {p}tasks_rate ON {p}tasks (task_type, rate_key) WHERE rate_key <> '' AND status = 1`)
}

// seqLive is the condition that row sq is a live task of outer's
// sequence key, for PostgreSQL and SQLite (the partial indexes'
// predicates, so the planners match them).
func seqLive(outer string) string {
	return "sq.sequence_key = " + outer + ".sequence_key AND sq.sequence_key <> '' AND sq.status IN (1, 2, 6)"
}

// seqProc is the condition that row sq is a processing task of outer's
// sequence key, for PostgreSQL and SQLite.
func seqProc(outer string) string {
	return "sq.sequence_key = " + outer + ".sequence_key AND sq.sequence_key <> '' AND sq.status = 2"
}

// ratePending is the condition (binding the key) for a type's pending
// tasks of one rate key, for PostgreSQL and SQLite.
const ratePending = "rate_key = ? AND rate_key <> '' AND status = 1"

// keySQL is how a database writes the key conditions (see seqLive).
type keySQL struct {
	seqLive, seqProc func(outer string) string
	ratePending      string
	// fn, when set, is a function of the database's (the prefix's
	// {p}keys_free, PostgreSQL) that runs the claim's probes for a keyed
	// task: the claim then only calls it (see keysDue).
	fn string
}

// keysDue is the claim's part for the keys, outer being the claimed
// table's name; it binds now (the pause's end).
func keysDue(p, outer string, k keySQL) string {
	if k.fn != "" {
		// The probes as subqueries made PostgreSQL plan them afresh with
		// every hold (custom plans), keyed tasks or not: planning took 0.22
		// → 0.50 ms a hold. Inside a plpgsql function their plans are made
		// once per connection, and a task without keys never calls it.
		return " AND ((" + outer + ".rate_key = '' AND " + outer + ".sequence_key = '') OR " + p + k.fn + "(" + outer + ".task_type, " + outer + ".sequence_key, " +
			outer + ".rate_key, " + outer + ".create_time, " + outer + ".task_id, ?))"
	}
	return " AND (" + outer + ".rate_key = '' OR NOT EXISTS (SELECT 1 FROM " + p + "rate_keys rk WHERE rk.task_type = " + outer + ".task_type" +
		" AND rk.rate_key = " + outer + ".rate_key AND rk.paused_until > ?))" +
		" AND (" + outer + ".sequence_key = '' OR NOT EXISTS (SELECT 1 FROM " + p + "tasks sq WHERE sq.task_type = " + outer + ".task_type AND " + k.seqLive(outer) +
		" AND (sq.create_time, sq.task_id) < (" + outer + ".create_time, " + outer + ".task_id))" +
		" AND NOT EXISTS (SELECT 1 FROM " + p + "tasks sq WHERE sq.task_type = " + outer + ".task_type AND " + k.seqProc(outer) + "))"
}

// admit checks a committed claim's keyed tasks (see the top of this
// file) and returns those a worker may have; the others are given back.
func (s *SQLStore) admit(ctx context.Context, p HoldParams, recs []flow.Record) ([]flow.Record, error) {
	var seq, rate []int
	for i := range recs {
		if recs[i].SequenceKey != "" {
			seq = append(seq, i)
		}
		if recs[i].RateKey != "" {
			rate = append(rate, i)
		}
	}
	if len(seq) == 0 && len(rate) == 0 {
		return recs, nil
	}
	back := map[string]time.Time{} // task id -> earliest order time
	if len(seq) > 0 {
		if err := s.seqCheck(ctx, recs, seq, back); err != nil {
			return nil, err
		}
	}
	if len(rate) > 0 {
		if err := s.rateCheck(ctx, p, recs, rate, back); err != nil {
			return nil, err
		}
	}
	if len(back) == 0 {
		return recs, nil
	}
	out := recs[:0]
	for _, r := range recs {
		at, ok := back[r.TaskID]
		if !ok {
			out = append(out, r)
			continue
		}
		if err := s.giveBack(ctx, r, p, at); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// seqCheck marks in back the held tasks of idx that have an older live
// task of their sequence key, read after the claim committed.
func (s *SQLStore) seqCheck(ctx context.Context, recs []flow.Record, idx []int, back map[string]time.Time) error {
	args := make([]any, len(idx))
	for k, i := range idx {
		args[k] = recs[i].TaskID
	}
	k := s.drv.keys()
	q := "SELECT h.task_id FROM " + s.tasks() + " h WHERE h.task_id IN (" + in(len(idx)) + ") AND EXISTS (SELECT 1 FROM " + s.tasks() +
		" sq WHERE sq.task_type = h.task_type AND " + k.seqLive("h") + " AND (sq.create_time, sq.task_id) < (h.create_time, h.task_id))"
	rows, err := s.r.QueryContext(ctx, s.drv.rebind(q), args...)
	if err != nil {
		return fmt.Errorf("sequence check: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		back[id] = time.Time{}
	}
	return rows.Err()
}

// rateCheck applies the type's rate_limit_per_second to the held tasks
// of idx, key by key: a GCRA (generic cell rate algorithm) whose one
// state, the theoretical arrival time (tat), is the key's row in
// {p}rate_keys, locked for the check. A task over the limit is marked in
// back with the time the key admits one again, and the key is paused
// until then, so that holds step over its other tasks meanwhile.
func (s *SQLStore) rateCheck(ctx context.Context, p HoldParams, recs []flow.Record, idx []int, back map[string]time.Time) error {
	var limit float64
	if err := s.r.QueryRowContext(ctx, s.drv.rebind("SELECT rate_limit_per_second FROM "+s.p+"task_types WHERE task_type = ?"), p.TaskType).Scan(&limit); err != nil {
		return fmt.Errorf("rate limit of %s: %w", p.TaskType, err)
	}
	if limit <= 0 {
		return nil
	}
	byKey := map[string][]int{}
	var keys []string
	for _, i := range idx {
		if _, taken := back[recs[i].TaskID]; taken {
			continue
		}
		k := recs[i].RateKey
		if byKey[k] == nil {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	sort.Strings(keys)             // one lock order for every transaction
	interval := int64(1e6 / limit) // µs between tasks
	interval = max(interval, 1)
	tau := max(int64(1e6)-interval, 0) // a second's burst
	now := us(p.Now)
	rk := s.p + "rate_keys"
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, key := range keys {
			if err := s.ensureRateKey(ctx, tx, p.TaskType, key); err != nil {
				return err
			}
			var tat, paused int64
			// The UPDATE takes the row's lock (SQLite: the one writer is
			// ours); the SELECT after it reads the newest committed state.
			if _, err := tx.ExecContext(ctx, s.drv.rebind("UPDATE "+rk+" SET tat = tat WHERE task_type = ? AND rate_key = ?"), p.TaskType, key); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, s.drv.rebind("SELECT tat, paused_until FROM "+rk+" WHERE task_type = ? AND rate_key = ?"), p.TaskType, key).Scan(&tat, &paused); err != nil {
				return err
			}
			over := false
			for _, i := range byKey[key] {
				t0 := max(tat, now)
				if t0-now > tau {
					over = true
					back[recs[i].TaskID] = fromUS(t0 - tau)
					continue
				}
				tat = t0 + interval
			}
			if over {
				paused = max(paused, max(tat, now)-tau)
			}
			if _, err := tx.ExecContext(ctx, s.drv.rebind("UPDATE "+rk+" SET tat = ?, paused_until = ? WHERE task_type = ? AND rate_key = ?"), tat, paused, p.TaskType, key); err != nil {
				return err
			}
		}
		return nil
	})
}

// ensureRateKey makes the key's row if it has none.
func (s *SQLStore) ensureRateKey(ctx context.Context, tx *sql.Tx, typ, key string) error {
	_, err := tx.ExecContext(ctx, s.q.rateKeyIns, typ, key)
	return err
}

// giveBack returns a task the claim took to pending under the lease it
// was just given, its retries untouched, due no earlier than at.
func (s *SQLStore) giveBack(ctx context.Context, r flow.Record, p HoldParams, at time.Time) error {
	q := s.drv.rebind("UPDATE " + s.tasks() + " SET status = " + sqlStatus(flow.StatusPending) + ", owner = '', lease = '', lease_expiry = 0, modify_time = ?," +
		" order_time = CASE WHEN order_time < ? THEN ? ELSE order_time END, schedule_log = " + s.drv.logExpr(flow.EventReturned) +
		" WHERE task_id = ? AND lease = ? AND status = " + sqlStatus(flow.StatusProcessing))
	ot := us(at)
	write := s.drv.write
	if s.countsInline() {
		// The count moves in the give-back's transaction.
		write = func(ctx context.Context, fn func(context.Context, execQuerier) error) error {
			return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
		}
	}
	return write(ctx, func(ctx context.Context, ex execQuerier) error {
		res, err := ex.ExecContext(ctx, q, us(p.Now), ot, ot, logAt(p.Now), p.WorkerID, r.TaskID, p.Lease)
		if err != nil {
			return fmt.Errorf("give back %s: %w", r.TaskID, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			t := tally{}
			t.move(countKey{r.TaskType, r.TaskStage, int(flow.StatusProcessing)}, countKey{r.TaskType, r.TaskStage, int(flow.StatusPending)})
			return s.count(ctx, ex, t)
		}
		return nil
	})
}

// pauseKeys pauses the rate keys of the sets in reqs that ask for it,
// each until now + its pause_rate_key_ms, before the sets are applied.
// Only a set that would apply pauses: the task is processing under the
// request's lease and has a rate key (ApplySet refuses the others with
// the reason). A pause is only ever lengthened. The key's pending tasks
// are moved past the pause's end, so that holds meanwhile do not step
// over each of them; a task created during the pause is skipped by the
// claim's check.
func (s *SQLStore) pauseKeys(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) error {
	type pause struct {
		typ, key string
		until    int64
	}
	var ps []pause
	for _, r := range reqs {
		if r.PauseRateKeyMS <= 0 {
			continue
		}
		rec, err := s.GetTask(ctx, r.TaskID)
		if err != nil || rec.Status != flow.StatusProcessing || rec.Lease != r.Lease || rec.RateKey == "" {
			continue // the set itself reports why
		}
		ps = append(ps, pause{rec.TaskType, rec.RateKey, us(now.Add(time.Duration(r.PauseRateKeyMS) * time.Millisecond))})
	}
	if len(ps) == 0 {
		return nil
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].typ != ps[j].typ {
			return ps[i].typ < ps[j].typ
		}
		return ps[i].key < ps[j].key
	})
	rk := s.p + "rate_keys"
	push := s.drv.rebind("UPDATE " + s.tasks() + " SET order_time = ? WHERE task_type = ? AND " + s.drv.keys().ratePending + " AND order_time < ?")
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, p := range ps {
			if err := s.ensureRateKey(ctx, tx, p.typ, p.key); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.drv.rebind("UPDATE "+rk+" SET paused_until = ? WHERE task_type = ? AND rate_key = ? AND paused_until < ?"),
				p.until, p.typ, p.key, p.until); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, push, p.until, p.typ, p.key, p.until); err != nil {
				return err
			}
		}
		return nil
	})
}

// PausedKeys implements Store.
func (s *SQLStore) PausedKeys(ctx context.Context, taskType string, now time.Time, limit int) ([]flow.PausedKey, error) {
	rows, err := s.r.QueryContext(ctx, s.drv.rebind("SELECT rate_key, paused_until FROM "+s.p+"rate_keys WHERE task_type = ? AND paused_until > ? ORDER BY rate_key LIMIT ?"),
		taskType, us(now), limit)
	if err != nil {
		return nil, fmt.Errorf("paused keys of %s: %w", taskType, err)
	}
	defer rows.Close()
	var out []flow.PausedKey
	for rows.Next() {
		var k flow.PausedKey
		var until int64
		if err := rows.Scan(&k.RateKey, &until); err != nil {
			return nil, err
		}
		k.Until = fromUS(until)
		out = append(out, k)
	}
	return out, rows.Err()
}

// pruneRateKeys deletes the rows of keys neither paused nor limited
// since before: their state says nothing any more.
func (s *SQLStore) pruneRateKeys(ctx context.Context, before time.Time) error {
	_, err := s.w.ExecContext(ctx, s.drv.rebind("DELETE FROM "+s.p+"rate_keys WHERE paused_until < ? AND tat < ?"), us(before), us(before))
	return err
}

// hasPause reports whether a set batch pauses a key.
func hasPause(reqs []flow.SetTaskRequest) bool {
	for _, r := range reqs {
		if r.PauseRateKeyMS > 0 {
			return true
		}
	}
	return false
}
