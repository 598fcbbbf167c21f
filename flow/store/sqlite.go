package store

import (
	"context"
	"database/sql"
	"encoding/json"
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
}}

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

// liteDialect is SQLite's SQL.
func liteDialect() *dialect {
	return &dialect{name: "sqlite", migrations: liteMigrations, logExpr: liteLog, queries: liteQueries,
		retryable: liteBusy}
}

// liteBusy reports whether err is SQLite's "database is locked".
func liteBusy(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

// liteQueries: one writer, so no row locks (and no SKIP LOCKED); the claim
// is one UPDATE ... RETURNING.
func liteQueries(q *queries, b qparts) {
	t := b.t
	guard := ""
	if b.redisLock {
		guard = " AND status = " + b.pending
	}
	hold := "UPDATE " + t + " SET " + b.set + " WHERE task_id IN (SELECT task_id FROM " + t + " WHERE " + b.due + ")" + guard + " RETURNING "
	q.hold, q.holdNoLog = hold+b.cols, hold+colsOf("", false)
	// A hold of one (limit 1) compares with a scalar subquery: IN (…)
	// builds a temporary table for its list, a fixed cost that a
	// one-task hold paid in full in the writer's turn.
	holdOne := "UPDATE " + t + " SET " + b.set + " WHERE task_id = (SELECT task_id FROM " + t + " WHERE " + b.due + ")" + guard + " RETURNING "
	q.holdOne, q.holdOneNoLog = holdOne+b.cols, holdOne+colsOf("", false)
	q.lockSel = "SELECT " + b.cols + " FROM " + t + " WHERE task_id IN (%s) ORDER BY task_id"
	q.rescueSel = "SELECT " + b.cols + " FROM " + t + " WHERE status = " + b.proc + " AND lease_expiry < ? ORDER BY lease_expiry LIMIT ?"
	// The ended index leads with (status, task_type): prune walks it per
	// registered type (every task has one: see Store.CreateTasks), a
	// range on modify_time each, so a batch reads only what it deletes.
	// Oldest first within a type; any order is fine across them, as all
	// of them go.
	q.prune = "DELETE FROM " + t + " WHERE task_id IN (SELECT e.task_id FROM " + b.p + "task_types ty CROSS JOIN " + t + " AS e INDEXED BY " + t + "_ended" +
		" WHERE e.task_type = ty.task_type AND e.status IN (" + b.ended + ") AND e.modify_time < ? LIMIT ?)"
	// Each status from its partial index (see the migration): INDEXED BY,
	// as the planner prefers the type index for a status with few rows
	// and then reads every task of the type.
	q.stats = "SELECT task_type, " + b.pending + ", COUNT(*) FROM " + t + " INDEXED BY " + t + "_claim WHERE status = " + b.pending + " GROUP BY task_type" +
		" UNION ALL SELECT task_type, " + b.proc + ", COUNT(*) FROM " + t + " INDEXED BY " + t + "_lease WHERE status = " + b.proc + " GROUP BY task_type" +
		" UNION ALL SELECT task_type, status, COUNT(*) FROM " + t + " INDEXED BY " + t + "_ended WHERE status IN (" + b.ended + ") GROUP BY status, task_type"
	q.upsertType = upsertExcluded(b)
	q.insertUnique = q.insertOne + " ON CONFLICT DO NOTHING"
	q.heartbeat = "UPDATE " + t + " SET lease_expiry = ? + (SELECT max_processing_ms FROM " + b.p + "task_types ty WHERE ty.task_type = " + t + ".task_type) * 1000," +
		" modify_time = ? WHERE owner = ? AND status = " + b.proc + " RETURNING task_id, lease, lease_expiry"
	q.workerSel = "SELECT " + b.cols + " FROM " + t + " WHERE owner = ? AND status = " + b.proc + " ORDER BY task_id"
	q.setFast = liteSetFast(t)
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

func openSQLite(ctx context.Context, spec string) (*SQLStore, error) {
	path, query, _ := strings.Cut(spec, "?")
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
	s := &SQLStore{d: liteDialect(), w: w, r: r, gate: make(chan struct{}, 1)}
	if sync == "FULL" {
		s.walPath = path + "-wal" // the group commit fsyncs it (see liteWriter)
	}
	return s, nil
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
