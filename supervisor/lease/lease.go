// Package lease lets several supervisors share one database (PostgreSQL or
// MySQL/MariaDB) so that one of them leads: a lease row per fleet with a
// holder, the leader's worker URL, a term and an expiry on the database's
// clock. Leadership is taken only when the row has expired, and taking it
// increments the term; the leader renews it well before it expires and
// trusts itself only for less than the lease from the start of its last
// successful renewal (River's leader election is the model). The admin task
// changes of the fleet are stored beside it, written only by the holder of
// the current term.
package lease

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// ErrNotLeader is returned by writes from a supervisor whose term is over.
var ErrNotLeader = errors.New("lease: not the leader (term over)")

// dialect holds what differs between the engines; statements use ? and are
// rewritten to $n for PostgreSQL.
type dialect struct {
	driver string
	schema []string
	now    string // the database's clock
	plus   string // now plus ? microseconds
	share  string // lock a row for reading
	upsert string // store one task change: name, task_id, spec, removed
	// dedupUpsert ends a multi-row insert of dedup keys: a key seen again
	// keeps its latest time.
	dedupUpsert string
	numbers     bool // placeholders are $1, $2…
}

var postgres = dialect{
	driver: "pgx",
	schema: []string{
		`SELECT pg_advisory_xact_lock(7300730073)`, // CREATE TABLE IF NOT EXISTS is not atomic in PostgreSQL
		`CREATE TABLE IF NOT EXISTS fulcrum_supervisor_lease (
			name text PRIMARY KEY, holder text NOT NULL, url text NOT NULL,
			term bigint NOT NULL, expires_at timestamptz NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS fulcrum_supervisor_tasks (
			name text NOT NULL, task_id text NOT NULL, spec text, removed boolean NOT NULL,
			PRIMARY KEY (name, task_id))`,
		`CREATE TABLE IF NOT EXISTS fulcrum_supervisor_dedup (
			name text NOT NULL, k bigint NOT NULL, at bigint NOT NULL, PRIMARY KEY (name, k))`,
		`CREATE INDEX IF NOT EXISTS fulcrum_supervisor_dedup_at ON fulcrum_supervisor_dedup (name, at)`,
	},
	dedupUpsert: ` ON CONFLICT (name, k) DO UPDATE SET at = EXCLUDED.at`,
	now:         `now()`,
	plus:        `now() + ? * interval '1 microsecond'`,
	share:       `FOR SHARE`,
	upsert: `INSERT INTO fulcrum_supervisor_tasks (name, task_id, spec, removed) VALUES (?, ?, ?, ?)
		ON CONFLICT (name, task_id) DO UPDATE SET spec = EXCLUDED.spec, removed = EXCLUDED.removed`,
	numbers: true,
}

var mariadb = dialect{
	driver: "mysql",
	schema: []string{
		`CREATE TABLE IF NOT EXISTS fulcrum_supervisor_lease (
			name varchar(255) PRIMARY KEY, holder varchar(255) NOT NULL, url text NOT NULL,
			term bigint NOT NULL, expires_at datetime(6) NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS fulcrum_supervisor_tasks (
			name varchar(255) NOT NULL, task_id varchar(255) NOT NULL, spec longtext, removed boolean NOT NULL,
			PRIMARY KEY (name, task_id))`,
		`CREATE TABLE IF NOT EXISTS fulcrum_supervisor_dedup (
			name varchar(255) NOT NULL, k bigint NOT NULL, at bigint NOT NULL, PRIMARY KEY (name, k), KEY dedup_at (name, at))`,
	},
	dedupUpsert: ` ON DUPLICATE KEY UPDATE at = VALUES(at)`,
	now:         `NOW(6)`,
	plus:        `NOW(6) + INTERVAL ? MICROSECOND`,
	share:       `LOCK IN SHARE MODE`,
	upsert: `INSERT INTO fulcrum_supervisor_tasks (name, task_id, spec, removed) VALUES (?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE spec = VALUES(spec), removed = VALUES(removed)`,
}

// q rewrites ? placeholders for the dialect and fills NOW and PLUS.
func (d *dialect) q(s string) string {
	s = strings.ReplaceAll(s, "NOW", d.now) // before PLUS, which may hold the dialect's NOW(6)
	s = strings.ReplaceAll(s, "PLUS", d.plus)
	s = strings.ReplaceAll(s, "SHARE", d.share)
	if !d.numbers {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Lease is one supervisor's handle on its fleet's lease row.
type Lease struct {
	db           *sql.DB
	d            *dialect
	name, holder string
	url          string
	ttl          time.Duration
}

// Open connects to the database at dsn (postgres://… or mysql://…) and
// creates the tables if they do not exist. name is the fleet's lease,
// holder this process (unique), url its worker URL.
func Open(ctx context.Context, dsn, name, holder, url string, ttl time.Duration) (*Lease, error) {
	d, driverDSN, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("ha.database: %w", err)
	}
	db, err := sql.Open(d.driver, driverDSN)
	if err != nil {
		return nil, fmt.Errorf("ha.database: %w", err)
	}
	db.SetMaxOpenConns(4)
	err = inTx(ctx, db, func(tx *sql.Tx) error {
		for _, s := range d.schema {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ha.database: create tables: %w", err)
	}
	return &Lease{db: db, d: d, name: name, holder: holder, url: url, ttl: ttl}, nil
}

// parseDSN picks the dialect by scheme; a mysql:// URL becomes the driver's
// DSN (user:pass@tcp(host:port)/db).
func parseDSN(dsn string) (*dialect, string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, "", err
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return &postgres, dsn, nil
	case "mysql", "mariadb":
		c := mysql.NewConfig()
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
		c.Net, c.Addr = "tcp", u.Host
		if u.Port() == "" {
			c.Addr = u.Host + ":3306"
		}
		c.DBName = strings.TrimPrefix(u.Path, "/")
		c.ParseTime = true
		return &mariadb, c.FormatDSN(), nil
	}
	return nil, "", fmt.Errorf("scheme %q: want postgres:// or mysql://", u.Scheme)
}

func inTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Close closes the connections.
func (l *Lease) Close() { l.db.Close() }

// Acquire takes the lease if it is free or expired (incrementing the term)
// and reports the term and whether this process now leads; otherwise it
// reports the current leader's URL and term.
func (l *Lease) Acquire(ctx context.Context) (term uint64, leading bool, leaderURL string, err error) {
	us := l.ttl.Microseconds()
	err = inTx(ctx, l.db, func(tx *sql.Tx) error {
		var t int64
		var live bool
		err := tx.QueryRowContext(ctx, l.d.q(`SELECT term, url, expires_at > NOW FROM fulcrum_supervisor_lease WHERE name = ? FOR UPDATE`),
			l.name).Scan(&t, &leaderURL, &live)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// A concurrent insert makes this fail on the key: not leading
			// this time, the next try sees the row.
			_, err = tx.ExecContext(ctx, l.d.q(`INSERT INTO fulcrum_supervisor_lease (name, holder, url, term, expires_at) VALUES (?, ?, ?, 1, PLUS)`),
				l.name, l.holder, l.url, us)
			term, leading, leaderURL = 1, err == nil, l.url
			return err
		case err != nil:
			return err
		case live:
			term = uint64(t)
			return nil
		}
		_, err = tx.ExecContext(ctx, l.d.q(`UPDATE fulcrum_supervisor_lease SET holder = ?, url = ?, term = term + 1, expires_at = PLUS WHERE name = ?`),
			l.holder, l.url, us, l.name)
		term, leading, leaderURL = uint64(t+1), err == nil, l.url
		return err
	})
	if err != nil {
		return 0, false, "", err
	}
	return term, leading, leaderURL, nil
}

// Leader reads who leads now: the worker URL and term of an unexpired
// lease; "" when none is live.
func (l *Lease) Leader(ctx context.Context) (url string, term uint64, err error) {
	var t int64
	err = l.db.QueryRowContext(ctx, l.d.q(`SELECT url, term FROM fulcrum_supervisor_lease WHERE name = ? AND expires_at > NOW`),
		l.name).Scan(&url, &t)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return url, uint64(t), err
}

// Renew extends the lease of term; false (and no error) when the term is
// over: the lease ran out before this renewal (the database's clock says
// so; renewals slower than the lease) or another supervisor took it.
func (l *Lease) Renew(ctx context.Context, term uint64) (bool, error) {
	res, err := l.db.ExecContext(ctx, l.d.q(`UPDATE fulcrum_supervisor_lease SET expires_at = PLUS
		WHERE name = ? AND holder = ? AND term = ? AND expires_at > NOW`),
		l.ttl.Microseconds(), l.name, l.holder, int64(term))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Release ends term at once (a clean shutdown), so a standby need not wait
// for the lease to expire.
func (l *Lease) Release(ctx context.Context, term uint64) error {
	_, err := l.db.ExecContext(ctx, l.d.q(`UPDATE fulcrum_supervisor_lease SET expires_at = PLUS
		WHERE name = ? AND holder = ? AND term = ?`), -1, l.name, l.holder, int64(term))
	return err
}

// SaveTasks stores admin task changes (add: kept with its spec; remove:
// kept as removed), in one transaction that only commits while term still
// holds the lease: a deposed leader cannot overwrite its successor's.
func (l *Lease) SaveTasks(ctx context.Context, term uint64, add []protocol.Task, remove []string) error {
	return inTx(ctx, l.db, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, l.d.q(`SELECT 1 FROM fulcrum_supervisor_lease
			WHERE name = ? AND holder = ? AND term = ? AND expires_at > NOW SHARE`),
			l.name, l.holder, int64(term)).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotLeader
		}
		if err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, l.d.q(l.d.upsert))
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, t := range add {
			var spec any
			if len(t.Spec) > 0 {
				spec = string(t.Spec)
			}
			if _, err := stmt.ExecContext(ctx, l.name, t.TaskID, spec, false); err != nil {
				return err
			}
		}
		for _, id := range remove {
			if _, err := stmt.ExecContext(ctx, l.name, id, nil, true); err != nil {
				return err
			}
		}
		return nil
	})
}

// ForgetTasks drops the stored changes of tasks the source itself changed:
// an admin change stands until the source changes the same task.
func (l *Lease) ForgetTasks(ctx context.Context, term uint64, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return inTx(ctx, l.db, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, l.d.q(`SELECT 1 FROM fulcrum_supervisor_lease
			WHERE name = ? AND holder = ? AND term = ? SHARE`), l.name, l.holder, int64(term)).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotLeader
		}
		if err != nil {
			return err
		}
		for len(ids) > 0 {
			n := min(len(ids), 500)
			args := []any{l.name}
			for _, id := range ids[:n] {
				args = append(args, id)
			}
			in := strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
			if _, err := tx.ExecContext(ctx, l.d.q(`DELETE FROM fulcrum_supervisor_tasks WHERE name = ? AND task_id IN (`+in+`)`), args...); err != nil {
				return err
			}
			ids = ids[n:]
		}
		return nil
	})
}

// LoadTasks returns the stored admin changes: tasks added (with specs) and
// ids removed, in task id order.
func (l *Lease) LoadTasks(ctx context.Context) (add []protocol.Task, remove []string, err error) {
	rows, err := l.db.QueryContext(ctx, l.d.q(`SELECT task_id, spec, removed FROM fulcrum_supervisor_tasks WHERE name = ? ORDER BY task_id`), l.name)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var spec sql.NullString
		var removed bool
		if err := rows.Scan(&id, &spec, &removed); err != nil {
			return nil, nil, err
		}
		if removed {
			remove = append(remove, id)
			continue
		}
		t := protocol.Task{TaskID: id}
		if spec.Valid {
			t.Spec = json.RawMessage(spec.String)
		}
		add = append(add, t)
	}
	return add, remove, rows.Err()
}

// DedupLog is the fleet's deduplication window in the database: every key
// the sink delivered, with when it was first published, so the next leader
// recognises a payload its predecessor published. Append never blocks: one
// goroutine writes what accumulated while the previous write ran (group
// commit), so the cost per message is a share of one multi-row statement.
type DedupLog struct {
	l      *Lease
	window time.Duration

	mu      sync.Mutex
	pending []dedup.Entry
	wake    chan struct{}
	done    chan struct{}
	closed  bool
	err     func(error)
	pruned  time.Time
	dropped int
	// sendingOff: after a failed Sending, Sending is skipped until then, so
	// a database that is away does not hold every batch of the sink for
	// the statement's timeout (the uncertain set is then incomplete).
	sendingOff atomic.Int64
}

// maxDedupPending bounds what waits for the database; past it the oldest
// keys are dropped (a replay of those would be published again).
const maxDedupPending = 1 << 20

// DedupLog starts the writer of the fleet's dedup window; onErr (may be
// nil) hears about failed writes.
func (l *Lease) DedupLog(window time.Duration, onErr func(error)) *DedupLog {
	if onErr == nil {
		onErr = func(error) {}
	}
	d := &DedupLog{l: l, window: window, wake: make(chan struct{}, 1), done: make(chan struct{}), err: onErr}
	go d.run()
	return d
}

// Load reads the keys recorded since since.
func (d *DedupLog) Load(ctx context.Context, since time.Time) ([]dedup.Entry, error) {
	rows, err := d.l.db.QueryContext(ctx, d.l.d.q(`SELECT k, at FROM fulcrum_supervisor_dedup WHERE name = ? AND at >= ?`),
		d.l.name, since.UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dedup.Entry
	for rows.Next() {
		var k, at int64
		if err := rows.Scan(&k, &at); err != nil {
			return nil, err
		}
		out = append(out, dedup.Entry{Key: uint64(k), At: at})
	}
	return out, rows.Err()
}

// Sending stores entries as being sent (their time negated), before the
// sink hands them to the destination: one statement per batch, waited
// for, so that after a crash the next leader knows exactly which keys
// were uncertain (handed over, never confirmed). It costs a round trip to
// the database per batch on the publish path, not per message.
func (d *DedupLog) Sending(entries []dedup.Entry) error {
	if len(entries) == 0 || time.Now().UnixNano() < d.sendingOff.Load() {
		return nil
	}
	neg := make([]dedup.Entry, len(entries))
	for i, e := range entries {
		neg[i] = dedup.Entry{Key: e.Key, At: -e.At}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := d.insert(ctx, neg); err != nil {
		d.sendingOff.Store(time.Now().Add(5 * time.Second).UnixNano())
		return fmt.Errorf("%w (not noted for 5 s)", err)
	}
	return nil
}

// Flush does nothing: Append already queues for the writer.
func (d *DedupLog) Flush() error { return nil }

// Uncertain lists the keys stored as being sent and never confirmed.
func (d *DedupLog) Uncertain(ctx context.Context) ([]uint64, error) {
	rows, err := d.l.db.QueryContext(ctx, d.l.d.q(`SELECT k FROM fulcrum_supervisor_dedup WHERE name = ? AND at < 0`), d.l.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, uint64(k))
	}
	return out, rows.Err()
}

// Append queues entries for the writer.
func (d *DedupLog) Append(entries []dedup.Entry) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errors.New("lease: dedup log closed")
	}
	d.pending = append(d.pending, entries...)
	if over := len(d.pending) - maxDedupPending; over > 0 {
		d.pending = append(d.pending[:0], d.pending[over:]...)
		d.dropped += over
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

// Close writes what is queued (for at most a few seconds) and stops.
func (d *DedupLog) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	close(d.wake)
	<-d.done
	return nil
}

func (d *DedupLog) run() {
	defer close(d.done)
	var batch []dedup.Entry
	for {
		_, open := <-d.wake
		d.mu.Lock()
		batch, d.pending = d.pending, batch[:0]
		dropped := d.dropped
		d.dropped = 0
		d.mu.Unlock()
		if dropped > 0 {
			d.err(fmt.Errorf("dedup window: %d keys not stored (the database is behind)", dropped))
		}
		if len(batch) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := d.write(ctx, batch); err != nil {
				d.err(fmt.Errorf("dedup window: store %d keys: %w", len(batch), err))
			}
			cancel()
		}
		if !open {
			return
		}
	}
}

// dedupChunk rows per INSERT: well under both engines' placeholder limits.
const dedupChunk = 1000

func (d *DedupLog) write(ctx context.Context, batch []dedup.Entry) error {
	if err := d.insert(ctx, batch); err != nil {
		return err
	}
	// Keys older than the window are dropped now and then, not per write
	// (uncertain ones too: their time is stored negated).
	if d.window > 0 && time.Since(d.pruned) >= d.window/4 {
		d.pruned = time.Now()
		cut := time.Now().Add(-d.window).UnixNano()
		if _, err := d.l.db.ExecContext(ctx, d.l.d.q(`DELETE FROM fulcrum_supervisor_dedup WHERE name = ? AND (at BETWEEN 0 AND ? OR at BETWEEN ? AND 0)`),
			d.l.name, cut, -cut); err != nil {
			return fmt.Errorf("prune: %w", err)
		}
	}
	return nil
}

// insert stores entries, a few statements of many rows. A key twice in
// one statement would make PostgreSQL's upsert fail ("cannot affect row a
// second time"): the last of each key is kept.
func (d *DedupLog) insert(ctx context.Context, batch []dedup.Entry) error {
	batch = lastPerKey(batch)
	for len(batch) > 0 {
		n := min(len(batch), dedupChunk)
		var b strings.Builder
		b.WriteString(`INSERT INTO fulcrum_supervisor_dedup (name, k, at) VALUES `)
		args := make([]any, 0, 3*n)
		for i, e := range batch[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?)")
			args = append(args, d.l.name, int64(e.Key), e.At)
		}
		b.WriteString(d.l.d.dedupUpsert)
		if _, err := d.l.db.ExecContext(ctx, d.l.d.q(b.String()), args...); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// lastPerKey drops all but the last entry of each key (the batch itself
// when no key repeats, the common case).
func lastPerKey(batch []dedup.Entry) []dedup.Entry {
	seen := make(map[uint64]int, len(batch))
	dup := false
	for i, e := range batch {
		if _, ok := seen[e.Key]; ok {
			dup = true
		}
		seen[e.Key] = i
	}
	if !dup {
		return batch
	}
	out := make([]dedup.Entry, 0, len(seen))
	for i, e := range batch {
		if seen[e.Key] == i {
			out = append(out, e)
		}
	}
	return out
}
