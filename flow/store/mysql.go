package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// MySQL 8 and MariaDB 10.6+ (both have SKIP LOCKED). The session runs READ
// COMMITTED so that the claim's locking read takes no gap locks (Asyncflow's
// deadlock story), and claim_idx covers (task_type, pending_at) (the last
// migration) so the locking read touches only the rows it returns.
var myMigrations = [][]string{{
	`CREATE TABLE IF NOT EXISTS {p}task_types (task_type VARCHAR(64) NOT NULL PRIMARY KEY, schedule_limit INT NOT NULL,
		schedule_interval_ms BIGINT NOT NULL, max_processing_ms BIGINT NOT NULL, max_retry_num INT NOT NULL,
		retry_interval_ms BIGINT NOT NULL, max_retry_interval_ms BIGINT NOT NULL, create_time BIGINT NOT NULL, modify_time BIGINT NOT NULL)
		ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE IF NOT EXISTS {p}tasks (task_id CHAR(26) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
		task_type VARCHAR(64) NOT NULL, task_stage VARCHAR(64) NOT NULL, status TINYINT NOT NULL, task_context TEXT NULL,
		priority INT NOT NULL, order_time BIGINT NOT NULL, crt_retry_num INT NOT NULL, max_retry_num INT NOT NULL,
		retry_interval_ms BIGINT NOT NULL, max_retry_interval_ms BIGINT NOT NULL, owner VARCHAR(128) NOT NULL DEFAULT '',
		lease VARCHAR(64) NOT NULL DEFAULT '', lease_expiry BIGINT NOT NULL DEFAULT 0, schedule_log TEXT NOT NULL,
		create_time BIGINT NOT NULL, modify_time BIGINT NOT NULL,
		KEY claim_idx (task_type, status, order_time), KEY lease_idx (status, lease_expiry),
		KEY ended_idx (status, modify_time), KEY list_idx (task_type, status, task_id))
		ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
}, {
	// Unique tasks: one live (pending or processing) task per type and key.
	// No partial indexes here: a stored generated column holds the key
	// only while the task is live (NULL otherwise, and NULLs never clash).
	`ALTER TABLE {p}tasks ADD COLUMN unique_key VARCHAR(128) NOT NULL DEFAULT '',
		ADD COLUMN unique_live VARCHAR(128) AS (CASE WHEN unique_key <> '' AND status IN (1, 2) THEN unique_key END) STORED,
		ADD UNIQUE KEY unique_idx (task_type, unique_live)`,
	`ALTER TABLE {p}task_types ADD COLUMN paused TINYINT NOT NULL DEFAULT 0`,
}, {
	// Periodic types: the schedule and the last tick fired.
	`ALTER TABLE {p}task_types ADD COLUMN cron VARCHAR(128) NOT NULL DEFAULT '', ADD COLUMN cron_stage VARCHAR(64) NOT NULL DEFAULT '',
		ADD COLUMN cron_context TEXT NULL, ADD COLUMN cron_last BIGINT NOT NULL DEFAULT 0`,
}, {
	// Fan-out (see fanout.go). No partial indexes here: every task gets an
	// entry in parent_idx, '' for those created by no fan-out; they append
	// at the end of the '' range in id order. Waiting rows are listed from
	// list_idx like every other status.
	`ALTER TABLE {p}tasks ADD COLUMN parent_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
		ADD COLUMN join_stage VARCHAR(64) NOT NULL DEFAULT '', ADD COLUMN children_open INT NOT NULL DEFAULT 0,
		ADD COLUMN fan_depth SMALLINT NOT NULL DEFAULT 0, ADD KEY parent_idx (parent_id, task_id)`,
}, {
	// Order per key and pausing a key (keys.go). No partial indexes here:
	// stored generated columns hold a key only while the task is in the
	// state a probe looks for (NULL otherwise), so an unkeyed task's
	// entries never change with its status. Every task still gets an
	// entry in each index at create (end to end, database CPU per task
	// +16 % with three such indexes); the processing probe reads the
	// key's live rows from seq_idx instead of an index of its own.
	`CREATE TABLE IF NOT EXISTS {p}rate_keys (task_type VARCHAR(64) NOT NULL, rate_key VARCHAR(128) NOT NULL,
		paused_until BIGINT NOT NULL DEFAULT 0, tat BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (task_type, rate_key))
		ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`ALTER TABLE {p}tasks ADD COLUMN sequence_key VARCHAR(128) NOT NULL DEFAULT '', ADD COLUMN rate_key VARCHAR(128) NOT NULL DEFAULT '',
		ADD COLUMN seq_live VARCHAR(128) AS (CASE WHEN sequence_key <> '' AND status IN (1, 2, 6) THEN sequence_key END) STORED,
		ADD COLUMN rate_pending VARCHAR(128) AS (CASE WHEN rate_key <> '' AND status = 1 THEN rate_key END) STORED,
		ADD KEY seq_idx (task_type, seq_live, create_time, task_id), ADD KEY rate_idx (task_type, rate_pending)`,
	`ALTER TABLE {p}task_types ADD COLUMN rate_limit_per_second DOUBLE NOT NULL DEFAULT 0`,
}, myCountsMigration, {
	// Fair shares per key (fair.go). As for the keys, a stored generated
	// column in place of a partial index: it holds the key only while the
	// task is pending, so an unkeyed task's entry (NULL) never changes.
	`ALTER TABLE {p}tasks ADD COLUMN fairness_key VARCHAR(128) NOT NULL DEFAULT '',
		ADD COLUMN fair_pending VARCHAR(128) AS (CASE WHEN fairness_key <> '' AND status = 1 THEN fairness_key END) STORED,
		ADD KEY fair_idx (task_type, fair_pending, order_time)`,
	`ALTER TABLE {p}task_types ADD COLUMN fair TINYINT NOT NULL DEFAULT 0, ADD COLUMN fairness_weights TEXT NULL`,
}, myCountsInline, {
	// Partial indexes by stored generated columns: pending_at holds
	// order_time only while the task is pending, lease_at lease_expiry only
	// while processing, ended_at modify_time only once ended (NULL
	// otherwise), in place of the indexes led by or holding status. A hold
	// or a set then moves the entries of the two indexes whose value
	// changes from or to NULL (and list_idx's), where every status-led
	// index moved its entry (and purge removed the old one) on every
	// status change (with the set fast path, MariaDB's CPU per task end to end
	// 0.89x: docs/benchmarks.md).
	`ALTER TABLE {p}tasks ADD COLUMN pending_at BIGINT AS (CASE WHEN status = 1 THEN order_time END) STORED,
		ADD COLUMN lease_at BIGINT AS (CASE WHEN status = 2 THEN lease_expiry END) STORED,
		ADD COLUMN ended_at BIGINT AS (CASE WHEN status IN (3, 4, 5) THEN modify_time END) STORED,
		DROP KEY claim_idx, DROP KEY lease_idx, DROP KEY ended_idx,
		ADD KEY claim_idx (task_type, pending_at), ADD KEY lease_idx (lease_at), ADD KEY ended_idx (ended_at)`,
}}

// myProcessing is status = processing as lease_idx answers it: lease_at
// is set exactly while the task is processing.
const myProcessing = "lease_at IS NOT NULL"

// myCountsMigration makes the task counts (counts.go) and the row trigger
// that counts deletes (a -1 per task deleted, appended to count_deltas).
var myCountsMigration = []string{
	`CREATE TABLE IF NOT EXISTS {p}counts (task_type VARCHAR(64) NOT NULL, task_stage VARCHAR(64) NOT NULL, status TINYINT NOT NULL,
		n BIGINT NOT NULL, PRIMARY KEY (task_type, task_stage, status)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE IF NOT EXISTS {p}count_deltas (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, task_type VARCHAR(64) NOT NULL,
		task_stage VARCHAR(64) NOT NULL, status TINYINT NOT NULL, n BIGINT NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`DROP TRIGGER IF EXISTS {p}count_del`,
	`CREATE TRIGGER {p}count_del AFTER DELETE ON {p}tasks FOR EACH ROW
		INSERT INTO {p}count_deltas (task_type, task_stage, status, n) VALUES (OLD.task_type, OLD.task_stage, OLD.status, -1)`,
}

// myCountsInline drops the insert and update row triggers that appended
// two delta rows per task moved before the writes appended one per key
// and statement (counts.go): a database made between the two versions
// had them, and the two together would count every change twice.
var myCountsInline = []string{
	`DROP TRIGGER IF EXISTS {p}count_ins`,
	`DROP TRIGGER IF EXISTS {p}count_upd`,
}

// counting: deltas folded under GET_LOCK.
func (d *myDriver) counting() countSQL {
	return countSQL{deltas: true, inline: true, delTrigger: true, sum: "CAST(SUM(n) AS SIGNED)",
		upsert:  "INSERT INTO " + d.s.p + "counts (task_type, task_stage, status, n) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
		tryLock: "SELECT GET_LOCK(?, 0) = 1",
		lock:    "SELECT GET_LOCK(?, 60) = 1",
		unlock:  "DO RELEASE_LOCK(?)"}
}

func myLog(event string) string {
	return myLogAppend("JSON_OBJECT('at', ?, 'worker', ?, 'stage', task_stage, 'event', '" + event + "')")
}

// myLogEntries counts the log's entries without parsing it: every entry
// has one "event" key, and the text "event": (quote, name, quote, colon)
// can only be that key (a string's own quotes are escaped, and a value
// is never followed by a colon).
var myLogEntries = "((LENGTH(schedule_log) - LENGTH(REPLACE(schedule_log, '\"event\":', ''))) DIV " + strconv.Itoa(len(`"event":`)) + ")"

// myLogAppend is the schedule log with the entry obj (SQL text, which
// appears once, so its arguments bind once) appended, the first dropped
// once it holds flow.ScheduleLogSize. The entry goes in as text before the
// closing bracket: JSON_ARRAY_APPEND and JSON_LENGTH parsed and rewrote
// the whole log at every hold and set (a 50,000-row UPDATE: 9.4 µs a row
// against 5.2). JSON_REMOVE still drops the first entry of a full log.
func myLogAppend(obj string) string {
	// The common arms first: the count is made once (BETWEEN reads its
	// operand once).
	trimmed := "JSON_REMOVE(schedule_log, '$[0]')"
	return "CONCAT(CASE WHEN schedule_log = '[]' THEN '['" +
		" WHEN " + myLogEntries + " BETWEEN 1 AND " + strconv.Itoa(flow.ScheduleLogSize-1) + " THEN CONCAT(LEFT(schedule_log, CHAR_LENGTH(schedule_log) - 1), ', ')" +
		" WHEN " + myLogEntries + " = 0 THEN '['" +
		" ELSE CONCAT(LEFT(" + trimmed + ", CHAR_LENGTH(" + trimmed + ") - 1), ', ') END, " + obj + ", ']')"
}

// myDriver is MySQL's and MariaDB's driver.
type myDriver struct {
	s *SQLStore
	// q are the statements only this driver runs.
	q struct {
		holdSel, holdSelNoLog, holdSelFair, holdSelFairNoLog, holdUpd, lockSel, heartbeat, heldBy string
	}
}

func (d *myDriver) name() string           { return "mysql" }
func (d *myDriver) migrations() [][]string { return myMigrations }
func (d *myDriver) rebind(q string) string { return q }

// keys: the generated columns (see the migration) in place of the
// partial indexes' predicates.
func (d *myDriver) keys() keySQL {
	return keySQL{
		seqLive:     func(outer string) string { return "sq.seq_live = " + outer + ".sequence_key" },
		seqProc:     func(outer string) string { return "sq.seq_live = " + outer + ".sequence_key AND sq.status = 2" },
		ratePending: "rate_pending = ?",
	}
}
func (d *myDriver) logExpr(event string) string { return myLog(event) }

// fair: the generated column fair_pending (see the migration).
func (d *myDriver) fair() fairSQL { return fairSQL{col: "fair_pending", hint: fairHint, groupBy: true} }

// fairHint keeps MySQL's fair reads on fair_idx.
const fairHint = " FORCE INDEX (fair_idx)"

func (d *myDriver) retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) // deadlock, lock wait timeout
}

// build: no RETURNING (in MySQL 8), so the claim is a locking read then
// an UPDATE of the ids it returned, in one transaction.
func (d *myDriver) build(q *queries, b qparts) {
	t := b.t
	skip, guard := " FOR UPDATE SKIP LOCKED", ""
	if b.redisLock {
		skip, guard = "", " AND status = "+b.pending
	}
	// The due tasks from claim_idx: pending_at is set only while pending.
	due := b.dueOn("pending_at <= ?", "pending_at", "?")
	d.q.holdSel = "SELECT " + b.cols + " FROM " + t + " WHERE " + due + skip
	d.q.holdSelNoLog = "SELECT " + colsOf("", false) + " FROM " + t + " WHERE " + due + skip
	// FORCE INDEX: on a fresh table MariaDB read a key's due tasks from
	// claim_idx, stepping over (and trying a lock on) every due task of
	// the other keys ahead of them: 140 ms a hold with 50,000 ahead.
	d.q.holdSelFair = "SELECT " + b.cols + " FROM " + t + fairHint + " WHERE " + b.dueFair + skip
	d.q.holdSelFairNoLog = "SELECT " + colsOf("", false) + " FROM " + t + fairHint + " WHERE " + b.dueFair + skip
	d.q.holdUpd = "UPDATE " + t + " SET " + b.set + " WHERE task_id IN (%s)" + guard
	d.q.lockSel = "SELECT " + b.cols + " FROM " + t + " WHERE task_id IN (%s) ORDER BY task_id FOR UPDATE"
	d.q.heartbeat = "UPDATE " + t + " t JOIN " + b.p + "task_types ty ON ty.task_type = t.task_type SET t.lease_expiry = ? + ty.max_processing_ms * 1000, t.modify_time = ?" +
		" WHERE t.owner = ? AND t." + myProcessing
	d.q.heldBy = "SELECT task_id, lease, lease_expiry FROM " + t + " WHERE owner = ? AND " + myProcessing
	q.rescueSel = "SELECT " + b.cols + " FROM " + t + " WHERE lease_at < ? ORDER BY lease_at LIMIT ? FOR UPDATE SKIP LOCKED"
	q.prune = "DELETE FROM " + t + " WHERE ended_at < ? ORDER BY ended_at LIMIT ?"
	q.nextDue = "SELECT pending_at FROM " + t + " WHERE task_type = ? AND pending_at IS NOT NULL ORDER BY pending_at LIMIT 1"
	q.workerSel = "SELECT " + b.cols + " FROM " + t + " WHERE owner = ? AND " + myProcessing + " ORDER BY task_id FOR UPDATE"
	// Assignments apply left to right: cron_last compares the old cron
	// before cron itself changes.
	set := []string{"cron_last = IF(cron = VALUES(cron), cron_last, VALUES(cron_last))", "cron = VALUES(cron)"}
	for _, c := range b.typeUpd {
		set = append(set, c+" = VALUES("+c+")")
	}
	q.upsertType = b.typeIns + " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	q.insertUnique = q.insertOne + " ON DUPLICATE KEY UPDATE task_id = task_id" // no change: 0 rows affected
	q.rateKeyIns = strings.Replace(q.rateKeyIns, "ON CONFLICT DO NOTHING", "ON DUPLICATE KEY UPDATE tat = tat", 1)
}

func (d *myDriver) pruneArgs(before time.Time, limit int) []any { return pruneArgs(before, limit) }

// listQuery: of one type and status, from list_idx, whose entries for
// the pair are in id order already, so a page reads as many entries as it
// returns. Left to itself MariaDB walked the primary key for a common
// status, filtering out every task of the other types and statuses (the
// funnel's sample of 200 read about 1,200 rows of a table of four types),
// and read a rare one from claim_idx or lease_idx and sorted it. Without
// a status list_idx would need a sort of all the type's tasks: no hint.
func (d *myDriver) listQuery(f ListFilter) (string, []any) {
	t := d.s.p + "tasks"
	if f.TaskType != "" && f.Status != 0 {
		t += listHint
	}
	return listQuery(t, d.s.q.cols, f)
}

// listHint keeps a listing of one type and status on list_idx.
const listHint = " FORCE INDEX (list_idx)"

func (d *myDriver) tx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return d.s.retryTx(ctx, fn)
}

func (d *myDriver) write(ctx context.Context, fn func(context.Context, execQuerier) error) error {
	return fn(ctx, d.s.w)
}

// lockMigrations takes GET_LOCK for the migration.
func (d *myDriver) lockMigrations(ctx context.Context, key string, fn func(execQuerier) error) error {
	return d.s.lockMigrationsOn(ctx, key, fn, func(ctx context.Context, c *sql.Conn, key string) (func(), error) {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", key).Scan(&got); err != nil {
			return nil, err
		}
		if got.Int64 != 1 {
			return nil, errors.New("GET_LOCK " + key + " timed out after 60s")
		}
		return func() { c.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", key) }, nil
	})
}

func (d *myDriver) start(context.Context, string) error { return nil }
func (d *myDriver) close() error                        { return nil }

// hold selects under SKIP LOCKED, then updates, in one transaction.
func (d *myDriver) hold(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	return d.s.claimInTurn(ctx, p, d.claim, d.claimMany)
}

// claimMany claims for several holds in one transaction (coalesce): one
// locking read of the sum of their limits, then an UPDATE per hold of its
// share with its owner, lease and expiry, and one commit.
func (d *myDriver) claimMany(ctx context.Context, ps []HoldParams) ([]flow.Record, error) {
	if len(ps) == 1 {
		return d.claim(ctx, ps[0])
	}
	return d.claimShares(ctx, claimAll(ps), ps, nil, nil)
}

func (d *myDriver) claim(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	return d.claimKeys(ctx, p, nil, nil)
}

// holdKeys claims the keys' shares in one transaction: a locking read per
// key, then one UPDATE of them all.
func (d *myDriver) holdKeys(ctx context.Context, p HoldParams, keys []string, limits []int) ([]flow.Record, error) {
	p.Limit = 0
	for _, n := range limits {
		p.Limit += n
	}
	return d.s.claimInTurn(ctx, p, func(ctx context.Context, p HoldParams) ([]flow.Record, error) {
		return d.claimKeys(ctx, p, keys, limits)
	}, nil)
}

// claimKeys is the plain claim without keys, else a read per key.
func (d *myDriver) claimKeys(ctx context.Context, p HoldParams, keys []string, limits []int) ([]flow.Record, error) {
	return d.claimShares(ctx, p, []HoldParams{p}, keys, limits)
}

// claimShares reads p's due tasks (else, with keys, each key's share),
// then hands them out in order to the holds of shares, each up to its
// limit (one hold: p itself).
func (d *myDriver) claimShares(ctx context.Context, p HoldParams, shares []HoldParams, keys []string, limits []int) ([]flow.Record, error) {
	var out []flow.Record
	err := d.s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		read := func(p HoldParams) ([]flow.Record, error) {
			sel := d.q.holdSel
			switch {
			case p.fairKey != "" && p.OmitLog:
				sel = d.q.holdSelFairNoLog
			case p.fairKey != "":
				sel = d.q.holdSelFair
			case p.OmitLog:
				sel = d.q.holdSelNoLog
			}
			rows, err := tx.QueryContext(ctx, sel, dueArgs(p)...)
			if err != nil {
				return nil, err
			}
			return scanRecords(rows)
		}
		var recs []flow.Record
		if keys == nil {
			var err error
			if recs, err = read(p); err != nil {
				return err
			}
		}
		for i, k := range keys {
			q := p
			q.fairKey, q.Limit = k, limits[i]
			got, err := read(q)
			if err != nil {
				return err
			}
			recs = append(recs, got...)
		}
		if len(recs) == 0 {
			out = nil
			return nil
		}
		if len(shares) > 1 {
			var err error
			if recs, err = d.updateShares(ctx, tx, recs, shares); err != nil {
				return err
			}
		} else {
			h := shares[0]
			args := []any{h.WorkerID, h.Lease, us(h.LeaseExpiry), us(h.Now), logAt(h.Now), h.WorkerID}
			for _, r := range recs {
				args = append(args, r.TaskID)
			}
			res, err := tx.ExecContext(ctx, fmt.Sprintf(d.q.holdUpd, in(len(recs))), args...)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != int64(len(recs)) {
				// Only without SKIP LOCKED (Redis lock mode) can rows change
				// between the select and the update; keep those we got.
				if recs, err = d.heldBy(ctx, tx, recs, h.Lease); err != nil {
					return err
				}
			}
			heldAs(recs, h)
		}
		if err := d.s.count(ctx, tx, heldTally(recs)); err != nil {
			return err
		}
		out = recs
		return nil
	})
	return out, err
}

// heldAs sets recs as held by h, as its claim's UPDATE did.
func heldAs(recs []flow.Record, h HoldParams) {
	for i := range recs {
		r := &recs[i]
		r.Status, r.Owner, r.Lease, r.ModifyTime = flow.StatusProcessing, h.WorkerID, h.Lease, h.Now
		le := h.LeaseExpiry
		r.LeaseExpiry = &le
		if !h.OmitLog {
			r.ScheduleLog = flow.AppendLog(r.ScheduleLog, flow.LogEntry{At: h.Now, Worker: h.WorkerID, Stage: r.TaskStage, Event: flow.EventHeld})
		}
	}
}

// updateShares hands a coalesced claim's rows out in order, each hold up
// to its limit, in one UPDATE whose values are CASEs on task_id: an
// UPDATE per hold was a round trip each with the rows locked (25 holds a
// claim on average with 64 one-task workers). Only with SKIP LOCKED (no
// Redis lock), so every row read is updated.
func (d *myDriver) updateShares(ctx context.Context, tx *sql.Tx, recs []flow.Record, shares []HoldParams) ([]flow.Record, error) {
	var held []flow.Record
	var ids []any
	cols := make([][]any, 6) // owner, lease, lease_expiry, modify_time, the log's time and worker
	for _, h := range shares {
		mine := recs[:min(h.Limit, len(recs))]
		recs = recs[len(mine):]
		vals := []any{h.WorkerID, h.Lease, us(h.LeaseExpiry), us(h.Now), logAt(h.Now), h.WorkerID}
		for _, r := range mine {
			ids = append(ids, r.TaskID)
			for c, v := range vals {
				cols[c] = append(cols[c], r.TaskID, v)
			}
		}
		heldAs(mine, h)
		held = append(held, mine...)
	}
	if len(held) == 0 {
		return nil, nil
	}
	byID := "CASE task_id" + strings.Repeat(" WHEN ? THEN ?", len(ids)) + " END"
	log := strings.Replace(myLog(flow.EventHeld), "?", byID, 2)
	q := "UPDATE " + d.s.p + "tasks SET status = " + sqlStatus(flow.StatusProcessing) + ", owner = " + byID + ", lease = " + byID +
		", lease_expiry = " + byID + ", modify_time = " + byID + ", schedule_log = " + log + " WHERE task_id IN (" + in(len(ids)) + ")"
	var args []any
	for _, c := range cols {
		args = append(args, c...)
	}
	res, err := tx.ExecContext(ctx, q, append(args, ids...)...)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n != int64(len(held)) {
		return nil, fmt.Errorf("coalesced claim updated %d of %d rows", n, len(held))
	}
	return held, nil
}

func (d *myDriver) heldBy(ctx context.Context, tx *sql.Tx, recs []flow.Record, lease string) ([]flow.Record, error) {
	args := []any{lease}
	for _, r := range recs {
		args = append(args, r.TaskID)
	}
	rows, err := tx.QueryContext(ctx, "SELECT task_id FROM "+d.s.p+"tasks WHERE lease = ? AND task_id IN ("+in(len(recs))+")", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	mine := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		mine[id] = true
	}
	var out []flow.Record
	for _, r := range recs {
		if mine[r.TaskID] {
			out = append(out, r)
		}
	}
	return out, rows.Err()
}

// createBatch: multi-row INSERTs of up to 500 rows, in one transaction.
func (d *myDriver) createBatch(ctx context.Context, recs []flow.Record) error {
	const chunk = 500
	return d.s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for i := 0; i < len(recs); i += chunk {
			rs := recs[i:min(i+chunk, len(recs))]
			args := make([]any, 0, len(rs)*ncols)
			for k := range rs {
				args = append(args, insertArgs(&rs[k])...)
			}
			if _, err := tx.ExecContext(ctx, insertText(d.s.p, len(rs)), args...); err != nil {
				return err
			}
		}
		return d.s.count(ctx, tx, insertTally(recs))
	})
}

// insertText is a multi-row INSERT of n tasks.
func insertText(prefix string, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + prefix + "tasks (" + cols + ") VALUES ")
	row := "(" + in(ncols) + ")"
	for k := 0; k < n; k++ {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// setFast: no UPDATE ... RETURNING to tell which rows a set took, so a
// narrow locking read first (id, type, stage and lease, never the log)
// picks the rows processing under their request's lease, then one UPDATE
// of those writes the outcome and appends to the log in SQL, in one
// transaction. The general path instead read whole rows and rewrote every
// column, the log included, through a join to a derived table (MariaDB's
// CPU per task end to end: see docs/benchmarks.md).
func (d *myDriver) setFast(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) (done, pending map[string]bool, ok bool, err error) {
	if !fastSettable(reqs) {
		return nil, nil, false, nil
	}
	c := setColumns(reqs, now)
	done, pending = make(map[string]bool, len(reqs)), map[string]bool{}
	err = d.s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		clear(done)
		clear(pending)
		return d.setFastTx(ctx, tx, c, done, pending, now)
	})
	return done, pending, true, err
}

func (d *myDriver) setFastTx(ctx context.Context, tx *sql.Tx, c setCols, done, pending map[string]bool, now time.Time) error {
	t := d.s.tasks()
	args := make([]any, len(c.ids))
	for i, id := range c.ids {
		args[i] = id
	}
	rows, err := tx.QueryContext(ctx, "SELECT task_id, task_type, task_stage, lease FROM "+t+" WHERE task_id IN ("+in(len(args))+")"+
		" AND status = "+sqlStatus(flow.StatusProcessing)+" AND parent_id = '' FOR UPDATE", args...)
	if err != nil {
		return err
	}
	type was struct{ typ, stage, lease string }
	at := make(map[string]was, len(c.ids))
	for rows.Next() {
		var id string
		var w was
		if err := rows.Scan(&id, &w.typ, &w.stage, &w.lease); err != nil {
			rows.Close()
			return err
		}
		at[id] = w
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// The rows taken, locked until the commit: processing under the
	// request's lease (any other is refused, setFastDone says why).
	var take []int
	for i, id := range c.ids {
		if w, ok := at[id]; ok && w.lease != "" && w.lease == c.leases[i] {
			take = append(take, i)
		}
	}
	if len(take) == 0 {
		return nil
	}
	ids := make([]any, len(take))
	for k, i := range take {
		ids[k] = c.ids[i]
	}
	// A value every row shares is bound once; others are a CASE on the id.
	var sargs []any
	val := func(v func(i int) any) string {
		first := v(take[0])
		same := true
		for _, i := range take[1:] {
			if v(i) != first {
				same = false
				break
			}
		}
		if same {
			sargs = append(sargs, first)
			return "?"
		}
		for _, i := range take {
			sargs = append(sargs, c.ids[i], v(i))
		}
		return "CASE task_id" + strings.Repeat(" WHEN ? THEN ?", len(take)) + " END"
	}
	q := "UPDATE " + t + " SET" + mySetClause(
		func() string { return val(func(i int) any { return c.sts[i] }) },
		func() string { return val(func(i int) any { return c.stages[i] }) },
		func() string {
			return val(func(i int) any {
				if c.ctxs[i] == nil {
					return nil
				}
				return *c.ctxs[i]
			})
		},
		func() string { return val(func(i int) any { return c.ots[i] }) },
		&sargs, us(now), logAt(now)) +
		" WHERE task_id IN (" + in(len(ids)) + ")"
	res, err := tx.ExecContext(ctx, q, append(sargs, ids...)...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != int64(len(take)) {
		return fmt.Errorf("set updated %d of the %d rows it locked", n, len(take))
	}
	tl := tally{}
	for _, i := range take {
		w := at[c.ids[i]]
		st, stage := int(c.sts[i]), w.stage
		if flow.Status(st) == flow.StatusPending {
			pending[w.typ] = true
			if c.stages[i] != "" {
				stage = c.stages[i]
			}
		}
		done[c.ids[i]] = true
		tl.move(countKey{w.typ, w.stage, int(flow.StatusProcessing)}, countKey{w.typ, stage, st})
	}
	return d.s.count(ctx, tx, tl)
}

// mySetClause is liteSetClause for MySQL, whose UPDATE assigns left to
// right and lets each later expression read the columns assigned before
// it: the log (which reads the owner and the old stage) and the retry
// count come first, the columns they read after. st, stage, ctx and ot
// each add their SQL and arguments to args when called, in the order the
// text needs them.
func mySetClause(st, stage, ctx, ot func() string, args *[]any, now int64, logAt string) string {
	pending, success := sqlStatus(flow.StatusPending), sqlStatus(flow.StatusSuccess)
	var b strings.Builder
	// Each expression's text is made where it appears, so that its
	// arguments line up with the ?s before and after it.
	newStage := func() string {
		s1 := st()
		s2 := stage()
		s3 := stage()
		return "(CASE WHEN " + s1 + " = " + pending + " AND " + s2 + " <> '' THEN " + s3 + " ELSE task_stage END)"
	}
	// The entry's text is made first (its arguments in order), then
	// placed in the append, which has no arguments of its own.
	var obj strings.Builder
	obj.WriteString("JSON_OBJECT('at', ?, 'worker', owner, 'stage', ")
	*args = append(*args, logAt)
	obj.WriteString(newStage())
	obj.WriteString(", 'event', CASE " + st() + " WHEN " + pending + " THEN '" + flow.EventPending + "' WHEN " + success + " THEN '" + flow.EventSuccess +
		"' ELSE '" + flow.EventFailed + "' END)")
	b.WriteString(" schedule_log = " + myLogAppend(obj.String()) + ",")
	b.WriteString(" crt_retry_num = CASE WHEN " + st() + " = " + pending + " AND ")
	s := stage()
	b.WriteString(s + " <> '' AND ")
	s = stage()
	b.WriteString(s + " <> task_stage THEN 0 ELSE crt_retry_num END,")
	b.WriteString(" order_time = CASE WHEN " + st() + " = " + pending + " THEN ")
	b.WriteString(ot() + " ELSE order_time END,")
	b.WriteString(" task_stage = " + newStage() + ",")
	b.WriteString(" status = " + st() + ",")
	b.WriteString(" task_context = COALESCE(" + ctx() + ", task_context), owner = '', lease = '', lease_expiry = 0, modify_time = ?")
	*args = append(*args, now)
	return b.String()
}

func (d *myDriver) lockRows(ctx context.Context, tx *sql.Tx, ids []string) (*sql.Rows, error) {
	return lockRowsIn(ctx, tx, d.q.lockSel, ids)
}

// writeRows: one UPDATE joined to the new values per chunk, one round trip
// instead of one per row.
func (d *myDriver) writeRows(ctx context.Context, tx *sql.Tx, recs []*flow.Record) error {
	const chunk = 200
	t := d.s.p + "tasks"
	for i := 0; i < len(recs); i += chunk {
		part := recs[i:min(i+chunk, len(recs))]
		var b strings.Builder
		args := make([]any, 0, 11*len(part))
		b.WriteString("SELECT ? AS id, ? AS stage, ? AS st, ? AS ctx, ? AS ot, ? AS crt, ? AS owner, ? AS lease, ? AS le, ? AS log, ? AS mt")
		for k, r := range part {
			if k > 0 {
				b.WriteString(" UNION ALL SELECT " + in(11))
			}
			var le int64
			if r.LeaseExpiry != nil {
				le = us(*r.LeaseExpiry)
			}
			args = append(args, r.TaskID, r.TaskStage, int(r.Status), ctxArg(r.TaskContext), us(r.OrderTime), r.CrtRetryNum,
				r.Owner, r.Lease, le, string(flow.MarshalLog(r.ScheduleLog)), us(r.ModifyTime))
		}
		// STRAIGHT_JOIN: the values first, then one primary key lookup
		// each; otherwise the optimizer may scan the table.
		q := "UPDATE (" + b.String() + ") v STRAIGHT_JOIN " + t + " t ON t.task_id = v.id SET t.task_stage = v.stage, t.status = v.st, t.task_context = v.ctx," +
			" t.order_time = v.ot, t.crt_retry_num = v.crt, t.owner = v.owner, t.lease = v.lease, t.lease_expiry = v.le, t.schedule_log = v.log, t.modify_time = v.mt"
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// notify: other servers on MySQL learn of due tasks by polling.
func (d *myDriver) notify(context.Context, txRunner, ...string) error { return nil }

// heartbeat: an UPDATE joined to the types, then a read of the leases, in
// one transaction (no RETURNING).
func (d *myDriver) heartbeat(ctx context.Context, workerID string, now time.Time) ([]flow.HeldLease, error) {
	var out []flow.HeldLease
	err := d.s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, d.q.heartbeat, us(now), us(now), workerID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, d.q.heldBy, workerID)
		if err != nil {
			return err
		}
		out, err = scanLeases(rows)
		return err
	})
	return out, err
}

// mysqlDSN turns what follows mysql:// into the driver's DSN. Both the
// driver's own form (user:pass@tcp(host:3306)/db?params) and a URL
// (user:pass@host:3306/db?params) are accepted.
func mysqlDSN(spec string) (*mysql.Config, error) {
	if strings.Contains(spec, "(") {
		return mysql.ParseDSN(spec)
	}
	u, err := url.Parse("mysql://" + spec)
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	if strings.Contains(cfg.DBName, "/") {
		return nil, fmt.Errorf("database name %q has a /", cfg.DBName)
	}
	if u.RawQuery == "" {
		return cfg, nil
	}
	// Let the driver read the parameters as it would in its own form.
	withParams, err := mysql.ParseDSN("/?" + u.RawQuery)
	if err != nil {
		return nil, err
	}
	withParams.User, withParams.Passwd, withParams.Net, withParams.Addr, withParams.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
	return withParams, nil
}

func openMySQL(ctx context.Context, dsn string) (*SQLStore, error) {
	cfg, err := mysqlDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		return nil, fmt.Errorf("store: mysql dsn: %w", err)
	}
	// One round trip per query: the driver interpolates arguments instead
	// of preparing, executing and closing a statement each time.
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	var db *sql.DB
	// MySQL 8 and MariaDB 11.1+ call it transaction_isolation; older
	// MariaDB only knows tx_isolation.
	for _, v := range []string{"transaction_isolation", "tx_isolation"} {
		c := cfg.Clone()
		c.Params = map[string]string{v: "'READ-COMMITTED'"}
		for k, pv := range cfg.Params {
			c.Params[k] = pv
		}
		conn, cerr := mysql.NewConnector(c)
		if cerr != nil {
			return nil, fmt.Errorf("store: mysql dsn: %w", cerr)
		}
		db = sql.OpenDB(conn)
		err = db.PingContext(ctx)
		if err != nil && strings.Contains(err.Error(), "1193") { // unknown system variable
			db.Close()
			continue
		}
		break
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connect to mysql %s@%s/%s: %w", cfg.User, cfg.Addr, cfg.DBName, err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	d := &myDriver{}
	d.s = &SQLStore{drv: d, w: db, r: db, groupSets: true}
	return d.s, nil
}
