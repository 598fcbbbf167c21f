package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// MySQL 8 and MariaDB 10.6+ (both have SKIP LOCKED). The session runs READ
// COMMITTED so that the claim's locking read takes no gap locks (Asyncflow's
// deadlock story), and claim_idx covers (task_type, status, order_time) so the
// locking read touches only the rows it returns.
var myMigrations = [][]string{{
	`CREATE TABLE IF NOT EXISTS {p}task_types (task_type VARCHAR(64) NOT NULL PRIMARY KEY, schedule_limit INT NOT NULL,
		schedule_interval_ms BIGINT NOT NULL, max_processing_ms BIGINT NOT NULL, max_retry_num INT NOT NULL,
		retry_interval_ms BIGINT NOT NULL, max_retry_interval_ms BIGINT NOT NULL, create_time BIGINT NOT NULL, modify_time BIGINT NOT NULL)
		ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE IF NOT EXISTS {p}tasks (task_id CHAR(26) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
		task_type VARCHAR(64) NOT NULL, task_stage VARCHAR(64) NOT NULL, status TINYINT NOT NULL, task_context TEXT NULL,
		priority INT NOT NULL, order_time BIGINT NOT NULL, crt_retry_num INT NOT NULL, max_retry_num INT NOT NULL,
		retry_interval_ms BIGINT NOT NULL, max_retry_interval_ms BIGINT NOT NULL, owner VARCHAR(128) NOT NULL DEFAULT '',
		lease VARCHAR(64) NOT NULL DEFAULT '', lease_expiry BIGINT NOT NULL DEFAULT 0, schedule_log TEXT NOT NULL,
		create_time BIGINT NOT NULL, modify_time BIGINT NOT NULL,
		KEY claim_idx (task_type, status, order_time), KEY lease_idx (status, lease_expiry),
		KEY ended_idx (status, modify_time), KEY list_idx (task_type, status, task_id))
		ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
}, {
	// Unique tasks: one live (pending or processing) task per type and key.
	// No partial indexes here: a stored generated column holds the key
	// only while the task is live (NULL otherwise, and NULLs never clash).
	`ALTER TABLE {p}tasks ADD COLUMN unique_key VARCHAR(128) NOT NULL DEFAULT '',
		ADD COLUMN unique_live VARCHAR(128) AS (CASE WHEN unique_key <> '' AND status IN (1, 2) THEN unique_key END) STORED,
		ADD UNIQUE KEY unique_idx (task_type, unique_live)`,
	`ALTER TABLE {p}task_types ADD COLUMN paused TINYINT NOT NULL DEFAULT 0`,
}, {
	// Periodic types: the schedule and the last tick fired.
	`ALTER TABLE {p}task_types ADD COLUMN cron VARCHAR(128) NOT NULL DEFAULT '', ADD COLUMN cron_stage VARCHAR(64) NOT NULL DEFAULT '',
		ADD COLUMN cron_context TEXT NULL, ADD COLUMN cron_last BIGINT NOT NULL DEFAULT 0`,
}}

func myLog(event string) string {
	return "JSON_ARRAY_APPEND(CASE WHEN JSON_LENGTH(schedule_log) >= 10 THEN JSON_REMOVE(schedule_log, '$[0]') ELSE schedule_log END, '$', " +
		"JSON_OBJECT('at', ?, 'worker', ?, 'stage', task_stage, 'event', '" + event + "'))"
}

// myDialect is MySQL's and MariaDB's SQL.
func myDialect() *dialect {
	return &dialect{name: "mysql", migrations: myMigrations, logExpr: myLog, queries: myQueries,
		retryable: func(err error) bool {
			var me *mysql.MySQLError
			return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) // deadlock, lock wait timeout
		}}
}

// myQueries: no RETURNING (in MySQL 8), so the claim is a locking read
// then an UPDATE of the ids it returned, in one transaction.
func myQueries(q *queries, b qparts) {
	t := b.t
	skip, guard := " FOR UPDATE SKIP LOCKED", ""
	if b.redisLock {
		skip, guard = "", " AND status = "+b.pending
	}
	q.holdSel = "SELECT " + b.cols + " FROM " + t + " WHERE " + b.due + skip
	q.holdSelNoLog = "SELECT " + colsOf("", false) + " FROM " + t + " WHERE " + b.due + skip
	q.holdUpd = "UPDATE " + t + " SET " + b.set + " WHERE task_id IN (%s)" + guard
	q.lockSel = "SELECT " + b.cols + " FROM " + t + " WHERE task_id IN (%s) ORDER BY task_id FOR UPDATE"
	q.rescueSel = "SELECT " + b.cols + " FROM " + t + " WHERE status = " + b.proc + " AND lease_expiry < ? ORDER BY lease_expiry LIMIT ? FOR UPDATE SKIP LOCKED"
	q.prune = "DELETE FROM " + t + " WHERE status IN (" + b.ended + ") AND modify_time < ? ORDER BY modify_time LIMIT ?"
	// Assignments apply left to right: cron_last compares the old cron
	// before cron itself changes.
	set := []string{"cron_last = IF(cron = VALUES(cron), cron_last, VALUES(cron_last))", "cron = VALUES(cron)"}
	for _, c := range b.typeUpd {
		set = append(set, c+" = VALUES("+c+")")
	}
	q.upsertType = b.typeIns + " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	q.insertUnique = q.insertOne + " ON DUPLICATE KEY UPDATE task_id = task_id" // no change: 0 rows affected
	q.heartbeat = "UPDATE " + t + " t JOIN " + b.p + "task_types ty ON ty.task_type = t.task_type SET t.lease_expiry = ? + ty.max_processing_ms * 1000, t.modify_time = ?" +
		" WHERE t.owner = ? AND t.status = " + b.proc
	q.heldBy = "SELECT task_id, lease, lease_expiry FROM " + t + " WHERE owner = ? AND status = " + b.proc
	q.workerSel = "SELECT " + b.cols + " FROM " + t + " WHERE owner = ? AND status = " + b.proc + " ORDER BY task_id FOR UPDATE"
}

// mysqlDSN turns what follows mysql:// into the driver's DSN. Both the
// driver's own form (user:pass@tcp(host:3306)/db?params) and a URL
// (user:pass@host:3306/db?params) are accepted.
func mysqlDSN(spec string) (*mysql.Config, error) {
	if strings.Contains(spec, "(") {
		return mysql.ParseDSN(spec)
	}
	u, err := url.Parse("mysql://" + spec)
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	if strings.Contains(cfg.DBName, "/") {
		return nil, fmt.Errorf("database name %q has a /", cfg.DBName)
	}
	if u.RawQuery == "" {
		return cfg, nil
	}
	// Let the driver read the parameters as it would in its own form.
	withParams, err := mysql.ParseDSN("/?" + u.RawQuery)
	if err != nil {
		return nil, err
	}
	withParams.User, withParams.Passwd, withParams.Net, withParams.Addr, withParams.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
	return withParams, nil
}

func openMySQL(ctx context.Context, dsn string) (*SQLStore, error) {
	cfg, err := mysqlDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: mysql dsn: %w", err)
	}
	// One round trip per query: the driver interpolates arguments instead
	// of preparing, executing and closing a statement each time.
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	var db *sql.DB
	// MySQL 8 and MariaDB 11.1+ call it transaction_isolation; older
	// MariaDB only knows tx_isolation.
	for _, v := range []string{"transaction_isolation", "tx_isolation"} {
		c := cfg.Clone()
		c.Params = map[string]string{v: "'READ-COMMITTED'"}
		for k, pv := range cfg.Params {
			c.Params[k] = pv
		}
		conn, cerr := mysql.NewConnector(c)
		if cerr != nil {
			return nil, fmt.Errorf("store: mysql dsn: %w", cerr)
		}
		db = sql.OpenDB(conn)
		err = db.PingContext(ctx)
		if err != nil && strings.Contains(err.Error(), "1193") { // unknown system variable
			db.Close()
			continue
		}
		break
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connect to mysql %s@%s/%s: %w", cfg.User, cfg.Addr, cfg.DBName, err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	d := myDialect()
	d.lockMig = func(ctx context.Context, c *sql.Conn, key string) (func(), error) {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", key).Scan(&got); err != nil {
			return nil, err
		}
		if got.Int64 != 1 {
			return nil, errors.New("GET_LOCK " + key + " timed out after 60s")
		}
		return func() { c.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", key) }, nil
	}
	return &SQLStore{d: d, w: db, r: db}, nil
}
