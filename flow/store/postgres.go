package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// PostgreSQL goes through database/sql with the pgx driver, so all three
// dialects share one code path. pgx caches a prepared statement per
// connection for every query text (QueryExecModeCacheStatement), which is
// why the batch queries take arrays (one text for any batch size) instead of
// growing VALUES lists.
var pgMigrations = [][]string{{
	`CREATE TABLE IF NOT EXISTS {p}task_types (task_type VARCHAR(64) PRIMARY KEY, schedule_limit INT NOT NULL,
		schedule_interval_ms BIGINT NOT NULL, max_processing_ms BIGINT NOT NULL, max_retry_num INT NOT NULL,
		retry_interval_ms BIGINT NOT NULL, max_retry_interval_ms BIGINT NOT NULL, create_time BIGINT NOT NULL, modify_time BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS {p}tasks (task_id VARCHAR(26) COLLATE "C" PRIMARY KEY, task_type VARCHAR(64) NOT NULL,
		task_stage VARCHAR(64) NOT NULL, status SMALLINT NOT NULL, task_context TEXT, priority INT NOT NULL, order_time BIGINT NOT NULL,
		crt_retry_num INT NOT NULL, max_retry_num INT NOT NULL, retry_interval_ms BIGINT NOT NULL, max_retry_interval_ms BIGINT NOT NULL,
		owner VARCHAR(128) NOT NULL DEFAULT '', lease VARCHAR(64) NOT NULL DEFAULT '', lease_expiry BIGINT NOT NULL DEFAULT 0,
		schedule_log JSONB NOT NULL, create_time BIGINT NOT NULL, modify_time BIGINT NOT NULL)`,
	// The claim reads only pending rows of one type in order_time order.
	`CREATE INDEX IF NOT EXISTS {p}tasks_claim ON {p}tasks (task_type, order_time) WHERE status = 1`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_lease ON {p}tasks (lease_expiry) WHERE status = 2`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_ended ON {p}tasks (modify_time) WHERE status IN (3, 4, 5)`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_list ON {p}tasks (task_type, status, task_id)`,
}, {
	// Unique tasks: one live (pending or processing) task per type and key.
	`ALTER TABLE {p}tasks ADD COLUMN IF NOT EXISTS unique_key VARCHAR(128) NOT NULL DEFAULT ''`,
	`CREATE UNIQUE INDEX IF NOT EXISTS {p}tasks_unique ON {p}tasks (task_type, unique_key) WHERE unique_key <> '' AND status IN (1, 2)`,
	`ALTER TABLE {p}task_types ADD COLUMN IF NOT EXISTS paused SMALLINT NOT NULL DEFAULT 0`,
}, {
	// Periodic types: the schedule and the last tick fired.
	`ALTER TABLE {p}task_types ADD COLUMN IF NOT EXISTS cron VARCHAR(128) NOT NULL DEFAULT '',
		ADD COLUMN IF NOT EXISTS cron_stage VARCHAR(64) NOT NULL DEFAULT '', ADD COLUMN IF NOT EXISTS cron_context TEXT,
		ADD COLUMN IF NOT EXISTS cron_last BIGINT NOT NULL DEFAULT 0`,
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
	// Every index on the table gets an entry for each new row version, and
	// hold and set each write one (a status change is never a HOT update:
	// status is in the partial indexes' predicates). (task_type, task_id)
	// over all rows took one at create, hold and set; the ended index by
	// modify_time one at set. They give way to indexes a task enters only
	// in the status they list: pending by type (at create and at a set to
	// pending, where the type index was written anyway) and ended by type
	// and status (at the final set, where the ended index was). A hold now
	// writes two index entries (the key and the lease), a final set two
	// (the key and the ended list), each one fewer. End to end, interleaved
	// (docs/notes/benchmarks-log.md, flow, eighth pass): database CPU per task
	// 45-46.5 → 42-43 µs.
	// get_task_list of a type reads the index of the status asked for, and
	// all five in id order when none is (pgListByType); processing rows,
	// at most what workers hold, come from the lease index. Pruning walks
	// the key up to the id of its cutoff time: a task created after the
	// cutoff ended after it.
	`CREATE INDEX IF NOT EXISTS {p}tasks_pending ON {p}tasks (task_type, task_id) WHERE status = 1`,
	`CREATE INDEX IF NOT EXISTS {p}tasks_ended_list ON {p}tasks (task_type, status, task_id) WHERE status IN (3, 4, 5)`,
	`DROP INDEX IF EXISTS {p}tasks_type`,
	`DROP INDEX IF EXISTS {p}tasks_ended`,
}, {
	// The schedule log as text, appended to as text (pgAppendLog): a hold
	// and a set each appended an entry with jsonb_build_object and ||,
	// which decode and re-encode the whole array, about 3.5 µs of the
	// database's time a row each; text concatenation costs about 1.5 µs
	// (both measured on 200,000 rows), and reading the log back is no
	// longer a conversion. The rewrite takes about 3 s per million tasks,
	// once, at the upgrade. The existing logs keep jsonb's rendering
	// ({"at": "…", …}, with spaces), which every reader of the log parses.
	`ALTER TABLE {p}tasks ALTER COLUMN schedule_log TYPE TEXT USING schedule_log::text`,
}, fanOutMigration(`ALTER TABLE {p}tasks ADD COLUMN IF NOT EXISTS parent_id VARCHAR(26) COLLATE "C" NOT NULL DEFAULT '',
		ADD COLUMN IF NOT EXISTS join_stage VARCHAR(64) NOT NULL DEFAULT '', ADD COLUMN IF NOT EXISTS children_open INT NOT NULL DEFAULT 0,
		ADD COLUMN IF NOT EXISTS fan_depth SMALLINT NOT NULL DEFAULT 0`),
	// Order per key and pausing a key (keys.go).
	keyMigration(`CREATE TABLE IF NOT EXISTS {p}rate_keys (task_type VARCHAR(64) NOT NULL, rate_key VARCHAR(128) NOT NULL,
		paused_until BIGINT NOT NULL DEFAULT 0, tat BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (task_type, rate_key))`,
		`ALTER TABLE {p}tasks ADD COLUMN IF NOT EXISTS sequence_key VARCHAR(128) NOT NULL DEFAULT '',
		ADD COLUMN IF NOT EXISTS rate_key VARCHAR(128) NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}task_types ADD COLUMN IF NOT EXISTS rate_limit_per_second DOUBLE PRECISION NOT NULL DEFAULT 0`), pgCountsMigration,
	// Fair shares per key (fair.go).
	fairMigration(`ALTER TABLE {p}tasks ADD COLUMN IF NOT EXISTS fairness_key VARCHAR(128) NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}task_types ADD COLUMN IF NOT EXISTS fair SMALLINT NOT NULL DEFAULT 0, ADD COLUMN IF NOT EXISTS fairness_weights TEXT`), pgCountsInline,
	{pgKeysFree}}

// pgKeysFree is the claim's key probes (keysDue) as a function: a
// keyed task is due unless its rate key is paused, or its sequence key
// has an older live task or a processing one. STABLE: it reads with the
// claim's snapshot, as the subqueries it replaces did.
const pgKeysFree = `CREATE OR REPLACE FUNCTION {p}keys_free(typ TEXT, seq TEXT, rk TEXT, ct BIGINT, id TEXT, at BIGINT) RETURNS BOOLEAN
	LANGUAGE plpgsql STABLE AS $f$
BEGIN
	IF rk <> '' AND EXISTS (SELECT 1 FROM {p}rate_keys r WHERE r.task_type = typ AND r.rate_key = rk AND r.paused_until > at) THEN
		RETURN false;
	END IF;
	IF seq <> '' AND (EXISTS (SELECT 1 FROM {p}tasks sq WHERE sq.task_type = typ AND sq.sequence_key = seq AND sq.sequence_key <> ''
			AND sq.status IN (1, 2, 6) AND (sq.create_time, sq.task_id) < (ct, id COLLATE "C"))
		OR EXISTS (SELECT 1 FROM {p}tasks sq WHERE sq.task_type = typ AND sq.sequence_key = seq AND sq.sequence_key <> '' AND sq.status = 2)) THEN
		RETURN false;
	END IF;
	RETURN true;
END $f$`

// pgCountsMigration makes the task counts (counts.go): the writes append
// the net change of each (type, stage, status) to count_deltas, which
// folds move into counts.
var pgCountsMigration = []string{
	`CREATE TABLE IF NOT EXISTS {p}counts (task_type VARCHAR(64) NOT NULL, task_stage VARCHAR(64) NOT NULL, status SMALLINT NOT NULL,
		n BIGINT NOT NULL, PRIMARY KEY (task_type, task_stage, status))`,
	`CREATE TABLE IF NOT EXISTS {p}count_deltas (id BIGSERIAL PRIMARY KEY, task_type VARCHAR(64) NOT NULL, task_stage VARCHAR(64) NOT NULL,
		status SMALLINT NOT NULL, n BIGINT NOT NULL)`,
}

// pgCountsInline drops the statement triggers that appended the deltas
// before the writes did (counts.go): a database made between the two
// versions had them, and the two together would count every change twice.
var pgCountsInline = []string{
	`DROP TRIGGER IF EXISTS {p}count_ins ON {p}tasks`,
	`DROP TRIGGER IF EXISTS {p}count_del ON {p}tasks`,
	`DROP TRIGGER IF EXISTS {p}count_upd ON {p}tasks`,
	`DROP FUNCTION IF EXISTS {p}count_ins(), {p}count_del(), {p}count_upd()`,
}

// counting: deltas folded under an advisory lock.
func (d *pgDriver) counting() countSQL {
	return countSQL{deltas: true, inline: true, sum: "SUM(n)::bigint",
		upsert: "INSERT INTO " + d.s.p + "counts (task_type, task_stage, status, n) VALUES (?, ?, ?, ?)" +
			" ON CONFLICT (task_type, task_stage, status) DO UPDATE SET n = " + d.s.p + "counts.n + EXCLUDED.n",
		tryLock: "SELECT pg_try_advisory_lock(hashtext(?))",
		lock:    "SELECT COUNT(*) = 1 FROM (SELECT pg_advisory_lock(hashtext(?))) l",
		unlock:  "SELECT pg_advisory_unlock(hashtext(?))",
		drop: []string{"DROP FUNCTION IF EXISTS {p}count_ins(), {p}count_del(), {p}count_upd()",
			"DROP FUNCTION IF EXISTS {p}keys_free(TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT)"}}
}

// pgAppendLog is appendLog with PostgreSQL's cut of the oldest entry: at
// the second {"at":, whatever separates the entries (jsonb's text has a
// space after each comma; MarshalLog's and these expressions' none).
func pgAppendLog(log, entry string) string {
	return appendLog(log, entry, "'[' || rtrim(substr("+log+", 2 + strpos(substr("+log+", 3), '{\"at\":')), ']')")
}

// pgLogEntry is one entry's JSON text; at is a timestamp's text (no
// escaping needed), worker and stage any strings.
func pgLogEntry(at, worker, stage, event string) string {
	return "'{\"at\":\"' || " + at + " || '\",\"worker\":' || to_json(" + worker + ")::text || ',\"stage\":' || to_json(" + stage + ")::text ||" +
		" ',\"event\":\"' || " + event + " || '\"}'"
}

func pgLog(event string) string {
	return pgAppendLog("schedule_log", pgLogEntry("?::text", "?::text", "task_stage", "'"+event+"'"))
}

// pgDriver is PostgreSQL's driver.
type pgDriver struct {
	s        *SQLStore
	instance string // this store's id in NOTIFY payloads
	stop     func() // ends the LISTEN connection (start)
	// q are the statements only this driver runs, $n placeholders.
	q struct {
		hold, holdNoLog, holdMany, holdManyNoLog, holdKeys, holdKeysNoLog, lockSel, writeBatch, insert, setFast, setFastMoves, heartbeat string
	}
}

func (d *pgDriver) name() string                { return "postgres" }
func (d *pgDriver) migrations() [][]string      { return pgMigrations }
func (d *pgDriver) rebind(q string) string      { return rebindDollar(q) }
func (d *pgDriver) keys() keySQL                { return keySQL{seqLive, seqProc, ratePending, "keys_free"} }
func (d *pgDriver) fair() fairSQL               { return fairPartial }
func (d *pgDriver) logExpr(event string) string { return pgLog(event) }

func (d *pgDriver) retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// build: one statement per batch call, arrays for batches (one prepared
// text for any size), RETURNING, NOTIFY in the same statement.
func (d *pgDriver) build(q *queries, b qparts) {
	t := b.t
	// The claimed rows are found again by their physical address (ctid, a
	// TID scan) rather than by key: the locking read holds each row for
	// this statement, so nothing can move it between the two, and the
	// update skips the key's B-tree descent, about 0.8 µs of the
	// database's time a row (200,000 rows, one backend: 11.1-11.4 →
	// 10.3-10.7 µs a hold's row).
	hold := func(due string) string {
		if b.redisLock {
			// The lock serialises holds; the status guard is the owner CAS that
			// keeps a hold correct even if the lock expired mid-claim. Without
			// a row lock in the read, the rows are found again by key.
			return "WITH due AS (SELECT task_id FROM " + t + " WHERE " + due + "), u AS (UPDATE " + t + " t SET " + b.set +
				" FROM due WHERE t.task_id = due.task_id AND t.status = " + b.pending + " RETURNING "
		}
		return "WITH due AS (SELECT ctid AS rid FROM " + t + " WHERE " + due + " FOR UPDATE SKIP LOCKED), u AS (UPDATE " + t + " t SET " + b.set +
			" FROM due WHERE t.ctid = due.rid RETURNING "
	}
	// A claim (claim is its text up to RETURNING, inside the CTE u)
	// appends its move of the counts, pending to processing per type and
	// stage, in the same statement: the claimed rows grouped once, in the
	// "C" collation (a sort, if the planner picks one, without strcoll),
	// each group giving two deltas.
	counted := func(claim string, log bool) string {
		return rebindDollar(claim + colsOf("t", log) + ")," +
			" c AS (INSERT INTO " + b.p + "count_deltas (task_type, task_stage, status, n) SELECT g.task_type, g.task_stage, x.st, x.n * g.k" +
			" FROM (SELECT task_type COLLATE \"C\" AS task_type, task_stage COLLATE \"C\" AS task_stage, COUNT(*) AS k FROM u GROUP BY 1, 2) g" +
			" CROSS JOIN (VALUES (" + b.pending + ", -1), (" + b.proc + ", 1)) AS x(st, n))" +
			" SELECT * FROM u")
	}
	d.q.hold, d.q.holdNoLog = counted(hold(b.due), true), counted(hold(b.due), false)
	// A coalesced claim (coalesce): the k-th row claimed takes the k-th
	// slot's owner, lease, expiry and times, from arrays of one entry a
	// task the holds asked for.
	if !b.redisLock {
		many := "WITH due AS (SELECT ctid AS rid FROM " + t + " WHERE " + b.due + " FOR UPDATE SKIP LOCKED)," +
			" n AS (SELECT rid, row_number() OVER () AS i FROM due)," +
			" h AS (SELECT * FROM unnest(?::text[], ?::text[], ?::bigint[], ?::bigint[], ?::text[]) WITH ORDINALITY AS h(owner, lease, le, mt, at, i))," +
			" u AS (UPDATE " + t + " t SET status = " + b.proc + ", owner = h.owner, lease = h.lease, lease_expiry = h.le, modify_time = h.mt, schedule_log = " +
			pgAppendLog("schedule_log", pgLogEntry("h.at", "h.owner", "task_stage", "'"+flow.EventHeld+"'")) +
			" FROM n JOIN h ON h.i = n.i WHERE t.ctid = n.rid RETURNING "
		d.q.holdMany, d.q.holdManyNoLog = counted(many, true), counted(many, false)
	}
	// The keys of a fair hold, each with its share: a lateral join runs
	// the claim's read once per key, in one statement. The rows are found
	// again by an array of their addresses (a TID scan): joined to the
	// read, whose size the planner cannot know, they were hashed against
	// a scan of the table.
	keys := "WITH u AS (UPDATE " + t + " t SET " + b.set + " WHERE t.ctid = ANY(ARRAY(SELECT x.rid FROM unnest(?::text[], ?::int[]) AS k(key, n)" +
		" CROSS JOIN LATERAL (SELECT ctid AS rid FROM " + t + " WHERE " + b.dueKeys + " FOR UPDATE SKIP LOCKED) x)) RETURNING "
	if b.redisLock {
		keys = "WITH u AS (UPDATE " + t + " t SET " + b.set + " WHERE t.task_id = ANY(ARRAY(SELECT x.task_id FROM unnest(?::text[], ?::int[]) AS k(key, n)" +
			" CROSS JOIN LATERAL (SELECT task_id FROM " + t + " WHERE " + b.dueKeys + ") x)) AND t.status = " + b.pending + " RETURNING "
	}
	d.q.holdKeys, d.q.holdKeysNoLog = counted(keys, true), counted(keys, false)
	d.q.lockSel = rebindDollar("SELECT " + b.cols + " FROM " + t + " WHERE task_id = ANY(?::text[]) ORDER BY task_id FOR UPDATE")
	d.q.writeBatch = rebindDollar("WITH u AS (UPDATE " + t + " t SET task_stage = v.stage, status = v.status, task_context = v.ctx, order_time = v.ot," +
		" crt_retry_num = v.crt, owner = v.owner, lease = v.lease, lease_expiry = v.le, schedule_log = v.log, modify_time = v.mt" +
		" FROM unnest(?::text[], ?::text[], ?::smallint[], ?::text[], ?::bigint[], ?::int[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::bigint[])" +
		" AS v(id, stage, status, ctx, ot, crt, owner, lease, le, log, mt) WHERE t.task_id = v.id RETURNING t.task_type, t.status)" +
		" SELECT pg_notify(?, ? || task_type) FROM (SELECT DISTINCT task_type FROM u WHERE status = " + b.pending + ") d")
	d.q.insert = rebindDollar(pgInsert(t))
	d.q.setFast, d.q.setFastMoves = rebindDollar(pgSetFast(t, false)), rebindDollar(pgSetFast(t, true))
	d.q.heartbeat = rebindDollar("UPDATE " + t + " t SET lease_expiry = ? + ty.max_processing_ms * 1000, modify_time = ? FROM " + b.p + "task_types ty" +
		" WHERE ty.task_type = t.task_type AND t.owner = ? AND t.status = " + b.proc + " RETURNING t.task_id, t.lease, t.lease_expiry")
	q.rescueSel = "SELECT " + b.cols + " FROM " + t + " WHERE status = " + b.proc + " AND lease_expiry < ? ORDER BY lease_expiry LIMIT ? FOR UPDATE SKIP LOCKED"
	q.prune = "DELETE FROM " + t + " WHERE task_id IN (SELECT task_id FROM " + t + " WHERE task_id < ? AND status IN (" + b.ended + ") AND modify_time < ?" +
		" ORDER BY task_id LIMIT ?)"
	q.upsertType = upsertExcluded(b)
	q.insertUnique = q.insertOne + " ON CONFLICT DO NOTHING"
	q.workerSel += " FOR UPDATE"
}

// pruneArgs: the prune walks the key up to the id of its cutoff time (a
// task created after the cutoff ended after it), then the shared two.
func (d *pgDriver) pruneArgs(before time.Time, limit int) []any {
	return []any{flow.TaskIDFloor(before), us(before), limit}
}

// listQuery: of one type, pgListByType; else the shared query.
func (d *pgDriver) listQuery(f ListFilter) (string, []any) {
	if f.TaskType != "" {
		return pgListByType(d.s.p+"tasks", d.s.q.cols, f)
	}
	return listQuery(d.s.p+"tasks", d.s.q.cols, f)
}

func (d *pgDriver) tx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return d.s.retryTx(ctx, fn)
}

func (d *pgDriver) write(ctx context.Context, fn func(context.Context, execQuerier) error) error {
	return fn(ctx, d.s.w)
}

// lockMigrations takes an advisory lock for the migration.
func (d *pgDriver) lockMigrations(ctx context.Context, key string, fn func(execQuerier) error) error {
	return d.s.lockMigrationsOn(ctx, key, fn, func(ctx context.Context, c *sql.Conn, key string) (func(), error) {
		if _, err := c.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", key); err != nil {
			return nil, err
		}
		return func() { c.ExecContext(context.Background(), "SELECT pg_advisory_unlock(hashtext($1))", key) }, nil
	})
}

// hold claims in one statement: UPDATE ... FROM (SELECT ... FOR UPDATE
// SKIP LOCKED) RETURNING.
func (d *pgDriver) hold(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	return d.s.claimInTurn(ctx, p, d.claim, d.claimMany)
}

func (d *pgDriver) claim(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	q := d.q.hold
	if p.OmitLog {
		q = d.q.holdNoLog
	}
	return d.claimed(ctx, p.Limit, q, holdArgs(p, true)...)
}

// claimed runs a claim statement q and reads back up to limit held tasks.
func (d *pgDriver) claimed(ctx context.Context, limit int, q string, args ...any) ([]flow.Record, error) {
	rows, err := d.s.w.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	out, logs, err := scanHeld(rows, limit)
	if err != nil {
		return nil, err
	}
	return d.s.parseHeldLogs(out, logs), nil
}

// claimMany claims for several holds in one statement (coalesce).
func (d *pgDriver) claimMany(ctx context.Context, ps []HoldParams) ([]flow.Record, error) {
	if len(ps) == 1 {
		return d.claim(ctx, ps[0])
	}
	all := claimAll(ps)
	q := d.q.holdMany
	if all.OmitLog {
		q = d.q.holdManyNoLog
	}
	owners, leases, expiries, nows, ats := slots(ps)
	return d.claimed(ctx, all.Limit, q, append(dueArgs(all), owners, leases, expiries, nows, ats)...)
}

// holdKeys claims the keys' shares in one statement (the lateral join).
func (d *pgDriver) holdKeys(ctx context.Context, p HoldParams, keys []string, limits []int) ([]flow.Record, error) {
	p.Limit = 0
	ns := make([]int32, len(limits))
	for i, n := range limits {
		ns[i] = int32(n)
		p.Limit += n
	}
	return d.s.claimInTurn(ctx, p, func(ctx context.Context, p HoldParams) ([]flow.Record, error) {
		q := d.q.holdKeys
		if p.OmitLog {
			q = d.q.holdKeysNoLog
		}
		args := append(holdArgs(p, false)[:6], keys, ns, p.TaskType, us(p.Now), p.TaskType, us(p.Now)) // SET's, then the read's
		return d.claimed(ctx, p.Limit, q, args...)
	}, nil)
}

func (d *pgDriver) lockRows(ctx context.Context, tx *sql.Tx, ids []string) (*sql.Rows, error) {
	return tx.QueryContext(ctx, d.q.lockSel, ids)
}

// writeRows writes the batch as arrays in one statement, which NOTIFYs.
func (d *pgDriver) writeRows(ctx context.Context, tx *sql.Tx, recs []*flow.Record) error {
	n := len(recs)
	ids, stages, owners, leases, logs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	statuses, crts := make([]int32, n), make([]int32, n)
	ctxs := make([]*string, n)
	ots, les, mts := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range recs {
		ids[i], stages[i], owners[i], leases[i], logs[i] = r.TaskID, r.TaskStage, r.Owner, r.Lease, string(flow.MarshalLog(r.ScheduleLog))
		statuses[i], crts[i] = int32(r.Status), int32(r.CrtRetryNum)
		if r.TaskContext != nil {
			c := string(r.TaskContext)
			ctxs[i] = &c
		}
		ots[i], mts[i] = us(r.OrderTime), us(r.ModifyTime)
		if r.LeaseExpiry != nil {
			les[i] = us(*r.LeaseExpiry)
		}
	}
	_, err := tx.ExecContext(ctx, d.q.writeBatch, ids, stages, statuses, ctxs, ots, crts, owners, leases, les, logs, mts, d.channel(), d.instance+":")
	return err
}

func (d *pgDriver) notify(ctx context.Context, tx txRunner, types ...string) error {
	for _, typ := range types {
		if _, err := tx.exec(ctx, "SELECT pg_notify($1, $2)", d.channel(), d.instance+":"+typ); err != nil {
			return err
		}
	}
	return nil
}

func (d *pgDriver) heartbeat(ctx context.Context, workerID string, now time.Time) ([]flow.HeldLease, error) {
	return d.s.heartbeatReturning(ctx, d.q.heartbeat, workerID, now)
}

// pgListByType is get_task_list of one type: a query per status, each
// answered from the index that holds that status's rows in id order (the
// statuses are literals, so the planner can match the partial indexes),
// merged by id when no status is asked for.
func pgListByType(t, cols string, f ListFilter) (string, []any) {
	one := func(st flow.Status) (string, []any) {
		q := "SELECT " + cols + " FROM " + t + " WHERE task_type = ? AND status = " + sqlStatus(st)
		if st.Ended() {
			q += " AND status IN (" + sqlStatus(flow.StatusSuccess, flow.StatusFailed, flow.StatusCancelled) + ")"
		}
		args := []any{f.TaskType}
		if f.TaskStage != "" {
			q, args = q+" AND task_stage = ?", append(args, f.TaskStage)
		}
		if f.After != "" {
			q, args = q+" AND task_id > ?", append(args, f.After)
		}
		return q + " ORDER BY task_id LIMIT ?", append(args, f.Limit)
	}
	if f.Status != 0 {
		return one(f.Status)
	}
	var parts []string
	var args []any
	for _, st := range flow.AllStatuses() {
		q, a := one(st)
		parts, args = append(parts, "("+q+")"), append(args, a...)
	}
	return "SELECT * FROM (" + strings.Join(parts, " UNION ALL ") + ") l ORDER BY task_id LIMIT ?", append(args, f.Limit)
}

// upsertExcluded is register_task's upsert for PostgreSQL and SQLite.
// cron_last restarts only when the cron changes.
func upsertExcluded(b qparts) string {
	tt := b.p + "task_types"
	set := []string{"cron_last = CASE WHEN " + tt + ".cron = excluded.cron THEN " + tt + ".cron_last ELSE excluded.cron_last END", "cron = excluded.cron"}
	for _, c := range b.typeUpd {
		set = append(set, c+" = excluded."+c)
	}
	return b.typeIns + " ON CONFLICT (task_type) DO UPDATE SET " + strings.Join(set, ", ")
}

// rebindDollar turns ? into $1, $2, ... (PostgreSQL's placeholders).
func rebindDollar(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// channel is the LISTEN/NOTIFY channel of the table prefix.
func (d *pgDriver) channel() string { return "fulcrum_flow_" + d.s.p }

func openPostgres(ctx context.Context, dsn string) (*SQLStore, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, errors.New("store: postgres dsn: " + err.Error())
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, errors.New("store: connect to postgres " + redact(dsn) + ": " + err.Error())
	}
	var id [6]byte
	rand.Read(id[:])
	d := &pgDriver{instance: hex.EncodeToString(id[:])}
	d.s = &SQLStore{drv: d, w: db, r: db, groupSets: true}
	return d.s, nil
}

// start keeps one connection LISTENing so that tasks made due by other
// servers wake this server's long polls. Our own notifications are
// recognised by the instance id and skipped: OnDue already ran for them.
func (d *pgDriver) start(_ context.Context, dsn string) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	ready := make(chan error, 1)
	go func() {
		defer wg.Done()
		first := true
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := d.listen(ctx, dsn, func() {
				if first {
					ready <- nil
					first = false
				} else {
					d.s.onDue("") // we may have missed notifications while away
				}
				backoff = 100 * time.Millisecond
			})
			if ctx.Err() != nil {
				break
			}
			if first {
				ready <- err
				return
			}
			d.s.log.Warn("flow store: LISTEN connection lost; reconnecting", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
	if err := <-ready; err != nil {
		cancel()
		wg.Wait()
		return errors.New("store: postgres LISTEN: " + err.Error())
	}
	d.stop = func() { cancel(); wg.Wait() }
	return nil
}

func (d *pgDriver) close() error {
	if d.stop != nil {
		d.stop()
	}
	return nil
}

func (d *pgDriver) listen(ctx context.Context, dsn string, up func()) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel()}.Sanitize()); err != nil {
		return err
	}
	up()
	mine := d.instance + ":"
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if strings.HasPrefix(n.Payload, mine) {
			continue
		}
		if _, typ, ok := strings.Cut(n.Payload, ":"); ok {
			d.s.onDue(typ)
		}
	}
}

// pgInsert is the batch create: the columns as arrays, each but the id
// and the context with the value every row shares beside it. A column
// whose rows all share one value (in a create batch all but two do:
// status, times, retry settings, the empty lease, mostly type, stage
// and log) travels as an empty array, which unnest pads with NULLs, and
// COALESCE puts the shared value in. The arrays were 85 % of a 500-task
// statement's 137 KB. pgx grows its parameter and message buffers afresh
// for every statement (it shrinks them after each), so those bytes were a
// quarter of the process's garbage end to end; PostgreSQL decoded them
// all too.
//
// Arguments: the 21 columns' arrays in cols order, then the shared
// values of the 19 that have one (every column but task_id and
// task_context), then the NOTIFY channel and payload prefix.
func pgInsert(t string) string {
	types := []string{"text", "text", "text", "smallint", "text", "int", "bigint", "int", "int", "bigint", "bigint", "text", "text", "bigint", "text", "bigint", "bigint", "text", "text", "text", "text"}
	names := strings.Split(cols, ", ")
	arrays, sel := make([]string, len(types)), make([]string, len(types))
	for i, ty := range types {
		arrays[i] = "?::" + ty + "[]"
		switch names[i] {
		case "task_id", "task_context":
			sel[i] = "v." + names[i]
		}
	}
	for i, ty := range types { // the shared values' placeholders follow the arrays'
		if sel[i] == "" {
			sel[i] = "COALESCE(v." + names[i] + ", ?::" + ty + ")"
		}
	}
	return "WITH v AS (SELECT * FROM unnest(" + strings.Join(arrays, ", ") + ") AS v(" + cols + "))," +
		" ins AS (INSERT INTO " + t + " (" + cols + ") SELECT " + strings.Join(sel, ", ") + " FROM v RETURNING task_type, task_stage, status)," +
		" c AS (INSERT INTO " + strings.TrimSuffix(t, "tasks") + "count_deltas (task_type, task_stage, status, n)" +
		" SELECT task_type COLLATE \"C\", task_stage COLLATE \"C\", status, COUNT(*) FROM ins GROUP BY 1, 2, 3)" +
		" SELECT pg_notify(?, ? || task_type) FROM (SELECT DISTINCT task_type FROM ins) d"
}

// createBatch creates a batch with one statement (pgInsert), and NOTIFYs.
func (d *pgDriver) createBatch(ctx context.Context, recs []recordT) error {
	n := len(recs)
	ids, ctxs := make([]string, n), make([]*string, n)
	for i := range recs {
		ids[i] = recs[i].TaskID
		if c := recs[i].TaskContext; c != nil {
			cs := string(c)
			ctxs[i] = &cs
		}
	}
	r0 := &recs[0]
	log0 := r0.ScheduleLog
	logs, logShared := shared(recs, func(r *recordT) string { return string(marshalLog(r.ScheduleLog)) },
		func(r *recordT) bool { return sameLog(r.ScheduleLog, log0) })
	str := func(f func(r *recordT) string) ([]string, string) {
		return shared(recs, f, func(r *recordT) bool { return f(r) == f(r0) })
	}
	i32 := func(f func(r *recordT) int32) ([]int32, int32) {
		return shared(recs, f, func(r *recordT) bool { return f(r) == f(r0) })
	}
	i64 := func(f func(r *recordT) int64) ([]int64, int64) {
		return shared(recs, f, func(r *recordT) bool { return f(r) == f(r0) })
	}
	types, typ := str(func(r *recordT) string { return r.TaskType })
	stages, stage := str(func(r *recordT) string { return r.TaskStage })
	statuses, status := i32(func(r *recordT) int32 { return int32(r.Status) })
	prios, prio := i32(func(r *recordT) int32 { return int32(r.Priority) })
	ots, ot := i64(func(r *recordT) int64 { return us(r.OrderTime) })
	crts, crt := i32(func(r *recordT) int32 { return int32(r.CrtRetryNum) })
	maxrs, maxr := i32(func(r *recordT) int32 { return int32(r.MaxRetryNum) })
	ris, ri := i64(func(r *recordT) int64 { return r.RetryIntervalMS })
	mris, mri := i64(func(r *recordT) int64 { return r.MaxRetryIntervalMS })
	owners, owner := str(func(r *recordT) string { return r.Owner })
	leases, lease := str(func(r *recordT) string { return r.Lease })
	les, le := []int64{}, int64(0) // a created task holds no lease
	cts, ct := i64(func(r *recordT) int64 { return us(r.CreateTime) })
	mts, mt := i64(func(r *recordT) int64 { return us(r.ModifyTime) })
	keys, key := str(func(r *recordT) string { return r.UniqueKey })
	seqs, seq := str(func(r *recordT) string { return r.SequenceKey })
	rates, rate := str(func(r *recordT) string { return r.RateKey })
	fairs, fair := str(func(r *recordT) string { return r.FairnessKey })
	_, err := d.s.w.ExecContext(ctx, d.q.insert,
		ids, types, stages, statuses, ctxs, prios, ots, crts, maxrs, ris, mris, owners, leases, les, logs, cts, mts, keys, seqs, rates, fairs,
		typ, stage, status, prio, ot, crt, maxr, ri, mri, owner, lease, le, logShared, ct, mt, key, seq, rate, fair,
		d.channel(), d.instance+":")
	return err
}

// shared returns a batch's column for pgInsert: when every row is like the
// first (same reports it), an empty array and the first row's value;
// otherwise every row's value.
func shared[T any](recs []recordT, val func(*recordT) T, same func(*recordT) bool) ([]T, T) {
	first := val(&recs[0])
	for i := 1; i < len(recs); i++ {
		if !same(&recs[i]) {
			all := make([]T, len(recs))
			for k := range recs {
				all[k] = val(&recs[k])
			}
			return all, first
		}
	}
	return []T{}, first
}

// sharedValue is shared for a column already made: an empty array and
// the value when every element is the first, else the column as it is.
func sharedValue[T comparable](xs []T) ([]T, T) {
	if len(xs) == 0 {
		var zero T
		return xs, zero
	}
	for _, x := range xs[1:] {
		if x != xs[0] {
			return xs, xs[0]
		}
	}
	return xs[:0], xs[0]
}

// sameLog reports whether two schedule logs hold the same entries.
func sameLog(a, b []flow.LogEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if !x.At.Equal(y.At) || x.At.Location() != y.At.Location() || x.Worker != y.Worker || x.Stage != y.Stage || x.Event != y.Event || x.Error != y.Error {
			return false
		}
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
// column); now, log time, NOTIFY channel, NOTIFY payload prefix. Both
// texts (moves or not) take the same arguments.
//
// moves: the batch may move a task to another stage (a request to pending
// with a task_stage). A batch that cannot (success, failed, pending in
// place: what workers send almost always) gets a text without the stage
// expressions and without reading the old stages (o): with o, v is read
// twice, so PostgreSQL materialises it instead of planning the UPDATE on
// the unnest, and the counts' deltas came from a join, a UNION ALL and a
// sort. With the grouping below (and the claim's and create's), end to
// end on PostgreSQL: the database's CPU a task 48.5 → 45.5 µs, 1.25 →
// 1.09 of 221fa8e's (before the features), medians of 20 interleaved
// rounds (docs/notes/benchmarks-log.md, issue 37, branch h37pg).
func pgSetFast(table string, moves bool) string {
	pending, proc, success := sqlStatus(flow.StatusPending), sqlStatus(flow.StatusProcessing), sqlStatus(flow.StatusSuccess)
	stage, o, set := "t.task_stage", "", ""
	if moves {
		stage = "(CASE WHEN v.st = " + pending + " AND v.stage <> '' THEN v.stage ELSE t.task_stage END)"
		// The stages before, of the tasks the set may move to another
		// stage: the count they leave is their old stage's, and RETURNING
		// shows only the new one. A set to success or failed reads none.
		o = " o AS (SELECT task_id, task_stage FROM " + table + " WHERE task_id = ANY(ARRAY(SELECT id FROM v WHERE st = " + pending + " AND stage <> ''))),"
		set = " task_stage = " + stage + "," +
			" crt_retry_num = CASE WHEN v.st = " + pending + " AND v.stage <> '' AND v.stage <> t.task_stage THEN 0 ELSE t.crt_retry_num END,"
	}
	// The counts' deltas: each task leaves processing at its old stage and
	// enters its new status at its new one. Grouped in the "C" collation
	// (bytes, as the default collation's equality is) so that a sort, if
	// the planner picks one, does not call strcoll.
	deltas := " SELECT g.task_type, g.task_stage, x.st, x.n FROM (SELECT task_type COLLATE \"C\" AS task_type, task_stage COLLATE \"C\" AS task_stage, status, COUNT(*) AS k" +
		" FROM u GROUP BY 1, 2, 3) g CROSS JOIN LATERAL (VALUES (" + proc + "::smallint, -g.k), (g.status, g.k)) AS x(st, n)"
	if moves {
		deltas = " SELECT task_type, task_stage, status, SUM(n) FROM (SELECT u.task_type COLLATE \"C\" AS task_type, COALESCE(o.task_stage, u.task_stage) COLLATE \"C\" AS task_stage, " + proc + " AS status, -1 AS n" +
			" FROM u LEFT JOIN o ON o.task_id = u.task_id UNION ALL SELECT task_type COLLATE \"C\", task_stage COLLATE \"C\", status, 1 FROM u) x" +
			" GROUP BY task_type, task_stage, status HAVING SUM(n) <> 0"
	}
	return "WITH v AS (SELECT id, COALESCE(lease, ?::text) AS lease, COALESCE(st, ?::smallint) AS st, COALESCE(stage, ?::text) AS stage, ctx, COALESCE(ot, ?::bigint) AS ot" +
		" FROM unnest(?::text[], ?::text[], ?::smallint[], ?::text[], ?::text[], ?::bigint[]) AS v(id, lease, st, stage, ctx, ot))," + o +
		" u AS (UPDATE " + table + " t SET status = v.st," + set +
		" order_time = CASE WHEN v.st = " + pending + " THEN v.ot ELSE t.order_time END," +
		" task_context = COALESCE(v.ctx, t.task_context), owner = '', lease = '', lease_expiry = 0, modify_time = ?," +
		" schedule_log = " + pgAppendLog("t.schedule_log", pgLogEntry("?::text", "t.owner", stage,
		"CASE v.st WHEN "+pending+" THEN '"+flow.EventPending+"' WHEN "+success+" THEN '"+flow.EventSuccess+"' ELSE '"+flow.EventFailed+"' END")) +
		" FROM v WHERE t.task_id = v.id AND t.status + 0 = " + proc + " AND t.lease = v.lease AND t.lease <> '' AND length(t.parent_id) <> 26" +
		" RETURNING t.task_id, t.task_type, t.status, t.task_stage)," +
		" c AS (INSERT INTO " + strings.TrimSuffix(table, "tasks") + "count_deltas (task_type, task_stage, status, n)" + deltas + ")" +
		// "length(parent_id) <> 26" leaves children (a parent's id is 26
		// characters) to the general path, which settles their parents.
		// Written as "parent_id = ''" it cost a seq scan a batch: the
		// planner's default guess for an equality (0.5 %) made the table
		// look small enough to scan and hash (end to end 8,400 → 1,240
		// tasks/s); "<>" has the guess 99.5 %, and the plan stays.
		// "status + 0" keeps the planner off the partial index of processing
		// rows (status = 2): with few processing rows in its statistics it
		// would hash-join over all of them instead of looking up 100 keys.
		// An uncorrelated subquery runs once, when the first row is out:
		// a NOTIFY per type that got pending tasks.
		" SELECT u.task_id, u.task_type, u.status, (SELECT count(pg_notify(?, ? || d.task_type)) FROM (SELECT DISTINCT task_type FROM u WHERE status = " + pending + ") d) FROM u"
}

// setMoves reports whether a set batch may move a task to another stage
// (pgSetFast): a request to pending that names a stage.
func setMoves(c setCols) bool {
	for i, st := range c.sts {
		if flow.Status(st) == flow.StatusPending && c.stages[i] != "" {
			return true
		}
	}
	return false
}

// setFast: one statement is one transaction, so a deadlock (a rescue or
// cancel locking the same rows in another order) aborts all of it and a
// retry is safe.
func (d *pgDriver) setFast(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) (done, pending map[string]bool, ok bool, err error) {
	if !fastSettable(reqs) {
		return nil, nil, false, nil
	}
	c := setColumns(reqs, now)
	done, pending = make(map[string]bool, len(reqs)), map[string]bool{}
	for attempt := 0; attempt < 5; attempt++ {
		err = d.setFastOnce(ctx, done, pending, c, now)
		if err == nil || !d.retryable(err) || ctx.Err() != nil {
			break
		}
		clear(done)
		clear(pending)
	}
	return done, pending, true, err
}

func (d *pgDriver) setFastOnce(ctx context.Context, done, pending map[string]bool, c setCols, now time.Time) error {
	leases, lease := sharedValue(c.leases)
	sts, st := sharedValue(c.sts)
	stages, stage := sharedValue(c.stages)
	ots, ot := sharedValue(c.ots)
	q := d.q.setFast
	if setMoves(c) {
		q = d.q.setFastMoves
	}
	rows, err := d.s.w.QueryContext(ctx, q, lease, st, stage, ot, c.ids, leases, sts, stages, c.ctxs, ots, us(now), logAt(now), d.channel(), d.instance+":")
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

// CreatePgx is Create for a pgx transaction (PostgreSQL).
func (c *TxCreator) CreatePgx(ctx context.Context, tx pgx.Tx, tasks []flow.NewTask) (*flow.CreateTaskResponse, error) {
	if _, ok := c.s.drv.(*pgDriver); !ok {
		return nil, fmt.Errorf("store: a pgx transaction needs the postgres dialect, not %s", c.s.drv.name())
	}
	return c.create(ctx, pgxTx{tx}, tasks)
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) queryRow(ctx context.Context, q string, args ...any) scanner {
	return t.tx.QueryRow(ctx, q, args...)
}
