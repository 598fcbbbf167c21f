package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Task counts by type, stage and status, kept exactly as the work happens,
// so that /v1/stats, /v1/funnel and /metrics read a few rows whatever the
// size of the tasks table (a GROUP BY over it took 394 ms at 1.2M rows on
// PostgreSQL).
//
// Where they are kept differs:
//
//   - SQLite: the writes themselves add to {p}counts, in their own
//     transaction: each write path knows the rows it changed (a claim
//     moves what it returns from pending to processing, a set batch from
//     processing to what it returns, a create adds what it inserts, the
//     general path has each row before and after) and adds one
//     (type, stage, status) delta per key and statement, a tally, in
//     place (the one writer has no concurrent transaction to wait on a
//     counter row). Row triggers did this per task, five trigger programs
//     over a task's life: about 7 µs of the store's 45 µs per task
//     (BenchmarkCycle/sqlite/batch=100).
//   - PostgreSQL and MySQL: the changes are appended to {p}count_deltas
//     in the transaction of every change, and a fold (FoldCounts, every
//     server runs it each second) moves what is committed there into
//     {p}counts. Adding in place would make every hold of a type wait on
//     that type's pending row until the holder commits: concurrent holds
//     would queue behind each other's commit (fsync included), the
//     throughput River and Oban avoid by estimating big counts instead.
//     Appends never wait on each other. On PostgreSQL the writes append
//     their tally as SQLite's add theirs (the claim, the batch create and
//     the fast set in the same statement, a data-modifying CTE over what
//     they return: two rows for a hold of 500); statement triggers over
//     transition tables did it before, copying every changed row. MySQL's
//     writes append theirs too (its claim and create run in a transaction
//     with the rows in Go); only deletes keep a row trigger there, as
//     MySQL has no DELETE ... RETURNING to tell a delete what it took
//     (row triggers on every change appended two delta rows per task
//     moved).
//
// So a statement that inserts or deletes tasks (MySQL: inserts), or
// changes a task's type, stage or status, must add its tally (count,
// countTx, writeRecords's was, or its own CTE) in its transaction; the
// conformance suite's counts tests check every path against a listing.
//
// A read sums {p}counts and the unfolded deltas in one statement, so it is
// exact whether or not a fold ran, and a fold that commits meanwhile is
// seen whole or not at all. RebuildCounts recounts from the tasks table
// (at the first start on a database that had none, and on an operator's
// call) so that a counter that drifted, say by a row changed outside the
// store, does not stay wrong.

// countsLockKey names the lock that folds and rebuilds take.
func (s *SQLStore) countsLockKey() string { return "fulcrum_flow_counts_" + s.p }

// countSQL is a driver's part of the counts.
type countSQL struct {
	// deltas: the triggers append to {p}count_deltas, which FoldCounts
	// folds; false: the writes update {p}counts in place (inline).
	deltas bool
	// inline: no triggers; the write paths add their tally to {p}counts
	// with upsert in their own transaction (SQLStore.count).
	inline bool
	// delTrigger: a row trigger still counts deletes (MySQL: no DELETE
	// ... RETURNING to tell a delete what it took; deletes are prunes and
	// an operator's, not the work's hot path).
	delTrigger bool
	// sum is the read's total of n (PostgreSQL's and MySQL's SUM of a
	// BIGINT is a NUMERIC/DECIMAL).
	sum string
	// upsert adds to one key's count: binds type, stage, status, n (a
	// fold's and a rebuild's step, and an inline write's).
	upsert string
	// tryLock and lock take the counts lock on a connection (bind the
	// key; tryLock answers whether it got it), unlock releases it.
	tryLock, lock, unlock string
	// drop is what DropTables removes besides the tables (PostgreSQL's
	// trigger functions).
	drop []string
}

// Count is how many tasks of a type are at a stage in a status.
type Count struct {
	TaskType  string
	TaskStage string
	Status    flow.Status
	N         int64
}

// countsRead is the read of the counts; with byType, of one type.
func (s *SQLStore) countsRead(byType bool) string {
	c := s.drv.counting()
	from := s.p + "counts"
	where := ""
	if byType {
		where = " WHERE task_type = ?"
	}
	if c.deltas {
		from = "(SELECT task_type, task_stage, status, n FROM " + s.p + "counts" + where +
			" UNION ALL SELECT task_type, task_stage, status, n FROM " + s.p + "count_deltas" + where + ") c"
	} else {
		from += where
	}
	return s.drv.rebind("SELECT task_type, task_stage, status, " + c.sum + " FROM " + from +
		" GROUP BY task_type, task_stage, status ORDER BY task_type, task_stage, status")
}

// Counts implements Store.
func (s *SQLStore) Counts(ctx context.Context, taskType string) ([]Count, error) {
	var args []any
	if taskType != "" {
		args = []any{taskType}
		if s.drv.counting().deltas {
			args = append(args, taskType)
		}
	}
	rows, err := s.r.QueryContext(ctx, s.countsRead(taskType != ""), args...)
	if err != nil {
		return nil, fmt.Errorf("task counts: %w", err)
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var c Count
		var st int
		if err := rows.Scan(&c.TaskType, &c.TaskStage, &st, &c.N); err != nil {
			return nil, fmt.Errorf("task counts: %w", err)
		}
		if c.N != 0 { // a key whose tasks all moved on keeps its row at 0
			c.Status = flow.Status(st)
			out = append(out, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("task counts: %w", err)
	}
	return out, nil
}

// foldBatch is how many deltas one fold transaction moves.
const foldBatch = 5000

// FoldCounts implements Store.
func (s *SQLStore) FoldCounts(ctx context.Context) (int, error) {
	c := s.drv.counting()
	if !c.deltas {
		return 0, nil
	}
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("fold task counts: %w", err)
	}
	defer conn.Close()
	var got bool
	if err := conn.QueryRowContext(ctx, s.drv.rebind(c.tryLock), s.countsLockKey()).Scan(&got); err != nil {
		return 0, fmt.Errorf("fold task counts: %w", err)
	}
	if !got { // another server is folding, or a rebuild runs
		return 0, nil
	}
	defer conn.ExecContext(context.Background(), s.drv.rebind(c.unlock), s.countsLockKey())
	total := 0
	for ctx.Err() == nil {
		n, err := s.foldOnce(ctx, conn)
		total += n
		if err != nil {
			return total, fmt.Errorf("fold task counts: %w", err)
		}
		if n < foldBatch {
			break
		}
	}
	return total, nil
}

type countKey struct {
	typ, stage string
	status     int
}

// keyOf is the count a record is in.
func keyOf(r *flow.Record) countKey { return countKey{r.TaskType, r.TaskStage, int(r.Status)} }

// tally is what a write changed in the counts (where the writes keep
// them: countSQL.inline), added up in Go per key.
type tally map[countKey]int64

// move counts a task that went from one key to another.
func (t tally) move(from, to countKey) {
	if from != to {
		t[from]--
		t[to]++
	}
}

// heldTally is what a claim of recs (now processing, pending before)
// moved.
func heldTally(recs []flow.Record) tally {
	t := tally{}
	for i := range recs {
		k := keyOf(&recs[i])
		t[k]++
		k.status = int(flow.StatusPending)
		t[k]--
	}
	return t
}

// insertTally is what inserting recs added.
func insertTally(recs []flow.Record) tally {
	t := tally{}
	for i := range recs {
		t[keyOf(&recs[i])]++
	}
	return t
}

// countsInline reports whether the writes keep the counts (no triggers).
func (s *SQLStore) countsInline() bool { return s.drv.counting().inline }

// count adds t to the counts in the write's transaction ex (a no-op
// where triggers keep them): in place (SQLite, keys in order, as
// addCounts's), or as one INSERT of delta rows that a fold moves.
func (s *SQLStore) count(ctx context.Context, ex execQuerier, t tally) error {
	stx, _ := ex.(*sql.Tx) // the prepared upsert runs on a *sql.Tx only
	return s.countVia(ctx, t, stx, func(ctx context.Context, q string, args ...any) error {
		_, err := ex.ExecContext(ctx, q, args...)
		return err
	})
}

// countTx is count for a txRunner (TxCreator's transactions).
func (s *SQLStore) countTx(ctx context.Context, tx txRunner, t tally) error {
	return s.countVia(ctx, t, nil, func(ctx context.Context, q string, args ...any) error {
		_, err := tx.exec(ctx, q, args...)
		return err
	})
}

// countVia is count and countTx over exec; stx, when set, runs the
// in-place upsert as the prepared countStmt.
func (s *SQLStore) countVia(ctx context.Context, t tally, stx *sql.Tx, exec func(ctx context.Context, q string, args ...any) error) error {
	if len(t) == 0 || !s.countsInline() {
		return nil
	}
	if s.drv.counting().deltas {
		q, args := s.deltaInsert(t)
		if q == "" {
			return nil
		}
		return exec(ctx, q, args...)
	}
	up := s.drv.rebind(s.drv.counting().upsert)
	return s.upsertCounts(ctx, func(ctx context.Context, args ...any) error {
		if stx != nil && s.countStmt != nil {
			_, err := stx.StmtContext(ctx, s.countStmt).ExecContext(ctx, args...)
			return err
		}
		return exec(ctx, up, args...)
	}, t)
}

// deltaInsert is the INSERT of t's changes into {p}count_deltas, one row
// per key that changed ("" when none did).
func (s *SQLStore) deltaInsert(t tally) (string, []any) {
	var b strings.Builder
	var args []any
	for k, n := range t {
		if n == 0 {
			continue
		}
		if len(args) > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?)")
		args = append(args, k.typ, k.stage, k.status, n)
	}
	if len(args) == 0 {
		return "", nil
	}
	return s.drv.rebind("INSERT INTO " + s.p + "count_deltas (task_type, task_stage, status, n) VALUES " + b.String()), args
}

// upsertCounts runs exec (the upsert, bound to type, stage, status, n)
// for each key of sums with a change, keys in order.
func (s *SQLStore) upsertCounts(ctx context.Context, exec func(context.Context, ...any) error, sums map[countKey]int64) error {
	keys := make([]countKey, 0, len(sums))
	for k, n := range sums {
		if n != 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.typ != b.typ {
			return a.typ < b.typ
		}
		if a.stage != b.stage {
			return a.stage < b.stage
		}
		return a.status < b.status
	})
	for _, k := range keys {
		if err := exec(ctx, k.typ, k.stage, k.status, sums[k]); err != nil {
			return err
		}
	}
	return nil
}

// foldOnce moves up to foldBatch committed deltas into the counts in one
// transaction. SKIP LOCKED passes over deltas not yet committed (their
// inserter holds them): they are folded next time, and meanwhile the
// read adds them.
func (s *SQLStore) foldOnce(ctx context.Context, conn *sql.Conn) (int, error) {
	c := s.drv.counting()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, s.drv.rebind("SELECT id, task_type, task_stage, status, n FROM "+s.p+
		"count_deltas ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"), foldBatch)
	if err != nil {
		return 0, err
	}
	sums := map[countKey]int64{}
	var ids []any
	for rows.Next() {
		var id, n int64
		var k countKey
		if err := rows.Scan(&id, &k.typ, &k.stage, &k.status, &n); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
		sums[k] += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := s.addCounts(ctx, tx, c, sums); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.drv.rebind("DELETE FROM "+s.p+"count_deltas WHERE id IN ("+in(len(ids))+")"), ids...); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit()
}

// addCounts adds sums to the counts, keys in order (two folds of other
// servers, were they to meet, lock rows in one order).
func (s *SQLStore) addCounts(ctx context.Context, tx *sql.Tx, c countSQL, sums map[countKey]int64) error {
	up := s.drv.rebind(c.upsert)
	return s.upsertCounts(ctx, func(ctx context.Context, args ...any) error {
		_, err := tx.ExecContext(ctx, up, args...)
		return err
	}, sums)
}

// RebuildCounts implements Store.
func (s *SQLStore) RebuildCounts(ctx context.Context) error {
	if err := s.rebuildCounts(ctx); err != nil {
		return fmt.Errorf("rebuild task counts: %w", err)
	}
	return nil
}

const countTasks = "SELECT task_type, task_stage, status, COUNT(*) FROM %stasks GROUP BY task_type, task_stage, status"

func (s *SQLStore) rebuildCounts(ctx context.Context) error {
	c := s.drv.counting()
	if !c.deltas {
		// One write transaction: no change lands between the count and
		// the replace.
		return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.p+"counts"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO "+s.p+"counts (task_type, task_stage, status, n) "+fmt.Sprintf(countTasks, s.p))
			return err
		})
	}
	// Without stopping writers: in one snapshot, count the tasks (T) and
	// sum the deltas (D) visible to it, and store T - D as the counts.
	// Every delta committed after the snapshot stays, and is exactly what
	// changed since T; the deltas in D stay too, and with T - D add up to
	// T. The lock keeps folds (the only other writers of the counts) out
	// until the counts are replaced.
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var got bool
	if err := conn.QueryRowContext(ctx, s.drv.rebind(c.lock), s.countsLockKey()).Scan(&got); err != nil {
		return err
	}
	if !got {
		return errors.New("the counts lock was not granted in time (a fold or another rebuild holds it)")
	}
	defer conn.ExecContext(context.Background(), s.drv.rebind(c.unlock), s.countsLockKey())
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	sums := map[countKey]int64{}
	read := func(q string, sign int64) error {
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k countKey
			var n int64
			if err := rows.Scan(&k.typ, &k.stage, &k.status, &n); err != nil {
				return err
			}
			sums[k] += sign * n
		}
		return rows.Err()
	}
	if err := read(fmt.Sprintf(countTasks, s.p), 1); err != nil {
		return err
	}
	if err := read("SELECT task_type, task_stage, status, "+c.sum+" FROM "+s.p+"count_deltas GROUP BY task_type, task_stage, status", -1); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.p+"counts"); err != nil {
		return err
	}
	if err := s.addCounts(ctx, tx, c, sums); err != nil {
		return err
	}
	return tx.Commit()
}

// countsFill rebuilds the counts once, the first time a store opens a
// database that has the counts' tables but has not filled them (tasks
// created before the upgrade, uncounted); a meta row says it was done.
// Two servers starting at once may both rebuild: each result is exact.
func (s *SQLStore) countsFill(ctx context.Context) error {
	meta := s.p + "meta"
	var v int
	err := s.w.QueryRowContext(ctx, s.drv.rebind("SELECT value FROM "+meta+" WHERE name = ?"), "counts_filled").Scan(&v)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("store: task counts: %w", err)
	}
	if err := s.rebuildCounts(ctx); err != nil {
		return fmt.Errorf("store: fill task counts: %w", err)
	}
	// Another server may have filled them meanwhile: the row may be there.
	_, err = s.w.ExecContext(ctx, s.drv.rebind("INSERT INTO "+meta+" (name, value) SELECT ?, 1 WHERE NOT EXISTS (SELECT 1 FROM "+meta+" WHERE name = ?)"),
		"counts_filled", "counts_filled")
	if err != nil && !isDuplicate(err) {
		return fmt.Errorf("store: task counts: %w", err)
	}
	return nil
}

// isDuplicate reports a unique-key clash (two fills racing for the meta
// row), whatever the database's words for it.
func isDuplicate(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "duplicate") || strings.Contains(m, "unique")
}

// DropTables drops the store's tables and what belongs to them (tests and
// tools that made them under a prefix of their own).
func (s *SQLStore) DropTables(ctx context.Context) error {
	var errs []error
	for _, t := range []string{"tasks", "task_types", "meta", "counts", "count_deltas", "rate_keys"} {
		if _, err := s.w.ExecContext(ctx, "DROP TABLE IF EXISTS "+s.p+t); err != nil {
			errs = append(errs, err)
		}
	}
	for _, q := range s.drv.counting().drop {
		if _, err := s.w.ExecContext(ctx, strings.ReplaceAll(q, "{p}", s.p)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TypeStats folds counts into Stats's answer: per type, each status's
// total over the stages, every status and every type in types present
// (0 when none), sorted by type.
func TypeStats(types []flow.TaskType, counts []Count) []flow.TypeStats {
	by := map[string]map[string]int64{}
	add := func(name string) map[string]int64 {
		if m, ok := by[name]; ok {
			return m
		}
		m := map[string]int64{}
		for _, st := range flow.AllStatuses() {
			m[st.String()] = 0
		}
		by[name] = m
		return m
	}
	paused := map[string]bool{}
	for _, t := range types {
		add(t.TaskType)
		paused[t.TaskType] = t.Paused
	}
	for _, c := range counts {
		add(c.TaskType)[c.Status.String()] += c.N
	}
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]flow.TypeStats, 0, len(names))
	for _, name := range names {
		out = append(out, flow.TypeStats{TaskType: name, Counts: by[name], Paused: paused[name]})
	}
	return out
}
