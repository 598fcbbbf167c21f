package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// driver is one database's part of SQLStore (River's riverdriver is the
// model): its schema, its SQL text, and every step whose statements or
// round trips differ between databases. SQLStore calls only these and
// never asks which database it has; postgres.go, mysql.go and sqlite.go
// each implement all of it. A driver keeps a pointer to its store for the
// pools, the table prefix, the shared queries and OnDue.
//
// To add a database: a file with a driver, its open function and its
// entry in drivers; the conformance suite (storetest) then runs against it
// from store_test.go.
type driver interface {
	// name is the database's name, as Dialect and NewTxCreator spell it.
	name() string

	// migrations is the schema's DDL, one list per version; {p} stands for
	// the table prefix.
	migrations() [][]string
	// lockMigrations runs fn with the writer, serialised against every
	// other store migrating the same tables (key names them): an advisory
	// lock, GET_LOCK, or one write transaction.
	lockMigrations(ctx context.Context, key string, fn func(execQuerier) error) error
	// start begins what runs once the schema is there (SQLite: the
	// prepared statements and the group commit; PostgreSQL: LISTEN). dsn
	// is the one Open was given.
	start(ctx context.Context, dsn string) error
	// close ends what start began; it is safe after a failed start.
	close() error

	// rebind turns the ? placeholders of shared SQL into the database's.
	rebind(q string) string
	// logExpr is the SQL that appends one schedule-log entry for event to
	// the row's schedule_log; it binds two arguments, the time's text and
	// the worker.
	logExpr(event string) string
	// build sets the statements of q that differ by database and keeps
	// those only the driver runs (the claim, the batch writes).
	build(q *queries, b qparts)
	// retryable reports a deadlock or serialisation failure: nothing of
	// the transaction was committed and it may run again.
	retryable(err error) bool

	// tx runs fn in one write transaction, retrying what retryable allows.
	tx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error
	// write runs one statement's fn on the writer (SQLite: in turn with
	// the group commits, not racing them for the one connection).
	write(ctx context.Context, fn func(context.Context, execQuerier) error) error

	// hold claims due tasks (Store.Hold without the lock and the sort).
	hold(ctx context.Context, p HoldParams) ([]flow.Record, error)
	// holdKeys claims up to limits[i] due tasks of fairness key keys[i],
	// for each i, in one transaction (fair.go).
	holdKeys(ctx context.Context, p HoldParams, keys []string, limits []int) ([]flow.Record, error)
	// createBatch inserts records without unique keys, all or none, and
	// wakes other servers where the database can.
	createBatch(ctx context.Context, recs []flow.Record) error
	// setFast applies a set batch without reading rows into Go when the
	// driver can (see setfast.go): done lists the applied task ids,
	// pending the types that got pending tasks. ok false: the driver
	// cannot take this batch; nothing was done and the general path runs.
	setFast(ctx context.Context, reqs []flow.SetTaskRequest, now time.Time) (done, pending map[string]bool, ok bool, err error)
	// lockRows selects ids' rows under a row lock in task_id order (the
	// order keeps concurrent batches from deadlocking).
	lockRows(ctx context.Context, tx *sql.Tx, ids []string) (*sql.Rows, error)
	// writeRows stores the mutable columns of recs in tx (the set batch's
	// general path, rescues, retries), waking other servers where the
	// database can.
	writeRows(ctx context.Context, tx *sql.Tx, recs []*flow.Record) error
	// notify tells other servers in tx that types got pending tasks
	// (PostgreSQL's NOTIFY; a no-op elsewhere).
	notify(ctx context.Context, tx txRunner, types ...string) error
	// heartbeat renews every lease workerID holds (Store.Heartbeat).
	heartbeat(ctx context.Context, workerID string, now time.Time) ([]flow.HeldLease, error)
	// pruneArgs are the arguments of queries.prune.
	pruneArgs(before time.Time, limit int) []any
	// listQuery is get_task_list's query and arguments, ? placeholders.
	listQuery(f ListFilter) (string, []any)
	// keys is how the database writes the sequence and rate key
	// conditions (keys.go).
	keys() keySQL
	// counting is the driver's part of the task counts (counts.go).
	counting() countSQL
	// fair is how the database writes the fairness key conditions
	// (fair.go).
	fair() fairSQL
}

// drivers are the databases Open and NewTxCreator know.
var drivers = []struct {
	name    string
	schemes []string // DSN prefixes Open takes
	// open connects (dsn as given to Open) and returns a store with its
	// pools and driver set.
	open func(ctx context.Context, dsn string) (*SQLStore, error)
	// sqlOnly is a driver of s for TxCreator: its SQL, no connection.
	sqlOnly func(s *SQLStore) driver
}{
	{"sqlite", []string{"sqlite://"}, openSQLite, func(s *SQLStore) driver { return &liteDriver{s: s} }},
	{"postgres", []string{"postgres://", "postgresql://"}, openPostgres,
		func(s *SQLStore) driver { return &pgDriver{s: s, instance: "app"} }}, // not a server's: every server's LISTEN takes it
	{"mysql", []string{"mysql://"}, openMySQL, func(s *SQLStore) driver { return &myDriver{s: s} }},
}

// execQuerier is what runs a statement: a pool, a connection or a
// transaction.
type execQuerier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// txRunner is a transaction of any Go driver: database/sql's or pgx's.
type txRunner interface {
	exec(ctx context.Context, q string, args ...any) (rowsAffected int64, err error)
	queryRow(ctx context.Context, q string, args ...any) scanner
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) queryRow(ctx context.Context, q string, args ...any) scanner {
	return t.tx.QueryRowContext(ctx, q, args...)
}

// The helpers below are shared by the drivers that work alike in a step.

// retryTx is driver.tx for a database with row locks: a fresh
// transaction per attempt, deadlocks and serialisation failures retried a
// few times (nothing of a failed attempt was committed).
func (s *SQLStore) retryTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = s.tryTx(ctx, fn)
		if err == nil || !s.drv.retryable(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond) // brief, to let the other transaction finish
	}
	return err
}

func (s *SQLStore) tryTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// lockMigrationsOn is driver.lockMigrations for a database with a
// session lock: lock and unlock take and release it on one connection.
func (s *SQLStore) lockMigrationsOn(ctx context.Context, key string, fn func(execQuerier) error,
	lock func(ctx context.Context, c *sql.Conn, key string) (unlock func(), err error)) error {
	c, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	unlock, err := lock(ctx, c, key)
	if err != nil {
		return err
	}
	defer unlock()
	return fn(c)
}

// serialClaim is the hold limit from which a store's claims of one type
// take turns (see claimInTurn).
const serialClaim = 32

// claimInTurn runs claim for a database where concurrent claims meet
// under SKIP LOCKED (PostgreSQL, MySQL), retrying what retryable allows.
//
// Without a Redis lock, this store's large holds of a type claim one at a
// time. Concurrent claims of one type all scan the head of its claim index
// and step over each other's rows (SKIP LOCKED): four workers holding 500
// each read up to 2,000 rows and tried a lock on each to take 500 (end to
// end on PostgreSQL, interleaved: 0.90x River before, 0.96x after; MariaDB
// +10-20 %). Small claims go on at once: their time is their commit, which
// concurrent claims share, and one at a time cost 64 one-task holders a
// third of their rate. Other servers sharing the database still meet under
// SKIP LOCKED.
//
// many, when not nil, claims for several small holds at once (see
// coalesce); the plain holds of a type below serialClaim go through it.
func (s *SQLStore) claimInTurn(ctx context.Context, p HoldParams, claim func(context.Context, HoldParams) ([]flow.Record, error),
	many func(context.Context, []HoldParams) ([]flow.Record, error)) ([]flow.Record, error) {
	if many != nil && s.lock == nil && p.Limit < serialClaim && p.fairKey == "" {
		return s.coalesce(ctx, p, many)
	}
	if s.lock == nil && p.Limit >= serialClaim {
		turn, _ := s.claims.LoadOrStore(p.TaskType, make(chan struct{}, 1))
		select {
		case turn.(chan struct{}) <- struct{}{}:
			defer func() { <-turn.(chan struct{}) }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.retryClaim(ctx, p, claim)
}

// maxCoalesced is the most tasks one coalesced claim asks for.
const maxCoalesced = 256

// group is a group commit: calls that arrive while one of the group's
// runs is in flight wait, and the next run serves all of them at once
// (run gets their inputs in arrival order and returns an output each).
// At most one run of a group is in flight. A waiting call whose context
// ends leaves: at once while queued, or, when taken into a run, before
// the run starts (nothing was done for it). One whose context ends during
// the run sees it through and gets its output, where returning early
// would leave what the run did for it (tasks held under its lease) unseen;
// the run itself ends at the latest of its calls' deadlines.
type group[In, Out any] struct {
	mu   sync.Mutex
	busy bool
	next []*groupCall[In, Out]
}

type groupCall[In, Out any] struct {
	ctx  context.Context
	in   In
	size int
	lead chan []*groupCall[In, Out] // the calls this one runs for, as their leader
	done chan groupOut[Out]
}

type groupOut[Out any] struct {
	out Out
	err error
}

// errGroupPanic answers the calls of a run that panicked.
var errGroupPanic = errors.New("store: the grouped run serving this call panicked")

// do runs in alone if the group is idle, else with the calls queued
// beside it; size is in's share of a run, and a run takes at most max of
// them (or one call, whatever its size).
func (g *group[In, Out]) do(ctx context.Context, in In, size, max int, run func(context.Context, []In) ([]Out, error)) (Out, error) {
	me := &groupCall[In, Out]{ctx: ctx, in: in, size: size, lead: make(chan []*groupCall[In, Out], 1), done: make(chan groupOut[Out], 1)}
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return g.lead([]*groupCall[In, Out]{me}, max, run)
	}
	g.next = append(g.next, me)
	g.mu.Unlock()
	select {
	case calls := <-me.lead:
		return g.lead(calls, max, run)
	case r := <-me.done:
		return r.out, r.err
	case <-ctx.Done():
		g.mu.Lock()
		for i, c := range g.next {
			if c == me { // still queued: leave
				g.next = append(g.next[:i], g.next[i+1:]...)
				g.mu.Unlock()
				var zero Out
				return zero, ctx.Err()
			}
		}
		g.mu.Unlock()
		select {
		case calls := <-me.lead:
			return g.lead(calls, max, run)
		case r := <-me.done:
			return r.out, r.err
		}
	}
}

// lead runs calls (calls[0] is the caller) but those whose context has
// ended, passes the lead to the calls queued meanwhile or marks the group
// idle, and hands out the outputs. A run that panics still passes the
// lead on and answers the others (errGroupPanic); the panic goes on up
// the caller's stack.
func (g *group[In, Out]) lead(calls []*groupCall[In, Out], max int, run func(context.Context, []In) ([]Out, error)) (Out, error) {
	res := make([]groupOut[Out], len(calls))
	var live []int
	for i, c := range calls {
		if err := c.ctx.Err(); err != nil {
			res[i].err = err
		} else {
			live = append(live, i)
		}
	}
	ok := false
	defer func() {
		if !ok {
			g.handOn(max)
			for _, c := range calls[1:] {
				c.done <- groupOut[Out]{err: errGroupPanic}
			}
		}
	}()
	if len(live) > 0 {
		ins := make([]In, len(live))
		for j, i := range live {
			ins[j] = calls[i].in
		}
		ctx, cancel := runContext(calls, live)
		outs, err := run(ctx, ins)
		cancel()
		for j, i := range live {
			if err != nil {
				res[i].err = err
			} else {
				res[i].out = outs[j]
			}
		}
	}
	ok = true
	g.handOn(max)
	for i, c := range calls[1:] {
		c.done <- res[i+1]
	}
	return res[0].out, res[0].err
}

// handOn passes the lead to the calls queued, up to max of their sizes
// (at least one), or marks the group idle.
func (g *group[In, Out]) handOn(max int) {
	g.mu.Lock()
	var next []*groupCall[In, Out]
	n := 0
	for len(g.next) > 0 && (len(next) == 0 || n+g.next[0].size <= max) {
		n += g.next[0].size
		next, g.next = append(next, g.next[0]), g.next[1:]
	}
	g.busy = len(next) > 0
	g.mu.Unlock()
	if len(next) > 0 {
		next[0].lead <- next
	}
}

// runContext is the context of a run for the calls at live: a lone
// call's own; for several, none of their cancellations (the run serves
// each) but the latest of their deadlines, or none if one has none.
func runContext[In, Out any](calls []*groupCall[In, Out], live []int) (context.Context, context.CancelFunc) {
	if len(live) == 1 {
		return calls[live[0]].ctx, func() {}
	}
	var latest time.Time
	for _, i := range live {
		d, ok := calls[i].ctx.Deadline()
		if !ok {
			return context.WithoutCancel(calls[live[0]].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(calls[live[0]].ctx), latest)
}

// coalesce is a group commit for small holds. With 64 workers holding one
// task each, every hold was a claim statement and a commit of its own, and
// the holds queued on the database's time per statement (on PostgreSQL
// 1 ms of planning against 0.1 ms of execution for one row; a claim of 25
// rows takes 1.2 ms) and on the pool. Here, while a claim of the type is in flight, later
// holds wait and the next claim serves all of them, asking for the sum of
// their limits; the rows are split among them, each with its own owner,
// lease and expiry, so each holder gets at most its limit and nothing is
// left over. The claim's condition is the one every hold uses (pause, due
// time, sequence and rate keys); the keys' admission (admit) runs per
// holder after, as for a lone hold. Other servers' holds meet these under
// SKIP LOCKED as before.
func (s *SQLStore) coalesce(ctx context.Context, p HoldParams, many func(context.Context, []HoldParams) ([]flow.Record, error)) ([]flow.Record, error) {
	key := p.TaskType
	if p.OmitLog {
		key += "\x00nolog"
	}
	gv, _ := s.holdGroups.LoadOrStore(key, &group[HoldParams, []flow.Record]{})
	g := gv.(*group[HoldParams, []flow.Record])
	return g.do(ctx, p, p.Limit, maxCoalesced, func(ctx context.Context, ps []HoldParams) ([][]flow.Record, error) {
		recs, err := s.retryClaim(ctx, ps[0], func(ctx context.Context, _ HoldParams) ([]flow.Record, error) {
			return many(ctx, ps)
		})
		if err != nil {
			return nil, err
		}
		if len(ps) == 1 {
			return [][]flow.Record{recs}, nil
		}
		return splitByLease(ps, recs), nil
	})
}

// splitByLease hands a coalesced claim's rows to its holds, each the rows
// claimed under its lease and owner, at most its limit: holds that were
// given one lease (the server makes a new one per hold; a caller of the
// store may not) still get each task once, and each the rows written
// with its own owner (a heartbeat renews by owner; RETURNING's order is
// unspecified).
func splitByLease(ps []HoldParams, recs []flow.Record) [][]flow.Record {
	type holder struct{ lease, owner string }
	byHolder := make(map[holder][]flow.Record, len(ps))
	for _, r := range recs {
		h := holder{r.Lease, r.Owner}
		byHolder[h] = append(byHolder[h], r)
	}
	outs := make([][]flow.Record, len(ps))
	for i, p := range ps {
		h := holder{p.Lease, p.WorkerID}
		rs := byHolder[h]
		k := min(max(p.Limit, 0), len(rs))
		outs[i], byHolder[h] = rs[:k:k], rs[k:]
	}
	return outs
}

// slots are a coalesced claim's per-task values: holder i's owner, lease,
// expiry, time and log time, repeated for each task of its limit, in
// order; the claim hands its k-th row to slot k.
func slots(ps []HoldParams) (owners, leases []string, expiries, nows []int64, ats []string) {
	for _, p := range ps {
		for range p.Limit {
			owners, leases = append(owners, p.WorkerID), append(leases, p.Lease)
			expiries, nows, ats = append(expiries, us(p.LeaseExpiry)), append(nows, us(p.Now)), append(ats, logAt(p.Now))
		}
	}
	return
}

// claimAll is the HoldParams of a coalesced claim's condition: the
// latest now of its holds, and the sum of their limits.
func claimAll(ps []HoldParams) HoldParams {
	all := ps[0]
	all.Limit = 0
	for _, p := range ps {
		all.Limit += p.Limit
		if p.Now.After(all.Now) {
			all.Now = p.Now
		}
	}
	return all
}

// retryClaim runs claim, again after a retryable error, up to five times.
func (s *SQLStore) retryClaim(ctx context.Context, p HoldParams, claim func(context.Context, HoldParams) ([]flow.Record, error)) ([]flow.Record, error) {
	var recs []flow.Record
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		recs, err = claim(ctx, p)
		if err == nil || !s.drv.retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return recs, err
}

// holdArgs are a claim's arguments: the SET list's (worker, lease, expiry,
// now, the log entry's time and worker) and the due condition's (see
// dueArgs), in the order the driver's statement binds them.
func holdArgs(p HoldParams, dueFirst bool) []any {
	set := []any{p.WorkerID, p.Lease, us(p.LeaseExpiry), us(p.Now), logAt(p.Now), p.WorkerID}
	due := dueArgs(p)
	if dueFirst {
		return append(due, set...)
	}
	return append(set, due...)
}

// dueArgs are the due condition's arguments: type, now, type for the
// paused check, now for the paused keys, limit.
func dueArgs(p HoldParams) []any {
	if p.fairKey != "" { // dueFair: the key after the type
		return []any{p.TaskType, p.fairKey, us(p.Now), p.TaskType, us(p.Now), p.Limit}
	}
	return []any{p.TaskType, us(p.Now), p.TaskType, us(p.Now), p.Limit}
}

// lockRowsIn is driver.lockRows for a lockSel with an IN (%s) list.
func lockRowsIn(ctx context.Context, tx *sql.Tx, lockSel string, ids []string) (*sql.Rows, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return tx.QueryContext(ctx, fmt.Sprintf(lockSel, in(len(ids))), args...)
}

// heartbeatReturning is driver.heartbeat for a database whose UPDATE
// returns the renewed rows (PostgreSQL, SQLite).
func (s *SQLStore) heartbeatReturning(ctx context.Context, q, workerID string, now time.Time) ([]flow.HeldLease, error) {
	var out []flow.HeldLease
	err := s.drv.write(ctx, func(ctx context.Context, ex execQuerier) error {
		rows, err := ex.QueryContext(ctx, q, us(now), us(now), workerID)
		if err == nil {
			out, err = scanLeases(rows)
		}
		return err
	})
	return out, err
}

func scanLeases(rows *sql.Rows) ([]flow.HeldLease, error) {
	defer rows.Close()
	out := []flow.HeldLease{}
	for rows.Next() {
		var l flow.HeldLease
		var exp int64
		if err := rows.Scan(&l.TaskID, &l.Lease, &exp); err != nil {
			return nil, err
		}
		l.LeaseExpiry = fromUS(exp)
		out = append(out, l)
	}
	return out, rows.Err()
}

// listQuery is get_task_list's query over the listing index, for a
// database whose planner needs no help (see pgDriver.listQuery).
func listQuery(t, cols string, f ListFilter) (string, []any) {
	var where []string
	var args []any
	if f.TaskType != "" {
		where, args = append(where, "task_type = ?"), append(args, f.TaskType)
	}
	if f.Status != 0 {
		where, args = append(where, "status = ?"), append(args, int(f.Status))
	}
	if f.TaskStage != "" {
		where, args = append(where, "task_stage = ?"), append(args, f.TaskStage)
	}
	if f.After != "" {
		where, args = append(where, "task_id > ?"), append(args, f.After)
	}
	q := "SELECT " + cols + " FROM " + t
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY task_id LIMIT ?", append(args, f.Limit)
}

// pruneArgs is driver.pruneArgs for a prune of (before, limit).
func pruneArgs(before time.Time, limit int) []any { return []any{us(before), limit} }
