package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// SQLite: WAL, one writer connection whose transactions start with BEGIN
// IMMEDIATE (so a transaction never has to upgrade a read lock and fail),
// and a small pool of readers. synchronous=FULL by default: every commit is
// fsynced before the API answers, so neither kill -9 nor a power cut loses
// an acknowledged write. synchronous=normal (sqlite://PATH?synchronous=normal)
// still survives kill -9 — the WAL write has reached the OS before commit
// returns — but not a power cut.
var liteMigrations = [][]string{{
	`CREATE TABLE IF NOT EXISTS {p}task_types (task_type TEXT PRIMARY KEY, schedule_limit INTEGER NOT NULL,
		schedule_interval_ms INTEGER NOT NULL, max_processing_ms INTEGER NOT NULL, max_retry_num INTEGER NOT NULL,
		retry_interval_ms INTEGER NOT NULL, max_retry_interval_ms INTEGER NOT NULL, create_time INTEGER NOT NULL, modify_time INTEGER NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS {p}tasks (task_id TEXT PRIMARY KEY, task_type TEXT NOT NULL, task_stage TEXT NOT NULL,
		status INTEGER NOT NULL, task_context TEXT, priority INTEGER NOT NULL, order_time INTEGER NOT NULL,
		crt_retry_num INTEGER NOT NULL, max_retry_num INTEGER NOT NULL, retry_interval_ms INTEGER NOT NULL,
		max_retry_interval_ms INTEGER NOT NULL, owner TEXT NOT NULL DEFAULT '', lease TEXT NOT NULL DEFAULT '',
		lease_expiry INTEGER NOT NULL DEFAULT 0, schedule_log TEXT NOT NULL, create_time INTEGER NOT NULL,
		modify_time INTEGER NOT NULL) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_claim ON {p}tasks (task_type, order_time) WHERE status = 1`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_lease ON {p}tasks (lease_expiry) WHERE status = 2`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_ended ON {p}tasks (modify_time) WHERE status IN (3, 4, 5)`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_list ON {p}tasks (task_type, status, task_id)`,
}, {
	// Unique tasks: one live (pending or processing) task per type and key.
	`ALTER TABLE {p}tasks ADD COLUMN unique_key TEXT NOT NULL DEFAULT ''`,
	`CREATE UNIQUE INDEX IF NOT EXISTS {p}tasks_unique ON {p}tasks (task_type, unique_key) WHERE unique_key <> '' AND status IN (1, 2)`,
	`ALTER TABLE {p}task_types ADD COLUMN paused INTEGER NOT NULL DEFAULT 0`,
}, {
	// Periodic types: the schedule and the last tick fired.
	`ALTER TABLE {p}task_types ADD COLUMN cron TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE {p}task_types ADD COLUMN cron_stage TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE {p}task_types ADD COLUMN cron_context TEXT`,
	`ALTER TABLE {p}task_types ADD COLUMN cron_last INTEGER NOT NULL DEFAULT 0`,
}, {
	// The listing index without status: (task_type, status, task_id)
	// changed on every status change, a delete and an insert in it at
	// hold and again at set (4 of the 13 B-tree changes a task cost on
	// SQLite, 2 of the index insertions on PostgreSQL); (task_type,
	// task_id) is written once, at create. get_task_list filtered by type
	// and status walks the type's tasks in id order and skips the other
	// statuses; stats counts from the table.
	`DROP INDEX IF EXISTS {p}tasks_list`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_type ON {p}tasks (task_type, task_id)`,
}, {
	// stats counts each status from the partial index that holds it, a
	// narrow covering scan with no row read: task_type joins the lease
	// index, and the index of ended tasks leads with (status, task_type)
	// so that its GROUP BY needs no sort. Counting from the table read
	// every row, about 2.5 µs each (50 ms for 20,000 tasks) on the reader
	// a console or a dashboard polls. The index changes no more often
	// than before: once when a task ends.
	`DROP INDEX IF EXISTS {p}tasks_lease`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_lease ON {p}tasks (lease_expiry, task_type) WHERE status = 2`,
	`DROP INDEX IF EXISTS {p}tasks_ended`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_ended ON {p}tasks (status, task_type, modify_time) WHERE status IN (3, 4, 5)`,
}, fanOutMigration(`ALTER TABLE {p}tasks ADD COLUMN parent_id TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE {p}tasks ADD COLUMN join_stage TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE {p}tasks ADD COLUMN children_open INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE {p}tasks ADD COLUMN fan_depth INTEGER NOT NULL DEFAULT 0`),
	// Order per key and pausing a key (keys.go).
	keyMigration(`CREATE TABLE IF NOT EXISTS {p}rate_keys (task_type TEXT NOT NULL, rate_key TEXT NOT NULL,
		paused_until INTEGER NOT NULL DEFAULT 0, tat INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (task_type, rate_key)) WITHOUT ROWID`,
		`ALTER TABLE {p}tasks ADD COLUMN sequence_key TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}tasks ADD COLUMN rate_key TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}task_types ADD COLUMN rate_limit_per_second REAL NOT NULL DEFAULT 0`), liteCountsMigration,
	// Fair shares per key (fair.go).
	fairMigration(`ALTER TABLE {p}tasks ADD COLUMN fairness_key TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}task_types ADD COLUMN fair INTEGER NOT NULL DEFAULT 0`, `ALTER TABLE {p}task_types ADD COLUMN fairness_weights TEXT`), liteCountsInline}

// liteCountsMigration makes the task counts (counts.go), kept in place
// by the writes: the one writer has no concurrent transaction to make
// wait on a count's row.
var liteCountsMigration = []string{
	`CREATE TABLE IF NOT EXISTS {p}counts (task_type TEXT NOT NULL, task_stage TEXT NOT NULL, status INTEGER NOT NULL,
		n INTEGER NOT NULL, PRIMARY KEY (task_type, task_stage, status)) WITHOUT ROWID`,
}

// liteCountsInline drops the row triggers that kept the counts before the
// writes did (counts.go): a database made between the two versions had
// them, and the two together would count every change twice.
var liteCountsInline = []string{
	`DROP TRIGGER IF EXISTS {p}count_ins`,
	`DROP TRIGGER IF EXISTS {p}count_del`,
	`DROP TRIGGER IF EXISTS {p}count_upd`,
}

// counting: counts in place by the writes, no fold, no lock (the rebuild
// is one write transaction).
func (d *liteDriver) counting() countSQL {
	return countSQL{inline: true, sum: "SUM(n)", upsert: liteCountUpsert(d.s.p)}
}

func liteCountUpsert(p string) string {
	return "INSERT INTO " + p + "counts (task_type, task_stage, status, n) VALUES (?, ?, ?, ?)" +
		" ON CONFLICT (task_type, task_stage, status) DO UPDATE SET n = n + excluded.n"
}

func liteLog(event string) string {
	return liteAppendLog("schedule_log", "json_object('at', ?, 'worker', ?, 'stage', task_stage, 'event', '"+event+"')")
}

// liteAppendLog is appendLog with SQLite's cut of the oldest entry: only
// a full log is parsed, to drop it (json_array_length and json_insert on
// every append cost about a tenth of the writer's time at hold and at
// set).
func liteAppendLog(log, entry string) string {
	return appendLog(log, entry, "rtrim(json_remove("+log+", '$[0]'), ']')")
}

// liteDriver is SQLite's driver: one writer connection, its hot
// statements prepared on it, and its writes committed in groups
// (liteWriter).
type liteDriver struct {
	s       *SQLStore
	lw      *liteWriter // group commit of writes (start)
	walPath string      // with synchronous=FULL: the WAL the group commit fsyncs
	// q are the statements only this driver runs.
	q struct {
		hold, holdOne, holdNoLog, holdOneNoLog, lockSel, writeRow, setFast, heartbeat string
		holdFair, holdFairOne, holdFairNoLog, holdFairOneNoLog                        string
	}
	// prepared hot statements: parsing the hold query cost about a tenth
	// of the CPU of an end-to-end run when prepared per call.
	holdStmt, holdOneStmt, writeRowStmt, setFastStmt, setOneStmt, insertStmt *sql.Stmt
	holdNoLogStmt, holdOneNoLogStmt                                          *sql.Stmt
	// the claim of one fairness key (fair.go), prepared the same way
	holdFairStmt, holdFairOneStmt, holdFairNoLogStmt, holdFairOneNoLogStmt *sql.Stmt
}

func (d *liteDriver) name() string                { return "sqlite" }
func (d *liteDriver) migrations() [][]string      { return liteMigrations }
func (d *liteDriver) rebind(q string) string      { return q }
func (d *liteDriver) keys() keySQL                { return keySQL{seqLive, seqProc, ratePending, ""} }
func (d *liteDriver) fair() fairSQL               { return fairPartial }
func (d *liteDriver) logExpr(event string) string { return liteLog(event) }
func (d *liteDriver) retryable(err error) bool    { return liteBusy(err) }

// liteBusy reports whether err is SQLite's "database is locked".
func liteBusy(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

// build: one writer, so no row locks (and no SKIP LOCKED); the claim is
// one UPDATE ... RETURNING.
func (d *liteDriver) build(q *queries, b qparts) {
	t := b.t
	guard := ""
	if b.redisLock {
		guard = " AND status = " + b.pending
	}
	hold := func(due string) string {
		return "UPDATE " + t + " SET " + b.set + " WHERE task_id IN (SELECT task_id FROM " + t + " WHERE " + due + ")" + guard + " RETURNING "
	}
	d.q.hold, d.q.holdNoLog = hold(b.due)+b.cols, hold(b.due)+colsOf("", false)
	d.q.holdFair, d.q.holdFairNoLog = hold(b.dueFair)+b.cols, hold(b.dueFair)+colsOf("", false)
	// A hold of one (limit 1) compares with a scalar subquery: IN (…)
	// builds a temporary table for its list, a fixed cost that a
	// one-task hold paid in full in the writer's turn.
	holdOne := func(due string) string {
		return "UPDATE " + t + " SET " + b.set + " WHERE task_id = (SELECT task_id FROM " + t + " WHERE " + due + ")" + guard + " RETURNING "
	}
	d.q.holdOne, d.q.holdOneNoLog = holdOne(b.due)+b.cols, holdOne(b.due)+colsOf("", false)
	d.q.holdFairOne, d.q.holdFairOneNoLog = holdOne(b.dueFair)+b.cols, holdOne(b.dueFair)+colsOf("", false)
	d.q.lockSel = "SELECT " + b.cols + " FROM " + t + " WHERE task_id IN (%s) ORDER BY task_id"
	d.q.writeRow = "UPDATE " + t + " SET task_stage = ?, status = ?, task_context = ?, order_time = ?, crt_retry_num = ?, owner = ?, lease = ?, lease_expiry = ?, schedule_log = ?, modify_time = ? WHERE task_id = ?"
	d.q.setFast = liteSetFast(t)
	d.q.heartbeat = "UPDATE " + t + " SET lease_expiry = ? + (SELECT max_processing_ms FROM " + b.p + "task_types ty WHERE ty.task_type = " + t + ".task_type) * 1000," +
		" modify_time = ? WHERE owner = ? AND status = " + b.proc + " RETURNING task_id, lease, lease_expiry"
	q.rescueSel = "SELECT " + b.cols + " FROM " + t + " WHERE status = " + b.proc + " AND lease_expiry < ? ORDER BY lease_expiry LIMIT ?"
	// The ended index leads with (status, task_type): prune walks it per
	// registered type (every task has one: see Store.CreateTasks), a
	// range on modify_time each, so a batch reads only what it deletes.
	// Oldest first within a type; any order is fine across them, as all
	// of them go.
	q.prune = "DELETE FROM " + t + " WHERE task_id IN (SELECT e.task_id FROM " + b.p + "task_types ty CROSS JOIN " + t + " AS e INDEXED BY " + t + "_ended" +
		" WHERE e.task_type = ty.task_type AND e.status IN (" + b.ended + ") AND e.modify_time < ? LIMIT ?)"
	q.upsertType = upsertExcluded(b)
	q.insertUnique = q.insertOne + " ON CONFLICT DO NOTHING"
}

func (d *liteDriver) pruneArgs(before time.Time, limit int) []any { return pruneArgs(before, limit) }

func (d *liteDriver) listQuery(f ListFilter) (string, []any) {
	return listQuery(d.s.p+"tasks", d.s.q.cols, f)
}

// tx joins the writer's next group commit.
func (d *liteDriver) tx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	if d.lw == nil { // not started (TxCreator's driver runs no transactions of its own)
		return d.s.retryTx(ctx, fn)
	}
	return d.lw.do(ctx, fn)
}

// write runs in turn with the group commits rather than racing them for
// the one connection (a heartbeat that waits too long loses leases).
func (d *liteDriver) write(ctx context.Context, fn func(context.Context, execQuerier) error) error {
	if d.lw == nil {
		return fn(ctx, d.s.w)
	}
	return d.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
}

// lockMigrations: the one writer's transaction serialises migrations
// (BEGIN IMMEDIATE takes the database's write lock).
func (d *liteDriver) lockMigrations(ctx context.Context, _ string, fn func(execQuerier) error) error {
	return d.s.tryTx(ctx, func(_ context.Context, tx *sql.Tx) error { return fn(tx) })
}

// start keeps the hot statements prepared on the one writer and starts
// the group commit.
func (d *liteDriver) start(ctx context.Context, _ string) error {
	if err := d.prepare(ctx); err != nil {
		return err
	}
	var err error
	d.lw, err = newLiteWriter(ctx, d.s.w, d.s.log, d.walPath)
	return err
}

func (d *liteDriver) prepare(ctx context.Context) error {
	for _, st := range []struct {
		to   **sql.Stmt
		q    string
		what string
	}{
		{&d.holdStmt, d.q.hold, "hold"},
		{&d.holdOneStmt, d.q.holdOne, "hold of one"},
		{&d.holdNoLogStmt, d.q.holdNoLog, "hold without logs"},
		{&d.holdOneNoLogStmt, d.q.holdOneNoLog, "hold of one without its log"},
		{&d.holdFairStmt, d.q.holdFair, "hold of a fairness key"},
		{&d.holdFairOneStmt, d.q.holdFairOne, "hold of one of a fairness key"},
		{&d.holdFairNoLogStmt, d.q.holdFairNoLog, "hold of a fairness key without logs"},
		{&d.holdFairOneNoLogStmt, d.q.holdFairOneNoLog, "hold of one of a fairness key without its log"},
		{&d.writeRowStmt, d.q.writeRow, "set"},
		{&d.setFastStmt, d.q.setFast, "set (fast)"},
		{&d.setOneStmt, liteSetOne(d.s.p + "tasks"), "set (one)"},
		{&d.insertStmt, liteInsert(d.s.p + "tasks"), "create"},
		{&d.s.countStmt, liteCountUpsert(d.s.p), "count"},
	} {
		var err error
		if *st.to, err = d.s.w.PrepareContext(ctx, st.q); err != nil {
			return fmt.Errorf("store: prepare %s: %w", st.what, err)
		}
	}
	return nil
}

func (d *liteDriver) close() error {
	if d.lw != nil {
		d.lw.close()
	}
	for _, st := range []*sql.Stmt{d.holdStmt, d.holdOneStmt, d.holdNoLogStmt, d.holdOneNoLogStmt, d.writeRowStmt, d.setFastStmt, d.setOneStmt, d.insertStmt,
		d.holdFairStmt, d.holdFairOneStmt, d.holdFairNoLogStmt, d.holdFairOneNoLogStmt, d.s.countStmt} {
		if st != nil {
			st.Close()
		}
	}
	return nil
}

// hold: the claim joins the writer's next group commit. The writer only
// steps and scans the rows; their logs are parsed here, off the writer (a
// tenth of a hold's time in it). The one writer already runs claims one
// after another, so they take no turns (claimInTurn).
func (d *liteDriver) hold(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	return d.s.retryClaim(ctx, p, d.claim)
}

func (d *liteDriver) claim(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	return d.claimKeys(ctx, p, nil, nil)
}

// holdKeys claims the keys' shares in one transaction of the one writer,
// a prepared claim per key.
func (d *liteDriver) holdKeys(ctx context.Context, p HoldParams, keys []string, limits []int) ([]flow.Record, error) {
	return d.s.retryClaim(ctx, p, func(ctx context.Context, p HoldParams) ([]flow.Record, error) {
		return d.claimKeys(ctx, p, keys, limits)
	})
}

// claimKeys is the plain claim without keys, else one claim per key.
func (d *liteDriver) claimKeys(ctx context.Context, p HoldParams, keys []string, limits []int) ([]flow.Record, error) {
	var out []flow.Record
	var logs []string
	err := d.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out, logs = nil, nil
		run := func(p HoldParams) error {
			stmt, one := d.holdStmt, d.holdOneStmt
			switch {
			case p.fairKey != "" && p.OmitLog:
				stmt, one = d.holdFairNoLogStmt, d.holdFairOneNoLogStmt
			case p.fairKey != "":
				stmt, one = d.holdFairStmt, d.holdFairOneStmt
			case p.OmitLog:
				stmt, one = d.holdNoLogStmt, d.holdOneNoLogStmt
			}
			if p.Limit == 1 {
				stmt = one
			}
			rows, err := tx.StmtContext(ctx, stmt).QueryContext(ctx, holdArgs(p, false)...)
			if err != nil {
				return err
			}
			got, gotLogs, err := scanHeld(rows, p.Limit)
			out, logs = append(out, got...), append(logs, gotLogs...)
			return err
		}
		if keys == nil {
			if err := run(p); err != nil {
				return err
			}
		}
		for i, k := range keys {
			q := p
			q.fairKey, q.Limit = k, limits[i]
			if err := run(q); err != nil {
				return err
			}
		}
		return d.s.count(ctx, tx, heldTally(out))
	})
	if err != nil {
		return nil, err
	}
	return d.s.parseHeldLogs(out, logs), nil
}

// createBatch: one prepared statement for the batch (liteInsert), encoded
// here, outside the one writer.
func (d *liteDriver) createBatch(ctx context.Context, recs []flow.Record) error {
	rows, shared, err := liteInsertArgs(recs)
	if err != nil {
		return err
	}
	return d.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.StmtContext(ctx, d.insertStmt).ExecContext(ctx, append([]any{rows}, shared...)...); err != nil {
			return err
		}
		return d.s.count(ctx, tx, insertTally(recs))
	})
}

func (d *liteDriver) lockRows(ctx context.Context, tx *sql.Tx, ids []string) (*sql.Rows, error) {
	return lockRowsIn(ctx, tx, d.q.lockSel, ids)
}

// writeRows: in process, a prepared statement per row is cheaper than one
// statement joined to a list of values (measured: BenchmarkCycle).
func (d *liteDriver) writeRows(ctx context.Context, tx *sql.Tx, recs []*flow.Record) error {
	stmt := tx.StmtContext(ctx, d.writeRowStmt) // the one writer has it prepared already
	defer stmt.Close()
	for _, r := range recs {
		var le int64
		if r.LeaseExpiry != nil {
			le = us(*r.LeaseExpiry)
		}
		if _, err := stmt.ExecContext(ctx, r.TaskStage, int(r.Status), ctxArg(r.TaskContext), us(r.OrderTime), r.CrtRetryNum,
			r.Owner, r.Lease, le, string(flow.MarshalLog(r.ScheduleLog)), us(r.ModifyTime), r.TaskID); err != nil {
			return err
		}
	}
	return nil
}

// notify: one process per database file; OnDue has woken its holds.
func (d *liteDriver) notify(context.Context, txRunner, ...string) error { return nil }

func (d *liteDriver) heartbeat(ctx context.Context, workerID string, now time.Time) ([]flow.HeldLease, error) {
	return d.s.heartbeatReturning(ctx, d.q.heartbeat, workerID, now)
}

// liteInsert is SQLite's batch create, as liteSetFast's set: one prepared
// INSERT ... SELECT FROM jsonb_each(?1) for any batch size. A row is
// [id, context] when the batch's rows share every other column, which
// then come as ?2-?17 (in cols order); otherwise it is [id, context, then
// the other 16 in cols order] and ?2-?17 are NULL. A multi-row INSERT
// bound 18 parameters a row, and binding was 40 % of a create's time in
// the one writer.
func liteInsert(t string) string {
	sel := make([]string, 0, ncols)
	k := 2
	for _, name := range strings.Split(cols, ", ") {
		switch name {
		case "task_id":
			sel = append(sel, "value ->> 0")
		case "task_context":
			sel = append(sel, "value ->> 1")
		default:
			sel = append(sel, "COALESCE(?"+strconv.Itoa(k)+", value ->> "+strconv.Itoa(k)+")")
			k++
		}
	}
	return "INSERT INTO " + t + " (" + cols + ") SELECT " + strings.Join(sel, ", ") + " FROM jsonb_each(?1)"
}

// liteInsertArgs encodes recs for liteInsert: the rows' JSON and the 16
// shared values (all nil unless every column is shared).
func liteInsertArgs(recs []flow.Record) (string, []any, error) {
	args := make([][]any, len(recs))
	for i := range recs {
		args[i] = insertArgs(&recs[i])
	}
	idOrCtx := func(k int) bool { return k == 0 || k == 4 } // task_id, task_context in cols
	same := true
	for _, a := range args[1:] {
		for k, v := range a {
			if !idOrCtx(k) && v != args[0][k] {
				same = false
				break
			}
		}
		if !same {
			break
		}
	}
	shared := make([]any, 0, ncols-2)
	rows := make([][]any, len(args))
	for i, a := range args {
		rows[i] = []any{a[0], a[4]}
		for k, v := range a {
			switch {
			case idOrCtx(k):
			case !same:
				rows[i] = append(rows[i], v)
			case i == 0:
				shared = append(shared, v)
			}
		}
	}
	if !same {
		shared = shared[:ncols-2] // nil values: every column comes from the rows
	}
	b, err := json.Marshal(rows)
	return string(b), shared, err
}

func openSQLite(ctx context.Context, dsn string) (*SQLStore, error) {
	path, query, _ := strings.Cut(strings.TrimPrefix(dsn, "sqlite://"), "?")
	if path == "" {
		return nil, fmt.Errorf("store: sqlite://PATH: the path is empty")
	}
	if path == ":memory:" {
		return nil, fmt.Errorf("store: sqlite://:memory: is not supported (readers and the writer need one file)")
	}
	sync := "FULL"
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("store: sqlite options %q: %w", query, err)
		}
		for k, v := range q {
			switch {
			case k == "synchronous" && len(v) == 1 && (strings.EqualFold(v[0], "full") || strings.EqualFold(v[0], "normal")):
				sync = strings.ToUpper(v[0])
			default:
				return nil, fmt.Errorf("store: sqlite option %s=%v: only synchronous=full|normal is known", k, v)
			}
		}
	}
	// busy_timeout first, so that the pragmas after it wait on a lock
	// rather than fail (the WAL switch can fail at once even so: pingLite).
	base := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")" +
		"&_pragma=temp_store(MEMORY)&_pragma=cache_size(-32768)"
	w, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1) // the one writer
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := pingLite(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open sqlite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	d := &liteDriver{}
	if sync == "FULL" {
		d.walPath = path + "-wal" // the group commit fsyncs it (see liteWriter)
	}
	d.s = &SQLStore{drv: d, w: w, r: r}
	return d.s, nil
}

// pingLite opens the writer's connection. While other connections open
// the same file (a second server, the store tests' parallel subtests on
// one file), the open (its pragmas, the switch to WAL among them) can
// fail at once with SQLITE_BUSY in spite of busy_timeout (about 1 run in
// 20 of TestSQLite did); it is retried for as long as busy_timeout would
// wait.
func pingLite(ctx context.Context, w *sql.DB) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := w.PingContext(ctx)
		if err == nil || !liteBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
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
		" WHERE t.task_id = v.id AND t.status = " + sqlStatus(flow.StatusProcessing) + " AND t.lease = v.lease AND t.lease <> '' AND t.parent_id = ''" +
		" RETURNING task_id, task_type, status, task_stage"
}

// liteSetOne is liteSetFast for a batch of one, with the request's values
// bound directly: a worker reporting each outcome alone (and every
// single set_task) skips the JSON and the UPDATE ... FROM machinery.
//
// Arguments: ?1 id, ?2 lease, ?3 status, ?4 stage, ?5 context, ?6 order
// time, ?7 now, ?8 log time.
func liteSetOne(table string) string {
	return "UPDATE " + table + " SET" + liteSetClause("", "?3", "?4", "?5", "?6", "?7", "?8") +
		" WHERE task_id = ?1 AND status = " + sqlStatus(flow.StatusProcessing) + " AND lease = ?2 AND lease <> '' AND parent_id = '' RETURNING task_type, status, task_stage"
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

// setFast: a batch of one binds the request's values to liteSetOne; a
// larger batch travels as one JSON argument to liteSetFast. Either joins
// the writer's next group commit, encoded here, outside the one writer.
func (d *liteDriver) setFast(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) (done, pending map[string]bool, ok bool, err error) {
	if !fastSettable(reqs) {
		return nil, nil, false, nil
	}
	c := setColumns(reqs, now)
	n := len(reqs)
	done, pending = make(map[string]bool, n), map[string]bool{}
	if n == 1 {
		err = d.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var cx any
			if c.ctxs[0] != nil {
				cx = *c.ctxs[0]
			}
			was, err := d.stagesBefore(ctx, tx, c)
			if err != nil {
				return err
			}
			var typ, stage string
			var st int
			err = tx.StmtContext(ctx, d.setOneStmt).QueryRowContext(ctx, c.ids[0], c.leases[0], c.sts[0], c.stages[0], cx, c.ots[0], us(now), logAt(now)).Scan(&typ, &st, &stage)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return nil // refused: not processing under this lease
			case err != nil:
				return err
			}
			done[c.ids[0]] = true
			if flow.Status(st) == flow.StatusPending {
				pending[typ] = true
			}
			t := tally{}
			t.move(setFrom(typ, stage, was, c.ids[0]), countKey{typ, stage, st})
			return d.s.count(ctx, tx, t)
		})
		return done, pending, true, err
	}
	var shared [4]any // NULL unless every row has the same
	var rowLen int
	{
		ls, lease := sharedValue(c.leases)
		ss, st := sharedValue(c.sts)
		gs, stage := sharedValue(c.stages)
		os, ot := sharedValue(c.ots)
		if len(ls) == 0 && len(ss) == 0 && len(gs) == 0 && len(os) == 0 {
			shared, rowLen = [4]any{lease, st, stage, ot}, 2
		} else {
			rowLen = 6
		}
	}
	batch := make([][]any, n)
	for i := range c.ids {
		var cx any // the context as a JSON string, so ->> gives back its exact text
		if c.ctxs[i] != nil {
			cx = *c.ctxs[i]
		}
		batch[i] = []any{c.ids[i], cx, c.leases[i], c.sts[i], c.stages[i], c.ots[i]}[:rowLen]
	}
	arg, err := json.Marshal(batch)
	if err != nil {
		return nil, nil, true, err
	}
	err = d.lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return d.setFastTx(ctx, tx, c, done, pending, string(arg), now, shared)
	})
	return done, pending, true, err
}

func (d *liteDriver) setFastTx(ctx context.Context, tx *sql.Tx, c setCols, done, pending map[string]bool, batch string, now time.Time, shared [4]any) error {
	was, err := d.stagesBefore(ctx, tx, c)
	if err != nil {
		return err
	}
	rows, err := tx.StmtContext(ctx, d.setFastStmt).QueryContext(ctx, batch, us(now), logAt(now), shared[0], shared[1], shared[2], shared[3])
	if err != nil {
		return err
	}
	defer rows.Close()
	t := tally{}
	for rows.Next() {
		var id, typ, stage string
		var st int
		if err := rows.Scan(&id, &typ, &st, &stage); err != nil {
			return err
		}
		done[id] = true
		if flow.Status(st) == flow.StatusPending {
			pending[typ] = true
		}
		t.move(setFrom(typ, stage, was, id), countKey{typ, stage, st})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return d.s.count(ctx, tx, t)
}

// stagesBefore reads, before a fast set, the stages of the tasks it may
// move to another stage (pending with a stage named): the UPDATE returns
// only the new one, and the count it leaves is its old stage's. A set
// that names no new stage (success, failed, the same stage again) reads
// nothing.
func (d *liteDriver) stagesBefore(ctx context.Context, tx *sql.Tx, c setCols) (map[string]string, error) {
	var ids []any
	for i, st := range c.sts {
		if flow.Status(st) == flow.StatusPending && c.stages[i] != "" {
			ids = append(ids, c.ids[i])
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, "SELECT task_id, task_stage FROM "+d.s.tasks()+" WHERE task_id IN ("+in(len(ids))+")", ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	was := make(map[string]string, len(ids))
	for rows.Next() {
		var id, stage string
		if err := rows.Scan(&id, &stage); err != nil {
			return nil, err
		}
		was[id] = stage
	}
	return was, rows.Err()
}

// setFrom is the count a fast set took a task out of: processing, at the
// stage it had (was, when the set could change it; else its stage now).
func setFrom(typ, stage string, was map[string]string, id string) countKey {
	if s, ok := was[id]; ok {
		stage = s
	}
	return countKey{typ, stage, int(flow.StatusProcessing)}
}
