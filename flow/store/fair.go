package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"sync"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// Fair shares per key (fairness_key, a type registered with fair).
//
// A hold of N tasks of a fair type
//  1. walks the keys that have pending tasks, from just after the last key
//     it served (wrapping round), at most 2N of them (fairWalk): one index probe
//     per key, over an index that holds only keyed pending tasks (a partial
//     index on PostgreSQL and SQLite, a generated column on MySQL), so the
//     walk's cost follows the keys, not the tasks (a tenant with 100,000
//     queued tasks is one step of it), and unkeyed tasks never enter it;
//  2. splits N across the keys with due tasks by weight, carrying each
//     key's remainder (its credit) to the next hold: over several holds the
//     shares are exact, and a hold of one goes to each key in turn (a split
//     of each hold alone would give it to the first key every time);
//  3. claims each key's share with the type's claim plus the key, all keys
//     in one transaction (PostgreSQL: one statement, a lateral join over
//     the keys; a statement per key was a commit per key, a tenth of the
//     rate with 1,000 keys);
//     a key that had fewer due tasks than its share gives the rest to the
//     others, and what no key fills goes to the plain claim: tasks without a
//     fairness_key, and keys past the walk's end.
//
// The credits and the cursor are this store's (per server), not the
// database's: a write per hold to share them would cost more than the
// claim. Each server's holds are shared fairly, so across servers sharing
// the database the shares hold within a hold's granularity. A type that is
// not fair takes the plain claim and reads nothing of this.

// fairWalk is the most keys one hold reads: twice the hold's size (a
// hold of N gives at most N keys a task; the others stand in for keys
// that turn out drained), at least fairWalkMin, at most fairWalkMax.
// Reading 256 keys for every hold cost a hold of a few tasks more than
// the tasks themselves (end to end with 1,000 keys, PostgreSQL's CPU per
// task went 66 → 670 µs). With more keys than that, the window moves on
// from the last key served, so keys take turns.
func fairWalk(limit int) int { return min(max(2*limit, fairWalkMin), fairWalkMax) }

const fairWalkMin, fairWalkMax = 8, 256

// fairRounds is how many times a hold hands on what drained keys left.
const fairRounds = 3

// fairSQL is how a database writes the fairness conditions.
type fairSQL struct {
	// col holds a pending task's fairness key and nothing (NULL or
	// excluded by partial) otherwise, as the fair index reads it.
	col string
	// partial: col is the plain column and the index is partial (status
	// < 2 AND fairness_key <> ''), which a query repeats for the planner.
	partial bool
	// hint follows the table's name where a claim reads the fair index.
	hint string
	// groupBy: the walk is one GROUP BY that the database answers with a
	// loose index scan (MySQL's "Using index for group-by"), where the
	// recursive walk's correlated step read every entry of the keys
	// before (MariaDB planned it as a ref on the type). Arguments: type,
	// after, limit.
	groupBy bool
}

// fairPartial is PostgreSQL's and SQLite's: a partial index.
var fairPartial = fairSQL{col: "fairness_key", partial: true}

// pending is the column as alias (with its dot, or "") reads it.
func (f fairSQL) pending(alias string) string { return alias + f.col }

// keyed is the fair index's predicate, for the planner to match: a
// pending keyed task. The partial index says "status < 2" (pending, the
// one status below 2) where the claim index says "status = 1": a query
// that states status = 1 may be answered from either, and on a table
// without statistics yet (a fresh database, autovacuum not yet by)
// PostgreSQL read a key's tasks from the claim index, filtering every
// due task of the type, per key: 670 µs of the database's CPU per task
// end to end with 1,000 keys. "status < 2" implies only the fair index's
// predicate.
func (f fairSQL) keyed(alias string) string {
	if f.partial {
		return alias + "status < 2 AND " + alias + "fairness_key <> ''"
	}
	return alias + "status = 1"
}

// fairMigration is the fair schema for PostgreSQL and SQLite: the
// databases' ALTERs, then the index of keyed pending tasks by key.
func fairMigration(add ...string) []string {
	return append(add,
		`CREATE INDEX IF NOT EXISTS {p}tasks_fair ON {p}tasks (task_type, fairness_key, order_time) WHERE status < 2 AND fairness_key <> ''`)
}

// fairWalkSQL walks up to ? keys with pending tasks after ? and gives
// each one's earliest order_time: a recursive CTE whose every step is one
// probe of the fair index (a loose index scan, which none of the three
// planners does for DISTINCT), and the earliest is one more (ORDER BY
// ... LIMIT 1 rather than EXISTS (... order_time <= now): PostgreSQL
// planned that as a scan that stops at the first match, which for a key
// whose tasks come last read the whole table). Arguments: type, after,
// type, limit, type.
func fairWalkSQL(t string, f fairSQL) string {
	if f.groupBy {
		return "SELECT " + f.col + ", MIN(order_time) FROM " + t + f.hint + " WHERE task_type = ? AND " + f.col + " > ?" +
			" GROUP BY task_type, " + f.col + " ORDER BY task_type, " + f.col + " LIMIT ?" // the index's whole prefix, or no loose scan
	}
	next := func(after string) string {
		return "(SELECT " + f.pending("f.") + " FROM " + t + " f WHERE f.task_type = ? AND " + f.pending("f.") + " > " + after +
			" AND " + f.keyed("f.") + " ORDER BY " + f.pending("f.") + " LIMIT 1)"
	}
	return "WITH RECURSIVE k (fk, n) AS (SELECT " + next("?") + ", 1 UNION ALL SELECT " + next("k.fk") + ", k.n + 1 FROM k WHERE k.fk IS NOT NULL AND k.n < ?)" +
		" SELECT k.fk, (SELECT d.order_time FROM " + t + " d WHERE d.task_type = ? AND " + f.pending("d.") + " = k.fk AND " + f.keyed("d.") +
		" ORDER BY d.order_time LIMIT 1) FROM k WHERE k.fk IS NOT NULL ORDER BY k.n"
}

// fairState is one type's shares on this store.
type fairState struct {
	mu     sync.Mutex
	cursor string             // the last key served; the next walk starts after it
	credit map[string]float64 // tasks a key is owed (> 0) or got ahead of its share (< 0)
}

func (s *SQLStore) fairOf(typ string) *fairState {
	st, _ := s.fair.LoadOrStore(typ, &fairState{credit: map[string]float64{}})
	return st.(*fairState)
}

// holdFair is Hold for a fair type (see the top of this file).
func (s *SQLStore) holdFair(ctx context.Context, p HoldParams) ([]flow.Record, error) {
	st := s.fairOf(p.TaskType)
	st.mu.Lock()
	cursor := st.cursor
	st.mu.Unlock()
	keys, complete, err := s.fairKeys(ctx, p, cursor)
	if err != nil {
		return nil, err
	}
	var out []flow.Record
	left := p.Limit
	for round := 0; round < fairRounds && left > 0 && len(keys) > 0; round++ {
		st.mu.Lock()
		if round == 0 && complete {
			st.prune(keys)
		}
		alloc := st.share(keys, p.FairnessWeights, left)
		for i := len(keys) - 1; i >= 0; i-- {
			if alloc[i] > 0 {
				st.cursor = keys[i]
				break
			}
		}
		st.mu.Unlock()
		var ks []string
		var ns []int
		for i, k := range keys {
			if alloc[i] > 0 {
				ks, ns = append(ks, k), append(ns, alloc[i])
			}
		}
		got, err := s.drv.holdKeys(ctx, p, ks, ns)
		if err != nil {
			return s.fairPartial(p, out, err)
		}
		out, left = append(out, got...), left-len(got)
		n := make(map[string]int, len(ks))
		for i := range got {
			n[got[i].FairnessKey]++
		}
		var more []string // keys that filled their share and may have more
		st.mu.Lock()
		for i, k := range ks {
			if n[k] < ns[i] {
				st.credit[k] = 0 // drained (or its rest is being held): no debt either way
				continue
			}
			more = append(more, k)
		}
		st.mu.Unlock()
		keys = more
	}
	if left > 0 {
		q := p
		q.Limit = left
		got, err := s.drv.hold(ctx, q)
		if err != nil {
			return s.fairPartial(p, out, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// fairPartial answers a fair hold whose later claim failed: the tasks an
// earlier one claimed (committed, processing under the hold's lease) are
// handed out rather than left to their lease's expiry.
func (s *SQLStore) fairPartial(p HoldParams, out []flow.Record, err error) ([]flow.Record, error) {
	if len(out) == 0 {
		return nil, err
	}
	s.log.Warn("flow store: a fair hold's later claim failed; handing out what it had claimed", "task_type", p.TaskType, "held", len(out), "err", err)
	return out, nil
}

// fairKeys walks the type's keys from after cursor, wrapping round once,
// and returns those with due tasks in the walk's order; complete says
// the walk saw every key with pending tasks.
func (s *SQLStore) fairKeys(ctx context.Context, p HoldParams, cursor string) (due []string, complete bool, err error) {
	lim := fairWalk(p.Limit)
	walked, err := s.fairWalk(ctx, p, cursor, lim, "", &due)
	if err != nil || walked == lim || cursor == "" {
		return due, err == nil && walked < lim, err
	}
	more, err := s.fairWalk(ctx, p, "", lim-walked, cursor, &due)
	return due, walked+more < lim, err
}

// fairWalk appends to due the keys after after (up to limit, and up to
// upTo inclusive when given) that have due tasks, and says how many keys
// it walked.
func (s *SQLStore) fairWalk(ctx context.Context, p HoldParams, after string, limit int, upTo string, due *[]string) (int, error) {
	args := []any{p.TaskType, after, p.TaskType, limit, p.TaskType}
	if s.drv.fair().groupBy {
		args = []any{p.TaskType, after, limit}
	}
	rows, err := s.r.QueryContext(ctx, s.q.fairWalk, args...)
	if err != nil {
		return 0, fmt.Errorf("fairness keys: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var k string
		var first sql.NullInt64 // NULL: the key's tasks were held meanwhile
		if err := rows.Scan(&k, &first); err != nil {
			return n, err
		}
		n++
		if upTo != "" && k > upTo {
			break // walked already, before the wrap
		}
		if first.Valid && first.Int64 <= us(p.Now) {
			*due = append(*due, k)
		}
	}
	return n, rows.Err()
}

// prune drops the credit of keys no longer pending: a key that comes back
// starts even rather than with a debt or a backlog of turns.
func (st *fairState) prune(keys []string) {
	if len(st.credit) <= len(keys) {
		return
	}
	live := make(map[string]bool, len(keys))
	for _, k := range keys {
		live[k] = true
	}
	for k := range st.credit {
		if !live[k] {
			delete(st.credit, k)
		}
	}
}

// share splits n tasks across keys (in the walk's order) by weight: each
// key is credited its exact share, n*w/W, and gets whole tasks by credit,
// the largest first (ties to the earlier key in the walk); what it got is
// taken off its credit, and the fractions carry to the next hold.
func (st *fairState) share(keys []string, weights map[string]int, n int) []int {
	w := func(k string) float64 {
		if v, ok := weights[k]; ok && v > 0 {
			return float64(v)
		}
		return 1
	}
	var total float64
	for _, k := range keys {
		total += w(k)
	}
	alloc := make([]int, len(keys))
	left := n
	for i, k := range keys {
		c := st.credit[k] + float64(n)*w(k)/total
		st.credit[k] = c
		if c >= 1 && left > 0 {
			a := min(int(math.Floor(c)), left)
			alloc[i], left = a, left-a
			st.credit[k] = c - float64(a)
		}
	}
	for ; left > 0; left-- {
		best := 0
		for i, k := range keys {
			if st.credit[k] > st.credit[keys[best]] {
				best = i
			}
		}
		alloc[best]++
		st.credit[keys[best]]--
	}
	return alloc
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// weightsArg stores fairness_weights as JSON text, NULL when there are
// none.
func weightsArg(w map[string]int) any {
	if len(w) == 0 {
		return nil
	}
	b, _ := json.Marshal(w) // a map of strings to ints always encodes
	return string(b)
}
