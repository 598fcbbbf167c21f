package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// SQLStore is the Store for all three databases; its driver supplies what
// differs (see driver).
type SQLStore struct {
	drv   driver
	w     *sql.DB // writes (SQLite: one connection)
	r     *sql.DB // reads (the same pool except on SQLite)
	p     string  // table prefix
	lock  Locker
	onDue func(string)
	log   *slog.Logger
	q     queries
	// claims: task type -> chan struct{} (capacity 1), this store's large
	// holds of a type, one at a time (see claimInTurn).
	claims sync.Map
	// holdGroups: task type (and OmitLog) -> *group, this store's small
	// holds of a type, coalesced (see coalesce).
	holdGroups sync.Map
	// sets, when groupSets, coalesces small SetTasks calls (see SetTasks).
	sets      group[setIn, []error]
	groupSets bool
	// countStmt is the counts' upsert prepared on the writer, where the
	// writes keep the counts (SQLite; see count).
	countStmt *sql.Stmt
	// fair: task type -> *fairState, this store's shares of a fair type.
	fair sync.Map
}

// Dialect names the database: "sqlite", "postgres" or "mysql".
func (s *SQLStore) Dialect() string { return s.drv.name() }

// DB is the write pool, for tests and tools.
func (s *SQLStore) DB() *sql.DB { return s.w }

// TablePrefix is the prefix of the store's tables.
func (s *SQLStore) TablePrefix() string { return s.p }

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_]{0,40}$`)

// Open connects to the database named by dsn, creates or migrates the
// schema (safely when several servers start at once) and returns the store.
//
//	sqlite://PATH                     (file created if missing; ?synchronous=normal to relax fsync)
//	postgres://user@host:port/db?...  (or postgresql://)
//	mysql://user:pass@tcp(host:port)/db?...
func Open(ctx context.Context, dsn string, opts Options) (*SQLStore, error) {
	if opts.TablePrefix == "" {
		opts.TablePrefix = "flow_"
	}
	if !prefixRE.MatchString(opts.TablePrefix) {
		return nil, fmt.Errorf("store: table prefix %q: use at most 40 letters, digits and _", opts.TablePrefix)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OnDue == nil {
		opts.OnDue = func(string) {}
	}
	var open func(context.Context, string) (*SQLStore, error)
	for _, d := range drivers {
		for _, scheme := range d.schemes {
			if strings.HasPrefix(dsn, scheme) {
				open = d.open
			}
		}
	}
	if open == nil {
		return nil, fmt.Errorf("store: db %q: want sqlite://PATH, postgres://... or mysql://...%s", redact(dsn), Suggest(dsn))
	}
	s, err := open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	s.p, s.lock, s.onDue, s.log = opts.TablePrefix, opts.HoldLock, opts.OnDue, opts.Logger
	s.q = buildQueries(s.drv, s.p, s.lock != nil)
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.drv.start(ctx, dsn); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.countsFill(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Suggest is a hint for a db name with no scheme: a bare path is most
// likely a SQLite file.
func Suggest(dsn string) string {
	if dsn == "" || strings.Contains(dsn, "://") {
		return ""
	}
	return "; for a SQLite file write sqlite://" + dsn
}

// redact hides a password in a DSN for error messages.
func redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				return dsn[:i+3] + rest[:c] + ":***" + rest[at:]
			}
		}
	}
	return dsn
}

// Close stops background work and closes the pools.
func (s *SQLStore) Close() error {
	errs := []error{s.drv.close(), s.w.Close()}
	if s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	return errors.Join(errs...)
}

const cols = "task_id, task_type, task_stage, status, task_context, priority, order_time, crt_retry_num, max_retry_num, retry_interval_ms, max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time, unique_key, sequence_key, rate_key, fairness_key"

// ncols is how many columns cols names.
const ncols = 21

// sqlStatus renders statuses for SQL text from the flow constants.
func sqlStatus(sts ...flow.Status) string {
	parts := make([]string, len(sts))
	for i, st := range sts {
		parts[i] = strconv.Itoa(int(st))
	}
	return strings.Join(parts, ", ")
}

// appendLog is log (a schedule-log column, minified JSON text) with entry
// (an expression making one entry's JSON text) appended by text surgery:
// the closing bracket cut and ",entry]" added, the oldest entry dropped
// (dropFirst: the log without it and without its closing bracket) when
// the log is full. An empty column counts as an empty log; entry appears
// once, so positional parameters inside it bind once.
//
// Every entry begins with {"at": (MarshalLog's, jsonb's and the SQL
// writers' first key), so counting that string counts entries. Counting
// copies the log (replace), so a log shorter than any full one skips it:
// an entry is at least 40 characters ({"at":, a quoted RFC 3339 time of
// 22 or more, ,"event":, a quoted event, and }), and most logs are a few
// entries long.
func appendLog(log, entry, dropFirst string) string {
	full := strconv.Itoa(6 * flow.ScheduleLogSize)                            // len(`{"at":`) x entries
	short := strconv.Itoa(40*flow.ScheduleLogSize + flow.ScheduleLogSize + 1) // entries, commas and brackets of the shortest full log
	return "(CASE WHEN " + log + " IN ('[]', '') THEN '['" +
		" WHEN length(" + log + ") < " + short + " THEN rtrim(" + log + ", ']') || ','" +
		" WHEN length(" + log + ") - length(replace(" + log + ", '{\"at\":', '')) < " + full + " THEN rtrim(" + log + ", ']') || ','" +
		" ELSE " + dropFirst + " || ',' END) || " + entry + " || ']'"
}

// colsOf is the task columns, each qualified by alias when one is given;
// with log false an empty string stands in the log's place: a hold asked
// to leave the logs out (HoldParams.OmitLog) neither reads nor sends them.
func colsOf(alias string, log bool) string {
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		switch {
		case c == "schedule_log" && !log:
			parts[i] = "''"
		case alias != "":
			parts[i] = alias + "." + c
		}
	}
	return strings.Join(parts, ", ")
}

// queries are the statements the shared code runs, built once per store;
// a driver sets those whose text differs (build) and keeps its own.
type queries struct {
	cols                                                      string
	renew, cancel, get, nextDue, rescueSel, prune, upsertType string
	getType, listTypes                                        string
	insertOne, insertUnique, liveByKey, setPaused, deleteTask string
	cronLast, cronCAS                                         string
	workerSel                                                 string
	// rateKeyIns makes a rate key's row (type, key) unless it has one.
	rateKeyIns string
	// fairWalk reads a fair type's keys (fair.go).
	fairWalk string
}

// qparts are the pieces every driver's queries are built from.
type qparts struct {
	t, p     string // tasks table, table prefix
	cols     string // the task columns as selected
	set, due string // a hold's SET list and its due-task condition (ORDER BY and LIMIT included)
	dueFair  string // due for one fairness key, which it binds after the type (fair.go)
	// dueKeys is due for the key k.key, LIMIT k.n, of a lateral join over
	// the hold's keys (PostgreSQL's claim of several keys, fair.go)
	dueKeys string
	// dueOn is due with the driver's own condition (cond binds the due
	// time) and order (MySQL: a generated column, see mysql.go)
	dueOn     func(cond, order, limit string) string
	redisLock bool // holds take turns under a Redis lock: no SKIP LOCKED, a status guard instead
	// statuses rendered from the flow constants
	pending, proc, live, ended string
	// register_task's insert and the columns an update of the type sets
	typeIns string
	typeUpd []string
}

// buildQueries makes the queries every driver shares here and has the
// driver (postgres.go, mysql.go, sqlite.go) set and keep its own.
func buildQueries(d driver, p string, redisLock bool) queries {
	t := p + "tasks"
	b := qparts{t: t, p: p, cols: colsOf("", true), redisLock: redisLock,
		pending: sqlStatus(flow.StatusPending), proc: sqlStatus(flow.StatusProcessing),
		live:  sqlStatus(flow.StatusPending, flow.StatusProcessing),
		ended: sqlStatus(flow.StatusSuccess, flow.StatusFailed, flow.StatusCancelled)}
	b.set = "status = " + b.proc + ", owner = ?, lease = ?, lease_expiry = ?, modify_time = ?, schedule_log = " + d.logExpr(flow.EventHeld)
	// A paused type has nothing due. The check is part of the claim, so a
	// pause committed through any server stops every later hold; it is
	// uncorrelated, so the database evaluates it once per claim (and a
	// locking read does not lock the type row it reads).
	b.dueOn = func(cond, order, limit string) string {
		return "task_type = ? AND " + cond + " AND NOT EXISTS (SELECT 1 FROM " + p +
			"task_types WHERE task_type = ? AND paused <> 0)" + keysDue(p, t, d.keys()) + " ORDER BY " + order + " LIMIT " + limit
	}
	due := func(pending, limit string) string {
		return b.dueOn(pending+" AND order_time <= ?", "order_time", limit)
	}
	f := d.fair()
	b.due, b.dueFair = due("status = "+b.pending, "?"), due(f.pending("")+" = ? AND "+f.keyed(""), "?")
	b.dueKeys = due(f.pending("")+" = k.key AND "+f.keyed(""), "k.n")
	b.typeIns = "INSERT INTO " + p + "task_types (task_type, schedule_limit, schedule_interval_ms, max_processing_ms, max_retry_num, retry_interval_ms, max_retry_interval_ms," +
		" cron, cron_stage, cron_context, cron_last, create_time, modify_time, rate_limit_per_second, fair, fairness_weights) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	b.typeUpd = []string{"schedule_limit", "schedule_interval_ms", "max_processing_ms", "max_retry_num", "retry_interval_ms", "max_retry_interval_ms",
		"cron_stage", "cron_context", "modify_time", "rate_limit_per_second", "fair", "fairness_weights"}

	q := queries{cols: b.cols}
	q.renew = "UPDATE " + t + " SET lease_expiry = ?, modify_time = ? WHERE task_id = ? AND lease = ? AND status = " + b.proc
	q.cancel = "UPDATE " + t + " SET status = " + sqlStatus(flow.StatusCancelled) + ", owner = '', lease = '', lease_expiry = 0, modify_time = ?, schedule_log = " +
		d.logExpr(flow.EventCancelled) + " WHERE task_id = ? AND status IN (" + b.live + ") AND parent_id = ''"
	q.get = "SELECT " + q.cols + " FROM " + t + " WHERE task_id = ?"
	// ORDER BY ... LIMIT 1 rather than MIN: the first entry of the claim
	// index whatever the planner's statistics say (MIN over a freshly
	// filled table was planned as a scan of the type's pending entries).
	q.nextDue = "SELECT order_time FROM " + t + " WHERE task_type = ? AND status = " + b.pending + " ORDER BY order_time LIMIT 1"
	typeCols := "task_type, schedule_limit, schedule_interval_ms, max_processing_ms, max_retry_num, retry_interval_ms, max_retry_interval_ms, paused, cron, cron_stage, cron_context, rate_limit_per_second, fair, fairness_weights"
	q.getType = "SELECT " + typeCols + " FROM " + p + "task_types WHERE task_type = ?"
	q.listTypes = "SELECT " + typeCols + " FROM " + p + "task_types ORDER BY task_type"
	q.insertOne = "INSERT INTO " + t + " (" + cols + ") VALUES (" + in(ncols) + ")"
	q.liveByKey = "SELECT task_id FROM " + t + " WHERE task_type = ? AND unique_key = ? AND status IN (" + b.live + ")"
	q.setPaused = "UPDATE " + p + "task_types SET paused = ?, modify_time = ? WHERE task_type = ?"
	q.cronLast = "SELECT cron, cron_last FROM " + p + "task_types WHERE task_type = ?"
	q.cronCAS = "UPDATE " + p + "task_types SET cron_last = ? WHERE task_type = ? AND cron = ? AND cron_last = ?"
	// A waiting parent or a pending child would leave a fan-out that never
	// joins: cancel it first.
	q.deleteTask = "DELETE FROM " + t + " WHERE task_id = ? AND status NOT IN (" + sqlStatus(flow.StatusProcessing, flow.StatusWaiting) + ")" +
		" AND NOT (status = " + b.pending + " AND parent_id <> '')"
	q.workerSel = "SELECT " + b.cols + " FROM " + t + " WHERE owner = ? AND status = " + b.proc + " ORDER BY task_id"
	q.rateKeyIns = "INSERT INTO " + p + "rate_keys (task_type, rate_key, paused_until, tat) VALUES (?, ?, 0, 0) ON CONFLICT DO NOTHING"
	q.fairWalk = fairWalkSQL(t, d.fair())
	d.build(&q, b)
	for _, s := range []*string{&q.fairWalk, &q.renew, &q.cancel, &q.get, &q.nextDue, &q.rescueSel, &q.prune, &q.upsertType, &q.getType, &q.listTypes,
		&q.insertOne, &q.insertUnique, &q.liveByKey, &q.setPaused, &q.deleteTask, &q.cronLast, &q.cronCAS, &q.workerSel, &q.rateKeyIns} {
		*s = d.rebind(*s)
	}
	return q
}

// in makes "?, ?, ?" for n values.
func in(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func us(t time.Time) int64 { return t.UnixMicro() }

func fromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

func logAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

type scanner interface{ Scan(...any) error }

func scanRecord(sc scanner) (flow.Record, error) {
	r, log, err := scanRecordRaw(sc)
	if err != nil {
		return r, err
	}
	return r, parseRecordLog(&r, log)
}

// scanRecordRaw scans a row but leaves its schedule log unparsed, for a
// caller that reads rows where time is dear (SQLite's one writer) and
// parses after (parseRecordLog). TEXT columns scan into strings, which the
// drivers hand over without a copy.
func scanRecordRaw(sc scanner) (flow.Record, string, error) {
	var r flow.Record
	log, err := newRowScan().scan(sc, &r)
	return r, log, err
}

// rowScan scans task rows through one set of destinations, made once per
// query: Scan's arguments and the values they point to escape to the
// heap, ten allocations a row, which a hold of 500 rows made 5,000 times.
type rowScan struct {
	r                 flow.Record // the columns that scan straight into a record
	ctx               sql.NullString
	log               string
	status            int
	order, le, ct, mt int64
	dest              []any
}

func newRowScan() *rowScan {
	s := &rowScan{}
	r := &s.r
	s.dest = []any{&r.TaskID, &r.TaskType, &r.TaskStage, &s.status, &s.ctx, &r.Priority, &s.order, &r.CrtRetryNum, &r.MaxRetryNum,
		&r.RetryIntervalMS, &r.MaxRetryIntervalMS, &r.Owner, &r.Lease, &s.le, &s.log, &s.ct, &s.mt, &r.UniqueKey, &r.SequenceKey, &r.RateKey, &r.FairnessKey}
	return s
}

// scan reads one row (in cols order) into *out and returns its schedule
// log's text, unparsed.
func (s *rowScan) scan(sc scanner, out *flow.Record) (string, error) {
	if err := sc.Scan(s.dest...); err != nil {
		return "", err
	}
	*out = s.r
	out.Status = flow.Status(s.status)
	if s.ctx.Valid {
		out.TaskContext = json.RawMessage(s.ctx.String)
	}
	out.OrderTime, out.CreateTime, out.ModifyTime = fromUS(s.order), fromUS(s.ct), fromUS(s.mt)
	if s.le != 0 {
		t := fromUS(s.le)
		out.LeaseExpiry = &t
	}
	return s.log, nil
}

// parseRecordLog sets r's schedule log from its stored text.
func parseRecordLog(r *flow.Record, log string) error {
	if log == "" {
		return nil
	}
	var err error
	if r.ScheduleLog, err = parseLog([]byte(log)); err != nil {
		return fmt.Errorf("task %s: schedule_log: %w", r.TaskID, err)
	}
	return nil
}

// scanHeld reads the rows a claim returned, logs unparsed (see
// parseHeldLogs).
func scanHeld(rows *sql.Rows, limit int) ([]flow.Record, []string, error) {
	defer rows.Close()
	// A claim returns at most limit rows (at most a schedule_limit) and a
	// busy type's usually all of them: growing by doubling made a third
	// of a hold's garbage.
	out, logs := make([]flow.Record, 0, min(limit, 1024)), make([]string, 0, min(limit, 1024))
	rs := newRowScan()
	for rows.Next() {
		out = append(out, flow.Record{})
		log, err := rs.scan(rows, &out[len(out)-1])
		if err != nil {
			return nil, nil, err
		}
		logs = append(logs, log)
	}
	return out, logs, rows.Err()
}

// parseHeldLogs sets the held records' schedule logs. The claim has
// committed by now, so a log that cannot be read fails only itself: its
// task is handed out without it (and the error logged), where failing the
// hold would leave every task of the batch processing under a lease no
// worker has until the lease runs out.
func (s *SQLStore) parseHeldLogs(out []flow.Record, logs []string) []flow.Record {
	if len(out) == 0 {
		return nil
	}
	for i := range out {
		if err := parseRecordLog(&out[i], logs[i]); err != nil {
			s.log.Warn("flow store: a held task's schedule log is unreadable; handed out without it", "task_id", out[i].TaskID, "err", err)
		}
	}
	return out
}

func scanRecords(rows *sql.Rows) ([]flow.Record, error) {
	defer rows.Close()
	var out []flow.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func ctxArg(c json.RawMessage) any {
	if c == nil {
		return nil
	}
	return string(c)
}

// tx runs fn in a write transaction (see driver.tx).
func (s *SQLStore) tx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return s.drv.tx(ctx, fn)
}

// RegisterType implements Store.
func (s *SQLStore) RegisterType(ctx context.Context, t flow.TaskType, now time.Time) error {
	// cron_last starts at the registration: the first tick is the
	// schedule's next one after it. Re-registering the same cron keeps it.
	_, err := s.w.ExecContext(ctx, s.q.upsertType, t.TaskType, t.ScheduleLimit, t.ScheduleIntervalMS, t.MaxProcessingMS,
		t.MaxRetryNum, t.RetryIntervalMS, t.MaxRetryIntervalMS, t.Cron, t.CronStage, ctxArg(t.CronContext), us(now), us(now), us(now), t.RateLimitPerSecond,
		boolInt(t.Fair), weightsArg(t.FairnessWeights))
	if err != nil {
		return fmt.Errorf("register task type %s: %w", t.TaskType, err)
	}
	return nil
}

func scanType(sc scanner) (flow.TaskType, error) {
	var t flow.TaskType
	var paused, fair int
	var cctx, weights []byte
	err := sc.Scan(&t.TaskType, &t.ScheduleLimit, &t.ScheduleIntervalMS, &t.MaxProcessingMS, &t.MaxRetryNum, &t.RetryIntervalMS, &t.MaxRetryIntervalMS, &paused,
		&t.Cron, &t.CronStage, &cctx, &t.RateLimitPerSecond, &fair, &weights)
	if err != nil {
		return t, err
	}
	t.Paused, t.Fair = paused != 0, fair != 0
	if len(weights) > 0 {
		if err := json.Unmarshal(weights, &t.FairnessWeights); err != nil {
			return t, fmt.Errorf("task type %s: fairness_weights: %w", t.TaskType, err)
		}
	}
	if cctx != nil {
		t.CronContext = json.RawMessage(append([]byte(nil), cctx...))
	}
	return t, err
}

// GetType implements Store.
func (s *SQLStore) GetType(ctx context.Context, name string) (flow.TaskType, error) {
	t, err := scanType(s.r.QueryRowContext(ctx, s.q.getType, name))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("task type %q: %w", name, flow.ErrUnknownType)
	}
	if err != nil {
		return t, fmt.Errorf("get task type %s: %w", name, err)
	}
	return t, nil
}

// ListTypes implements Store.
func (s *SQLStore) ListTypes(ctx context.Context) ([]flow.TaskType, error) {
	rows, err := s.r.QueryContext(ctx, s.q.listTypes)
	if err != nil {
		return nil, fmt.Errorf("list task types: %w", err)
	}
	defer rows.Close()
	var out []flow.TaskType
	for rows.Next() {
		t, err := scanType(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// CreateTasks implements Store. Records with a unique key take a path of
// their own (row by row, in one transaction); a batch without any keeps
// the bulk insert.
func (s *SQLStore) CreateTasks(ctx context.Context, recs []flow.Record) error {
	if len(recs) == 0 {
		return nil
	}
	var err error
	if hasUniqueKey(recs) {
		err = s.createUnique(ctx, recs)
	} else {
		err = s.drv.createBatch(ctx, recs)
	}
	if err != nil {
		return fmt.Errorf("create %d tasks: %w", len(recs), err)
	}
	s.due(recs)
	return nil
}

func insertArgs(r *flow.Record) []any {
	return []any{r.TaskID, r.TaskType, r.TaskStage, int(r.Status), ctxArg(r.TaskContext), r.Priority, us(r.OrderTime),
		r.CrtRetryNum, r.MaxRetryNum, r.RetryIntervalMS, r.MaxRetryIntervalMS, r.Owner, r.Lease, int64(0),
		string(flow.MarshalLog(r.ScheduleLog)), us(r.CreateTime), us(r.ModifyTime), r.UniqueKey, r.SequenceKey, r.RateKey, r.FairnessKey}
}

func hasUniqueKey(recs []flow.Record) bool {
	for i := range recs {
		if recs[i].UniqueKey != "" {
			return true
		}
	}
	return false
}

// createUnique inserts recs in one transaction; a record whose (type,
// unique key) is held by a live (pending or processing) task gets that
// task's id and Existing instead. The unique index over live keys
// (partial on PostgreSQL and SQLite, a generated column on MySQL) makes
// this atomic across servers: a concurrent insert of the same key waits
// for the first transaction and then conflicts.
func (s *SQLStore) createUnique(ctx context.Context, recs []flow.Record) error {
	var ids []string
	var existing []bool
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, existing, err = s.insertEach(ctx, sqlTx{tx}, recs)
		return err
	})
	if err != nil {
		return err
	}
	for i := range recs {
		recs[i].TaskID, recs[i].Existing = ids[i], existing[i]
	}
	return nil
}

// insertEach inserts recs one by one in tx and returns each one's id:
// its own, or for a unique key already live that task's (existing). The
// driver notifies in tx (PostgreSQL's NOTIFY), so the commit wakes holds on
// every server.
func (s *SQLStore) insertEach(ctx context.Context, tx txRunner, recs []flow.Record) (ids []string, existing []bool, err error) {
	ids, existing = make([]string, len(recs)), make([]bool, len(recs))
	t := tally{}
	for i := range recs {
		ids[i] = recs[i].TaskID
		if recs[i].UniqueKey == "" {
			if _, err := tx.exec(ctx, s.q.insertOne, insertArgs(&recs[i])...); err != nil {
				return nil, nil, err
			}
			t[keyOf(&recs[i])]++
			continue
		}
		// The live task may end between our conflict and our look-up;
		// then the key is free and the insert is tried again.
		for attempt := 0; ; attempt++ {
			n, err := tx.exec(ctx, s.q.insertUnique, insertArgs(&recs[i])...)
			if err != nil {
				return nil, nil, err
			}
			if n == 1 {
				t[keyOf(&recs[i])]++
				break
			}
			err = tx.queryRow(ctx, s.q.liveByKey, recs[i].TaskType, recs[i].UniqueKey).Scan(&ids[i])
			if err == nil {
				existing[i] = true
				break
			}
			if !errors.Is(err, sql.ErrNoRows) || attempt == 3 {
				return nil, nil, fmt.Errorf("unique key %q of %s: %w", recs[i].UniqueKey, recs[i].TaskType, err)
			}
		}
	}
	if err := s.countTx(ctx, tx, t); err != nil {
		return nil, nil, err
	}
	if err := s.drv.notify(ctx, tx, dueTypes(recs)...); err != nil {
		return nil, nil, err
	}
	return ids, existing, nil
}

func dueTypes(recs []flow.Record) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Status == flow.StatusPending && !seen[r.TaskType] {
			seen[r.TaskType] = true
			out = append(out, r.TaskType)
		}
	}
	return out
}

// due tells OnDue which types got pending tasks.
func (s *SQLStore) due(recs []flow.Record) {
	for _, typ := range dueTypes(recs) {
		s.onDue(typ)
	}
}

// Hold implements Store.
func (s *SQLStore) Hold(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	if s.lock != nil {
		unlock, err := s.lock.Lock(ctx, s.p+"hold:"+p.TaskType)
		if err != nil {
			return nil, fmt.Errorf("hold %s: lock: %w", p.TaskType, err)
		}
		defer unlock()
	}
	var recs []flow.Record
	var err error
	if p.Fair {
		recs, err = s.holdFair(ctx, p)
	} else {
		recs, err = s.drv.hold(ctx, p)
	}
	if err == nil {
		recs, err = s.admit(ctx, p, recs)
	}
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", p.TaskType, err)
	}
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].OrderTime.Equal(recs[j].OrderTime) {
			return recs[i].OrderTime.Before(recs[j].OrderTime)
		}
		return recs[i].TaskID < recs[j].TaskID
	})
	return recs, nil
}

// lockRows loads the rows of ids under a row lock (SQLite: under the one
// writer) in task_id order, which keeps concurrent batches from deadlocking.
func (s *SQLStore) lockRows(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*flow.Record, error) {
	rows, err := s.drv.lockRows(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	recs, err := scanRecords(rows)
	if err != nil {
		return nil, err
	}
	m := make(map[string]*flow.Record, len(recs))
	for i := range recs {
		m[recs[i].TaskID] = &recs[i]
	}
	return m, nil
}

// writeRecords stores the mutable columns of recs; was[i] is the count
// recs[i] was in before the change (its key when it was read).
func (s *SQLStore) writeRecords(ctx context.Context, tx *sql.Tx, recs []*flow.Record, was []countKey) error {
	if len(recs) == 0 {
		return nil
	}
	if err := s.drv.writeRows(ctx, tx, recs); err != nil {
		return err
	}
	if !s.countsInline() {
		return nil
	}
	t := tally{}
	for i, r := range recs {
		t.move(was[i], keyOf(r))
	}
	return s.count(ctx, tx, t)
}

// setIn is one SetTasks call waiting in the set group.
type setIn struct {
	reqs []flow.SetTaskRequest
	now  time.Time
}

// SetTasks implements Store.
//
// Small calls (under serialClaim requests) go through a group commit on
// a database with a pool (PostgreSQL, MySQL): while one is being written,
// later ones wait and the next write applies all of them as one batch,
// in arrival order, as if in sequence; each call gets its own requests'
// errors. 64 one-task workers made 64 statements and commits where the
// batch makes one; those were what their holds queued behind once the
// holds were coalesced (see coalesce). The batch's time is the latest
// call's (they differ by the wait, under a statement's time).
func (s *SQLStore) SetTasks(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) ([]error, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if !s.groupSets || len(reqs) >= serialClaim {
		return s.setTasks(ctx, reqs, now)
	}
	return s.sets.do(ctx, setIn{reqs, now}, len(reqs), maxCoalesced, func(ctx context.Context, ins []setIn) ([][]error, error) {
		if len(ins) == 1 {
			errs, err := s.setTasks(ctx, ins[0].reqs, ins[0].now)
			return [][]error{errs}, err
		}
		var all []flow.SetTaskRequest
		last := ins[0].now
		for _, in := range ins {
			all = append(all, in.reqs...)
			if in.now.After(last) {
				last = in.now
			}
		}
		errs, err := s.setTasks(ctx, all, last)
		if err != nil {
			return nil, err
		}
		outs := make([][]error, len(ins))
		for i, in := range ins {
			outs[i], errs = errs[:len(in.reqs):len(in.reqs)], errs[len(in.reqs):]
		}
		return outs, nil
	})
}

func (s *SQLStore) setTasks(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) ([]error, error) {
	if hasPause(reqs) {
		if err := s.pauseKeys(ctx, reqs, now); err != nil {
			return nil, fmt.Errorf("set %d tasks: pause rate keys: %w", len(reqs), err)
		}
	}
	if done, pending, ok, err := s.drv.setFast(ctx, reqs, now); err != nil {
		return nil, fmt.Errorf("set %d tasks: %w", len(reqs), err)
	} else if ok {
		return s.setFastDone(ctx, reqs, done, pending, now)
	}
	return s.setGeneral(ctx, reqs, now)
}

// setGeneral is SetTasks's general path: lock, flow.ApplySet, write, and
// the fan-out's part (children created, parents of ended children settled).
func (s *SQLStore) setGeneral(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) ([]error, error) {
	var errs []error
	var changed []*flow.Record
	var kids []flow.Record
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		errs, changed, kids = make([]error, len(reqs)), nil, nil
		var was []countKey
		ids := make([]string, 0, len(reqs))
		seen := map[string]bool{}
		for _, r := range reqs {
			if !seen[r.TaskID] {
				seen[r.TaskID] = true
				ids = append(ids, r.TaskID)
			}
		}
		sort.Strings(ids)
		recs, err := s.lockRows(ctx, tx, ids)
		if err != nil {
			return err
		}
		dirty := map[string]bool{}
		for i, req := range reqs {
			r, ok := recs[req.TaskID]
			if !ok {
				errs[i] = fmt.Errorf("task %s: %w", req.TaskID, flow.ErrNotFound)
				continue
			}
			// Apply to a copy so a refused request leaves the row as it was.
			c := *r
			if err := flow.ApplySet(&c, req, now); err != nil {
				errs[i] = err
				continue
			}
			if req.Status == flow.StatusWaiting {
				if err := s.fanOut(ctx, tx, &c, req); err != nil {
					var fe *flow.FieldError
					if errors.As(err, &fe) {
						errs[i] = err
						continue
					}
					return err
				}
				kids = append(kids, req.ChildRecords...)
			}
			if !dirty[r.TaskID] {
				dirty[r.TaskID] = true
				was = append(was, keyOf(r))
				changed = append(changed, r)
			}
			*r = c
		}
		if err := s.writeRecords(ctx, tx, changed, was); err != nil {
			return err
		}
		joined, err := s.settleParents(ctx, tx, endedIDs(changed), now)
		changed = append(changed, joined...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set %d tasks: %w", len(reqs), err)
	}
	s.dueP(changed)
	s.due(kids)
	return errs, nil
}

func (s *SQLStore) dueP(recs []*flow.Record) {
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Status == flow.StatusPending && !seen[r.TaskType] {
			seen[r.TaskType] = true
			s.onDue(r.TaskType)
		}
	}
}

// stale tells apart a missing task and a lease that does not match.
func (s *SQLStore) stale(ctx context.Context, taskID, what string) error {
	r, err := s.GetTask(ctx, taskID)
	if err != nil {
		return err
	}
	return fmt.Errorf("task %s is %s, %s: %w", taskID, r.Status, what, flow.ErrStaleLease)
}

// RenewLease implements Store.
func (s *SQLStore) RenewLease(ctx context.Context, taskID, lease string, expiry time.Time) error {
	var n int64
	err := s.drv.write(ctx, func(ctx context.Context, ex execQuerier) error {
		res, err := ex.ExecContext(ctx, s.q.renew, us(expiry), us(time.Now()), taskID, lease)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("renew lease of %s: %w", taskID, err)
	}
	if n == 0 {
		return s.stale(ctx, taskID, "lease is not its current one")
	}
	return nil
}

// CancelTask implements Store.
func (s *SQLStore) CancelTask(ctx context.Context, taskID string, now time.Time) error {
	n, err := s.cancelOne(ctx, taskID, now)
	if err != nil {
		return fmt.Errorf("cancel %s: %w", taskID, err)
	}
	if n > 0 {
		return nil
	}
	// Not a live task outside any fan-out: a waiting parent (its children
	// go too), a child (its parent is settled), or one that ended.
	return s.cancelTx(ctx, taskID, now)
}

// cancelOne is the one-statement cancel (q.cancel); where the writes keep
// the counts, the row's count is read first in the same transaction (the
// UPDATE returns only the new status).
func (s *SQLStore) cancelOne(ctx context.Context, taskID string, now time.Time) (int64, error) {
	if !s.countsInline() {
		res, err := s.execRetry(ctx, s.q.cancel, us(now), logAt(now), "", taskID)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	var n int64
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		// The driver's locking read: no other change of the row between
		// the key read here and the UPDATE.
		recs, err := s.lockRows(ctx, tx, []string{taskID})
		if err != nil {
			return err
		}
		r, ok := recs[taskID]
		if !ok {
			return nil
		}
		k := keyOf(r)
		res, err := tx.ExecContext(ctx, s.q.cancel, us(now), logAt(now), "", taskID)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		t := tally{}
		t.move(k, countKey{k.typ, k.stage, int(flow.StatusCancelled)})
		return s.count(ctx, tx, t)
	})
	return n, err
}

// deleteCounted runs a DELETE of tasks (q, with args) and returns how many
// it deleted; where the writes keep the counts, it returns the deleted
// rows' keys (RETURNING) and takes them off in the same transaction.
func (s *SQLStore) deleteCounted(ctx context.Context, q string, args ...any) (int64, error) {
	if c := s.drv.counting(); !c.inline || c.delTrigger {
		res, err := s.execRetry(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	var n int64
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		rows, err := tx.QueryContext(ctx, q+" RETURNING task_type, task_stage, status", args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		t := tally{}
		for rows.Next() {
			var k countKey
			if err := rows.Scan(&k.typ, &k.stage, &k.status); err != nil {
				return err
			}
			t[k]--
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return s.count(ctx, tx, t)
	})
	return n, err
}

// FireCron implements Store. Each tick moves the type's cron_last from
// the previous tick to this one by compare-and-swap, in the transaction
// that creates the tick's task: of several servers firing the same tick,
// exactly one swap succeeds, and a server killed mid-way leaves either
// both or neither.
func (s *SQLStore) FireCron(ctx context.Context, taskType string, now time.Time, next func(time.Time) time.Time, task func(tick time.Time) flow.Record) (int, error) {
	const maxPerCall = 100 // a long outage is made up over several calls
	n := 0
	for n < maxPerCall {
		var expr string
		var last int64
		if err := s.w.QueryRowContext(ctx, s.q.cronLast, taskType).Scan(&expr, &last); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return n, fmt.Errorf("task type %q: %w", taskType, flow.ErrUnknownType)
			}
			return n, fmt.Errorf("cron of %s: %w", taskType, err)
		}
		if expr == "" {
			return n, nil
		}
		tick := next(fromUS(last))
		if tick.IsZero() || tick.After(now) {
			return n, nil
		}
		rec := task(tick)
		won := false
		err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, s.q.cronCAS, us(tick), taskType, expr, last)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k != 1 {
				won = false // another server fired this tick
				return nil
			}
			won = true
			if _, err := tx.ExecContext(ctx, s.q.insertOne, insertArgs(&rec)...); err != nil {
				return err
			}
			if err := s.count(ctx, tx, insertTally([]flow.Record{rec})); err != nil {
				return err
			}
			return s.drv.notify(ctx, sqlTx{tx}, taskType)
		})
		if err != nil {
			return n, fmt.Errorf("cron tick %s of %s: %w", tick.Format(time.RFC3339), taskType, err)
		}
		if won {
			n++
			s.onDue(taskType)
		}
	}
	return n, nil
}

// Heartbeat implements Store.
func (s *SQLStore) Heartbeat(ctx context.Context, workerID string, now time.Time) ([]flow.HeldLease, error) {
	out, err := s.drv.heartbeat(ctx, workerID, now)
	if err != nil {
		return nil, fmt.Errorf("heartbeat of %s: %w", workerID, err)
	}
	return out, nil
}

// RescueWorker implements Store.
func (s *SQLStore) RescueWorker(ctx context.Context, workerID string, now time.Time) (int, error) {
	n, err := s.expireSelected(ctx, now, "worker declared gone", s.q.workerSel, workerID)
	if err != nil {
		return 0, fmt.Errorf("rescue tasks of %s: %w", workerID, err)
	}
	return n, nil
}

// expireSelected ends the leases of the processing tasks that query
// selects (with args), in one transaction, noting reason (when given) in
// each one's schedule log, and wakes holds for the tasks that are due again.
func (s *SQLStore) expireSelected(ctx context.Context, now time.Time, reason, query string, args ...any) (int, error) {
	var changed []*flow.Record
	var n int
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		recs, err := scanRecords(rows)
		if err != nil {
			return err
		}
		changed = changed[:0]
		was := make([]countKey, len(recs))
		for i := range recs {
			was[i] = keyOf(&recs[i])
			flow.ApplyExpire(&recs[i], now)
			if reason != "" {
				recs[i].ScheduleLog[len(recs[i].ScheduleLog)-1].Error = reason
			}
			changed = append(changed, &recs[i])
		}
		if err := s.writeRecords(ctx, tx, changed, was); err != nil {
			return err
		}
		n = len(changed)
		joined, err := s.settleParents(ctx, tx, endedIDs(changed), now)
		changed = append(changed, joined...) // woken, not counted as rescued
		return err
	})
	if err != nil {
		return 0, err
	}
	s.dueP(changed)
	return n, nil
}

// SetPaused implements Store.
func (s *SQLStore) SetPaused(ctx context.Context, taskType string, paused bool, now time.Time) error {
	v := 0
	if paused {
		v = 1
	}
	res, err := s.w.ExecContext(ctx, s.q.setPaused, v, us(now), taskType)
	if err != nil {
		return fmt.Errorf("pause %s: %w", taskType, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		// MySQL counts only changed rows: tell "no such type" from "no change".
		if _, err := s.GetType(ctx, taskType); err != nil {
			return err
		}
	}
	if !paused {
		s.onDue(taskType)
	}
	return nil
}

// RetryTask implements Store.
func (s *SQLStore) RetryTask(ctx context.Context, taskID, stage string, taskContext json.RawMessage, now time.Time) (flow.Record, error) {
	var out flow.Record
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		recs, err := s.lockRows(ctx, tx, []string{taskID})
		if err != nil {
			return err
		}
		r, ok := recs[taskID]
		if !ok {
			return fmt.Errorf("task %s: %w", taskID, flow.ErrNotFound)
		}
		was := []countKey{keyOf(r)}
		if err := flow.ApplyRetry(r, stage, taskContext, now); err != nil {
			return err
		}
		if err := s.reopenChild(ctx, tx, taskID); err != nil {
			return err
		}
		if r.UniqueKey != "" {
			var other string
			err := tx.QueryRowContext(ctx, s.q.liveByKey, r.TaskType, r.UniqueKey).Scan(&other)
			if err == nil {
				return fmt.Errorf("task %s: unique key %q is held by live task %s: %w", taskID, r.UniqueKey, other, flow.ErrConflict)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		out = *r
		return s.writeRecords(ctx, tx, []*flow.Record{r}, was)
	})
	if err != nil {
		if errors.Is(err, flow.ErrNotFound) || errors.Is(err, flow.ErrConflict) {
			return out, err
		}
		return out, fmt.Errorf("retry %s: %w", taskID, err)
	}
	s.onDue(out.TaskType)
	return out, nil
}

// DeleteTask implements Store.
func (s *SQLStore) DeleteTask(ctx context.Context, taskID string) error {
	n, err := s.deleteCounted(ctx, s.q.deleteTask, taskID)
	if err != nil {
		return fmt.Errorf("delete %s: %w", taskID, err)
	}
	if n == 1 {
		return nil
	}
	r, err := s.GetTask(ctx, taskID)
	if err != nil {
		return err
	}
	return fmt.Errorf("task %s is %s; cancel it before deleting it: %w", taskID, r.Status, flow.ErrConflict)
}

// GetTask implements Store.
func (s *SQLStore) GetTask(ctx context.Context, taskID string) (flow.Record, error) {
	r, err := scanRecord(s.r.QueryRowContext(ctx, s.q.get, taskID))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("task %s: %w", taskID, flow.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("get task %s: %w", taskID, err)
	}
	return r, nil
}

// ListTasks implements Store.
func (s *SQLStore) ListTasks(ctx context.Context, f ListFilter) ([]flow.Record, error) {
	q, args := s.drv.listQuery(f)
	rows, err := s.r.QueryContext(ctx, s.drv.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return scanRecords(rows)
}

// Stats implements Store.
func (s *SQLStore) Stats(ctx context.Context) ([]flow.TypeStats, error) {
	types, err := s.ListTypes(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := s.Counts(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return TypeStats(types, counts), nil
}

// NextDue implements Store.
func (s *SQLStore) NextDue(ctx context.Context, taskType string) (time.Time, bool, error) {
	var v sql.NullInt64
	if err := s.r.QueryRowContext(ctx, s.q.nextDue, taskType).Scan(&v); errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	} else if err != nil {
		return time.Time{}, false, fmt.Errorf("next due of %s: %w", taskType, err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromUS(v.Int64), true, nil
}

// RescueExpired implements Store.
func (s *SQLStore) RescueExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	n, err := s.expireSelected(ctx, now, "", s.q.rescueSel, us(now), limit)
	if err != nil {
		return 0, fmt.Errorf("rescue expired leases: %w", err)
	}
	return n, nil
}

// PruneEnded implements Store.
func (s *SQLStore) PruneEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := s.deleteCounted(ctx, s.q.prune, s.drv.pruneArgs(before, limit)...)
	if err != nil {
		return 0, fmt.Errorf("prune ended tasks: %w", err)
	}
	if err := s.pruneRateKeys(ctx, before); err != nil {
		return int(n), fmt.Errorf("prune rate keys: %w", err)
	}
	return int(n), nil
}

// migrate brings the schema to the newest version. Each driver serialises
// concurrent starts: an advisory lock (PostgreSQL), GET_LOCK (MySQL) or the
// write transaction (SQLite).
func (s *SQLStore) migrate(ctx context.Context) error {
	meta := s.p + "meta"
	migrations := s.drv.migrations()
	run := func(ex execQuerier) error {
		if _, err := ex.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+meta+" (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL)"); err != nil {
			return err
		}
		var v int
		err := ex.QueryRowContext(ctx, s.drv.rebind("SELECT value FROM "+meta+" WHERE name = ?"), "schema_version").Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := ex.ExecContext(ctx, s.drv.rebind("INSERT INTO "+meta+" (name, value) VALUES (?, 0)"), "schema_version"); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf("schema version %d is newer than this binary knows (%d)", v, len(migrations))
		}
		for i := v; i < len(migrations); i++ {
			for _, stmt := range migrations[i] {
				if _, err := ex.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", s.p)); err != nil && !alreadyAdded(err) {
					return fmt.Errorf("migration %d: %w", i+1, err)
				}
			}
			if _, err := ex.ExecContext(ctx, s.drv.rebind("UPDATE "+meta+" SET value = ? WHERE name = ?"), i+1, "schema_version"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := s.drv.lockMigrations(ctx, "fulcrum_flow_migrate_"+s.p, run); err != nil {
		return fmt.Errorf("store: migrate %s schema (prefix %s): %w", s.drv.name(), s.p, err)
	}
	return nil
}

// alreadyAdded reports an ADD COLUMN or ADD KEY of a column or key that
// is there (SQLite, MySQL: PostgreSQL's say IF NOT EXISTS): a step that
// ran before its version was recorded (MySQL commits each DDL statement
// on its own, so a crash can come between them) runs again unharmed.
func alreadyAdded(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1060 || me.Number == 1061 // duplicate column name, duplicate key name
	}
	return strings.Contains(err.Error(), "duplicate column name")
}

type recordT = flow.Record

var marshalLog = flow.MarshalLog

// execRetry runs one statement on the writer, again after a deadlock
// (nothing of it was committed): on MariaDB a cancel, a delete or a
// prune can meet a batch write in the status indexes, and each is safe
// to repeat.
func (s *SQLStore) execRetry(ctx context.Context, q string, args ...any) (sql.Result, error) {
	var res sql.Result
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		res, err = s.w.ExecContext(ctx, q, args...)
		if err == nil || !s.drv.retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return res, err
}
