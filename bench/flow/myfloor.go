package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The MariaDB floor (issue 37): the smallest honest job queue on MariaDB
// that does per job what River does on PostgreSQL, in process like River,
// with River's settings. It says what any queue on MariaDB can reach, so
// that flow on MariaDB is measured against what MariaDB itself allows as
// well as against River.
//
// Per job, as River's: one row inserted with River's columns and the
// indexes MariaDB can have of River's (primary key, kind, state and
// finalized time, the prioritized fetching index; River's GIN indexes on
// args and metadata have no InnoDB equivalent, and its unique-key index is
// partial, so unkeyed jobs cost it nothing: both left out); claimed in a
// batch of up to the free workers by SELECT ... FOR UPDATE SKIP LOCKED
// (MariaDB has no UPDATE ... RETURNING, so the rows are read by the
// locking SELECT) and an UPDATE to running, attempt+1, the attempt's time
// and worker; completed by a batched UPDATE (River's batch completer: up
// to 5,000 a batch, every 50 ms). Inserts as River's bench: 500 a
// statement, four at a time. Values travel as SQL text built here (ids and
// the fixed JSON shape), so no server-side prepare round trips.

const floorSchema = `CREATE TABLE %sjob (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	args JSON NOT NULL DEFAULT '{}',
	attempt SMALLINT NOT NULL DEFAULT 0,
	attempted_at DATETIME(6) NULL,
	attempted_by JSON NULL,
	created_at DATETIME(6) NOT NULL DEFAULT NOW(6),
	errors JSON NULL,
	finalized_at DATETIME(6) NULL,
	kind VARCHAR(128) NOT NULL,
	max_attempts SMALLINT NOT NULL,
	metadata JSON NOT NULL DEFAULT '{}',
	priority SMALLINT NOT NULL DEFAULT 1,
	queue VARCHAR(128) NOT NULL DEFAULT 'default',
	state ENUM('available','cancelled','completed','discarded','pending','retryable','running','scheduled') NOT NULL DEFAULT 'available',
	scheduled_at DATETIME(6) NOT NULL DEFAULT NOW(6),
	tags JSON NOT NULL DEFAULT '[]',
	KEY %[1]sjob_kind (kind),
	KEY %[1]sjob_state_finalized (state, finalized_at),
	KEY %[1]sjob_fetching (state, queue, priority, scheduled_at, id)
) ENGINE=InnoDB`

// floor's River settings: fetch cooldown, poll interval (River's bench),
// completer batch and tick (River's batch completer).
const (
	floorCooldown  = 2 * time.Millisecond
	floorPoll      = 20 * time.Millisecond
	floorDoneBatch = 5000
	floorDoneTick  = 50 * time.Millisecond
)

// myFloorE2E inserts n jobs in batches while maxWorkers handlers work
// them, and returns jobs per second from the first insert to the last
// committed completion, with CPU per job as the other rows.
func myFloorE2E(ctx context.Context, dsn, prefix string, n, maxWorkers int) (e2eResult, error) {
	var res e2eResult
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		return res, err
	}
	// READ COMMITTED as flow's store: the locking read takes no gap locks,
	// so inserts do not wait on a fetch. MariaDB before 11.1 knows only
	// tx_isolation.
	cfg.Params = map[string]string{"tx_isolation": "'READ-COMMITTED'"}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return res, err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	// pgxpool's default is max(4, CPUs); a few more so inserts, the fetch
	// and the completer never queue for a connection.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	if _, err := db.ExecContext(ctx, fmt.Sprintf(floorSchema, prefix)); err != nil {
		return res, fmt.Errorf("floor schema: %w", err)
	}
	table := prefix + "job"
	if floorExtra("indexes") {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(floorExtraIndexes, table)); err != nil {
			return res, fmt.Errorf("floor extra indexes: %w", err)
		}
	}
	logAppend := ""
	if floorExtra("log") {
		if _, err := db.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN schedule_log TEXT NOT NULL DEFAULT '[]'"); err != nil {
			return res, fmt.Errorf("floor extra log: %w", err)
		}
		logAppend = `, schedule_log = JSON_ARRAY_APPEND(schedule_log, '$', JSON_OBJECT('time', 1764300000000000, 'owner', 'bench-worker-3', 'lease', '01JDXYZABCDEFGHJKMNPQRSTVW', 'status', 2))`
	}
	floorLogAppend = logAppend
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var running atomic.Int64 // handlers busy, as River's producer counts them
	free := make(chan struct{}, 1)
	inserted := make(chan struct{}, 1)
	doneIDs := make(chan int64, maxWorkers)
	var completed atomic.Int64
	allDone := make(chan struct{})
	errc := make(chan error, 2)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}

	var bg sync.WaitGroup
	// The completer: one UPDATE per batch, then the completions count.
	bg.Add(1)
	go func() {
		defer bg.Done()
		tick := time.NewTicker(floorDoneTick)
		defer tick.Stop()
		var ids []int64
		flush := func() error {
			if len(ids) == 0 {
				return nil
			}
			q := "UPDATE " + table + " SET state = 'completed', finalized_at = NOW(6)" + logAppend + " WHERE state = 'running' AND id IN (" + joinIDs(ids) + ")"
			var r sql.Result
			err := floorRetry(func() (err error) { r, err = db.ExecContext(ctx, q); return err })
			if err != nil {
				return err
			}
			if k, _ := r.RowsAffected(); k != int64(len(ids)) {
				return fmt.Errorf("floor: completed %d of %d", k, len(ids))
			}
			if completed.Add(int64(len(ids))) == int64(n) {
				close(allDone)
			}
			ids = ids[:0]
			return nil
		}
		for {
			select {
			case <-ctx.Done():
				return
			case id := <-doneIDs:
				ids = append(ids, id)
				if len(ids) >= floorDoneBatch {
					if err := flush(); err != nil {
						errc <- err
						return
					}
				}
			case <-tick.C:
				if err := flush(); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	// The producer: fetch up to the free handlers, hand each job to a
	// handler of its own; cooldown after every fetch, a poll (or an insert)
	// after an empty one, a freed handler when all are busy.
	bg.Add(1)
	go func() {
		defer bg.Done()
		for ctx.Err() == nil {
			limit := maxWorkers - int(running.Load())
			if limit <= 0 {
				select {
				case <-free:
				case <-ctx.Done():
				}
				continue
			}
			var ids []int64
			err := floorRetry(func() (err error) { ids, err = floorFetch(ctx, db, table, limit); return err })
			if err != nil {
				if ctx.Err() == nil {
					errc <- err
				}
				return
			}
			for _, id := range ids {
				running.Add(1)
				go func() {
					// The no-op job, then its completion to the completer.
					select {
					case doneIDs <- id:
					case <-ctx.Done():
					}
					running.Add(-1)
					signal(free)
				}()
			}
			wait := floorCooldown
			if len(ids) == 0 {
				wait = floorPoll
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-inserted:
				if len(ids) > 0 {
					<-t.C // the cooldown still holds
				}
			case <-ctx.Done():
			}
			t.Stop()
		}
	}()

	cpu0 := markCPU(envOr("BENCH_MY_COMM", "mariadbd"))
	start := time.Now()
	if err := createAll(ctx, n, func(ctx context.Context, from, to int) error {
		var b strings.Builder
		b.WriteString("INSERT INTO " + table + " (args, kind, max_attempts, attempted_by, errors) VALUES ")
		for i := from; i < to; i++ {
			if i > from {
				b.WriteByte(',')
			}
			b.WriteString(`('{"n":` + strconv.Itoa(i) + `}','bench',25,NULL,NULL)`)
		}
		err := floorRetry(func() error { _, err := db.ExecContext(ctx, b.String()); return err })
		signal(inserted)
		return err
	}); err != nil {
		return res, err
	}
	select {
	case <-allDone:
	case err := <-errc:
		return res, err
	case <-time.After(10 * time.Minute):
		return res, errors.New("floor: jobs did not finish in 10 minutes")
	}
	elapsed, to := time.Since(start), markCPU(envOr("BENCH_MY_COMM", "mariadbd"))
	cancel()
	bg.Wait()
	var left int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table+" WHERE state <> 'completed'").Scan(&left); err != nil {
		return res, err
	}
	if left != 0 {
		return res, fmt.Errorf("floor: %d jobs not completed", left)
	}
	if k := floorDeadlocks.Swap(0); k > 0 {
		fmt.Fprintf(os.Stderr, "  floor: %d deadlocks retried\n", k)
	}
	res.perSec = float64(n) / elapsed.Seconds()
	res.self, res.db = to.perTask(cpu0, n)
	return res, nil
}

// floorFetch is River's JobGetAvailable on MariaDB: lock up to limit
// available jobs in priority order, skipping those another fetch holds,
// read them whole, and mark them running, in one transaction.
func floorFetch(ctx context.Context, db *sql.DB, table string, limit int) ([]int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "SELECT id, args, attempt, attempted_at, attempted_by, created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags FROM "+table+
		" WHERE state = 'available' AND queue = 'default' AND scheduled_at <= NOW(6) ORDER BY priority, scheduled_at, id LIMIT "+strconv.Itoa(limit)+" FOR UPDATE SKIP LOCKED")
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		// Read as River reads them (it decodes the whole row into a job).
		var id int64
		var args, kind, meta, queue, state, tags string
		var attempt, maxAttempts, prio int
		var attemptedAt, attemptedBy, errs, finalized sql.NullString
		var created, sched string
		if err := rows.Scan(&id, &args, &attempt, &attemptedAt, &attemptedBy, &created, &errs, &finalized, &kind, &maxAttempts, &meta, &prio, &queue, &state, &sched, &tags); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET state = 'running', attempt = attempt + 1, attempted_at = NOW(6), attempted_by = JSON_ARRAY_APPEND(COALESCE(attempted_by, '[]'), '$', 'floor')"+floorLogAppend+" WHERE id IN ("+joinIDs(ids)+")"); err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}

// floorDeadlocks counts the transactions InnoDB chose as deadlock victims
// (the fetch's and the completer's UPDATEs lock index entries in different
// orders); any queue on InnoDB must retry them, so the floor does.
var floorDeadlocks atomic.Int64

func floorRetry(f func() error) error {
	for {
		err := f()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1213 {
			return err
		}
		floorDeadlocks.Add(1)
	}
}

// Measurement only (BENCH_FLOOR_EXTRA=indexes,log): what flow's row
// carries beyond River's, on the floor, to split the gap between the two.
// indexes: flow's six further secondary indexes, four of them over keys
// every job here lacks (NULL), one over an empty parent, one listing by
// kind and state; log: a schedule log column appended to at the claim and
// at completion, as flow's set and hold append theirs.
const floorExtraIndexes = `ALTER TABLE %s ADD COLUMN unique_live VARCHAR(128) NULL, ADD COLUMN seq_live VARCHAR(128) NULL,
	ADD COLUMN rate_pending VARCHAR(128) NULL, ADD COLUMN fair_pending VARCHAR(128) NULL,
	ADD COLUMN parent_id VARCHAR(26) NOT NULL DEFAULT '',
	ADD UNIQUE KEY unique_idx (kind, unique_live), ADD KEY seq_idx (kind, seq_live, created_at, id),
	ADD KEY rate_idx (kind, rate_pending), ADD KEY fair_idx (kind, fair_pending, scheduled_at),
	ADD KEY parent_idx (parent_id, id), ADD KEY list_idx (kind, state, id)`

var floorLogAppend string

func floorExtra(what string) bool {
	for _, w := range strings.Split(os.Getenv("BENCH_FLOOR_EXTRA"), ",") {
		if strings.TrimSpace(w) == what {
			return true
		}
	}
	return false
}

func joinIDs(ids []int64) string {
	b := make([]byte, 0, len(ids)*7)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(b)
}
