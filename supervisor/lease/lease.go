// Package lease lets several supervisors share one PostgreSQL database so
// that one of them leads: a lease row per fleet with a holder, the leader's
// worker URL, a term and an expiry on the database's clock. Leadership is
// taken only when the row has expired, and taking it increments the term;
// the leader renews it well before it expires and trusts itself only for
// less than the lease from the start of its last successful renewal
// (River's leader election is the model). The admin task changes of the
// fleet are stored beside it, written only by the holder of the current term.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// ErrNotLeader is returned by writes from a supervisor whose term is over.
var ErrNotLeader = errors.New("lease: not the leader (term over)")

const schema = `
CREATE TABLE IF NOT EXISTS fulcrum_supervisor_lease (
	name       text PRIMARY KEY,
	holder     text NOT NULL,
	url        text NOT NULL,
	term       bigint NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS fulcrum_supervisor_tasks (
	name    text NOT NULL,
	task_id text NOT NULL,
	spec    jsonb,
	removed boolean NOT NULL,
	PRIMARY KEY (name, task_id)
);`

// Lease is one supervisor's handle on its fleet's lease row.
type Lease struct {
	db           *pgxpool.Pool
	name, holder string
	url          string
	ttl          time.Duration
}

// Open connects to dsn and creates the tables if they do not exist. name is
// the fleet's lease, holder this process (unique), url its worker URL.
func Open(ctx context.Context, dsn, name, holder, url string, ttl time.Duration) (*Lease, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("ha.database: %w", err)
	}
	cfg.MaxConns = 4
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ha.database: %w", err)
	}
	// Several supervisors starting at once would race on CREATE TABLE IF
	// NOT EXISTS (it is not atomic in PostgreSQL): serialise with an
	// advisory lock.
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7300730073)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schema)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ha.database: create tables: %w", err)
	}
	return &Lease{db: db, name: name, holder: holder, url: url, ttl: ttl}, nil
}

// Close closes the connections.
func (l *Lease) Close() { l.db.Close() }

// TTL is the lease's length.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Acquire takes the lease if it is free or expired (incrementing the term)
// and reports the term and whether this process now leads; otherwise it
// reports the current leader's URL and term.
func (l *Lease) Acquire(ctx context.Context) (term uint64, leading bool, leaderURL string, err error) {
	var t int64
	err = l.db.QueryRow(ctx, `
		INSERT INTO fulcrum_supervisor_lease AS l (name, holder, url, term, expires_at)
		VALUES ($1, $2, $3, 1, now() + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE
			SET holder = EXCLUDED.holder, url = EXCLUDED.url, term = l.term + 1, expires_at = EXCLUDED.expires_at
			WHERE l.expires_at < now()
		RETURNING term`, l.name, l.holder, l.url, l.ttl.Microseconds()).Scan(&t)
	if err == nil {
		return uint64(t), true, l.url, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, "", err
	}
	err = l.db.QueryRow(ctx, `SELECT term, url FROM fulcrum_supervisor_lease WHERE name = $1`, l.name).Scan(&t, &leaderURL)
	return uint64(t), false, leaderURL, err
}

// Renew extends the lease of term; false (and no error) when the term is
// over: another supervisor took the lease.
func (l *Lease) Renew(ctx context.Context, term uint64) (bool, error) {
	tag, err := l.db.Exec(ctx, `
		UPDATE fulcrum_supervisor_lease SET expires_at = now() + $4 * interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now()`,
		l.name, l.holder, int64(term), l.ttl.Microseconds())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Release ends term at once (a clean shutdown), so a standby need not wait
// for the lease to expire.
func (l *Lease) Release(ctx context.Context, term uint64) error {
	_, err := l.db.Exec(ctx, `
		UPDATE fulcrum_supervisor_lease SET expires_at = now() - interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND term = $3`, l.name, l.holder, int64(term))
	return err
}

// SaveTasks stores admin task changes (add: kept with its spec; remove:
// kept as removed), in one transaction that only commits while term still
// holds the lease: a deposed leader cannot overwrite its successor's.
func (l *Lease) SaveTasks(ctx context.Context, term uint64, add []protocol.Task, remove []string) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var ok bool
		err := tx.QueryRow(ctx, `
			SELECT true FROM fulcrum_supervisor_lease
			WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now() FOR SHARE`,
			l.name, l.holder, int64(term)).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotLeader
		}
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, t := range add {
			var spec any
			if len(t.Spec) > 0 {
				spec = string(t.Spec)
			}
			b.Queue(`INSERT INTO fulcrum_supervisor_tasks (name, task_id, spec, removed) VALUES ($1, $2, $3::jsonb, false)
				ON CONFLICT (name, task_id) DO UPDATE SET spec = EXCLUDED.spec, removed = false`, l.name, t.TaskID, spec)
		}
		for _, id := range remove {
			b.Queue(`INSERT INTO fulcrum_supervisor_tasks (name, task_id, spec, removed) VALUES ($1, $2, NULL, true)
				ON CONFLICT (name, task_id) DO UPDATE SET spec = NULL, removed = true`, l.name, id)
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// ForgetTasks drops the stored changes of tasks the source itself changed:
// an admin change stands until the source changes the same task.
func (l *Lease) ForgetTasks(ctx context.Context, term uint64, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := l.db.Exec(ctx, `
		DELETE FROM fulcrum_supervisor_tasks t USING fulcrum_supervisor_lease l
		WHERE t.name = $1 AND t.task_id = ANY($4) AND l.name = $1 AND l.holder = $2 AND l.term = $3`,
		l.name, l.holder, int64(term), ids)
	return err
}

// LoadTasks returns the stored admin changes: tasks added (with specs) and
// ids removed, in task id order.
func (l *Lease) LoadTasks(ctx context.Context) (add []protocol.Task, remove []string, err error) {
	rows, err := l.db.Query(ctx, `SELECT task_id, spec::text, removed FROM fulcrum_supervisor_tasks WHERE name = $1 ORDER BY task_id`, l.name)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var spec *string
		var removed bool
		if err := rows.Scan(&id, &spec, &removed); err != nil {
			return nil, nil, err
		}
		if removed {
			remove = append(remove, id)
			continue
		}
		t := protocol.Task{TaskID: id}
		if spec != nil {
			t.Spec = json.RawMessage(*spec)
		}
		add = append(add, t)
	}
	return add, remove, rows.Err()
}
