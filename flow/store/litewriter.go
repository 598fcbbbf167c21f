package store

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// liteWriter is SQLite's group commit. SQLite has one writer and, with
// synchronous=FULL, one fsync per commit: with one transaction per hold
// and per set, 64 busy workers queue for about a thousand commits a
// second. The writer goroutine takes every write waiting (up to
// maxGroup), runs each in a savepoint of one transaction, and commits once;
// each caller gets its own outcome, and only after the commit (so an
// acknowledged write is durable, as before). A write that fails is rolled
// back to its savepoint and the others go on.
//
// The fsync is pipelined (walPath set, the default synchronous=FULL): the
// writer commits a group with synchronous=NORMAL, which writes the WAL
// frames but does not fsync them, hands the group to the syncer goroutine
// and goes on with the next group at once. The syncer fsyncs the WAL file
// (one fsync covers every group written before it) and only then answers
// the callers, so an answered write is on disk as with FULL, but the one
// writer no longer sits idle through each fsync. SQLite itself fsyncs the
// WAL before a checkpoint copies it into the database, so nothing answered
// is lost to a checkpoint either. Until the fsync, other connections can
// read what a group wrote: a power cut may take back something a reader
// saw, never something a writer was told is done.
type liteWriter struct {
	db   *sql.DB
	log  *slog.Logger
	ops  chan *liteOp
	done chan struct{}
	once sync.Once

	walPath string          // "": answer after the commit (synchronous=normal asked for)
	synced  chan *liteGroup // committed groups waiting for the WAL fsync
	stopped chan struct{}   // closed when the writer and the syncer have ended
	stmts   liteStmts
}

type liteOp struct {
	ctx    context.Context
	fn     func(context.Context, *sql.Tx) error
	result chan error
}

// liteGroup is a committed group and each caller's outcome.
type liteGroup struct {
	ops     []*liteOp
	results []error
}

// liteStmts are the writer's own statements, prepared once on its
// connection (parsing them per write cost as much as a hold's UPDATE).
type liteStmts struct {
	savepoint, release, rollbackTo *sql.Stmt
}

const maxGroup = 128

// newLiteWriter starts the writer. walPath, when set, is the database's
// WAL file, fsynced by the syncer (see liteWriter).
func newLiteWriter(ctx context.Context, db *sql.DB, log *slog.Logger, walPath string) (*liteWriter, error) {
	w := &liteWriter{db: db, log: log, ops: make(chan *liteOp, maxGroup), done: make(chan struct{}),
		walPath: walPath, synced: make(chan *liteGroup, 64), stopped: make(chan struct{})}
	for _, s := range []struct {
		to **sql.Stmt
		q  string
	}{{&w.stmts.savepoint, "SAVEPOINT op"}, {&w.stmts.release, "RELEASE op"}, {&w.stmts.rollbackTo, "ROLLBACK TO op"}} {
		st, err := db.PrepareContext(ctx, s.q)
		if err != nil {
			w.closeStmts()
			return nil, fmt.Errorf("store: prepare %q: %w", s.q, err)
		}
		*s.to = st
	}
	var wal *os.File
	if walPath != "" {
		var err error
		if wal, err = openWAL(walPath); err != nil {
			w.closeStmts()
			return nil, err
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); defer close(w.synced); w.run() }()
	go func() { defer wg.Done(); w.syncer(wal) }()
	go func() { wg.Wait(); w.closeStmts(); close(w.stopped) }()
	return w, nil
}

// openWAL opens the WAL file to fsync it, and fsyncs its directory once,
// so that the file itself survives a power cut. The store keeps its
// connections open, so SQLite keeps this file (it deletes the WAL only
// when the last connection closes).
func openWAL(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("store: open the SQLite WAL %s to fsync it: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // best effort: not every file system syncs directories
		d.Close()
	}
	return f, nil
}

func (w *liteWriter) closeStmts() {
	for _, st := range []*sql.Stmt{w.stmts.savepoint, w.stmts.release, w.stmts.rollbackTo} {
		if st != nil {
			st.Close()
		}
	}
}

var errWriterClosed = errors.New("store closed")

// isBusy reports SQLite's "database is locked" (SQLITE_BUSY).
func isBusy(err error) bool { return liteBusy(err) }

// do runs fn in the next group and returns its outcome once the group is
// committed (or rolled back). fn gets a context that is not cancelled:
// an interrupted SQLite statement can roll back the whole transaction,
// the other callers' writes with it. A caller whose ctx ended before its
// turn is skipped.
func (w *liteWriter) do(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	op := &liteOp{ctx: ctx, fn: fn, result: make(chan error, 1)}
	select {
	case w.ops <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return errWriterClosed
	}
	return <-op.result // always answered: the group runs to its commit and fsync
}

// anyWaiting reports whether a caller of the group still waits for it.
func anyWaiting(group []*liteOp) bool {
	for _, op := range group {
		if op.ctx.Err() == nil {
			return true
		}
	}
	return false
}

// close stops the writer and waits until every group taken is answered.
func (w *liteWriter) close() {
	w.once.Do(func() { close(w.done) })
	<-w.stopped
}

func (w *liteWriter) run() {
	for {
		var group []*liteOp
		select {
		case op := <-w.ops:
			group = append(group, op)
		case <-w.done:
			w.drain()
			return
		}
	more:
		for len(group) < maxGroup {
			select {
			case op := <-w.ops:
				group = append(group, op)
			default:
				break more
			}
		}
		w.apply(group)
	}
}

// drain answers the writes still queued when the store closes.
func (w *liteWriter) drain() {
	for {
		select {
		case op := <-w.ops:
			op.result <- errWriterClosed
		default:
			return
		}
	}
}

// syncer answers committed groups once the WAL is fsynced: it takes every
// group waiting and fsyncs once for all of them.
func (w *liteWriter) syncer(wal *os.File) {
	if wal != nil {
		defer wal.Close()
	}
	for g := range w.synced {
		groups := []*liteGroup{g}
	more:
		for {
			select {
			case g, ok := <-w.synced:
				if !ok {
					break more
				}
				groups = append(groups, g)
			default:
				break more
			}
		}
		var err error
		if wal != nil {
			if err = wal.Sync(); err != nil {
				// The commit is written but may not be on disk: the callers
				// hear it failed (a retried create may then make a task
				// twice, as after a lost answer).
				err = fmt.Errorf("fsync %s: %w", w.walPath, err)
				w.log.Error("flow store: fsync of the SQLite WAL failed", "err", err)
			}
		}
		for _, g := range groups {
			for i, op := range g.ops {
				if err != nil {
					op.result <- err
				} else {
					op.result <- g.results[i]
				}
			}
		}
	}
}

func (w *liteWriter) apply(group []*liteOp) {
	results := make([]error, len(group))
	fail := func(err error) {
		for i := range group {
			group[i].result <- err
		}
	}
	ctx := context.Background()
	// The group keeps the one connection from its first statement to its
	// last, so no write outside a group runs under the relaxed setting.
	conn, err := w.db.Conn(ctx)
	if err != nil {
		fail(err)
		return
	}
	defer conn.Close()
	if w.walPath != "" {
		// The syncer fsyncs instead; every other write on the connection
		// (outside a group) keeps synchronous=FULL. SQLite refuses the
		// change inside a transaction, so it is made around it.
		if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
			fail(err)
			return
		}
		defer func() {
			if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
				// Writes outside groups would go unsynced: drop the connection.
				w.log.Error("flow store: restoring synchronous=FULL failed; reconnecting", "err", err)
				conn.Raw(func(any) error { return sqldriver.ErrBadConn })
			}
		}()
	}
	// BEGIN IMMEDIATE waits up to busy_timeout for another process (or
	// store) on the same file to finish its write. SQLite's busy handler
	// polls, every 100 ms once it has waited a while, so another process
	// writing back to back can keep this one out past any one timeout (on
	// a loaded machine three timeouts in a row did, and its callers got
	// SQLITE_BUSY). Nothing of the group has run yet: try again for as long
	// as one of its callers still waits, as a row lock on PostgreSQL waits
	// for as long as its statement may.
	var tx *sql.Tx
	for warned := false; ; {
		tx, err = conn.BeginTx(ctx, nil)
		if err == nil {
			break
		}
		if !isBusy(err) || !anyWaiting(group) {
			fail(err)
			return
		}
		if !warned {
			warned = true
			w.log.Warn("flow store: another process has held the SQLite file's write lock past busy_timeout; waiting", "writes", len(group), "err", err)
		}
		// SQLite answers some BUSYs at once, without its handler: no spin.
		time.Sleep(time.Millisecond)
	}
	// A lone write needs no savepoint: if it fails, the transaction
	// holds nothing else and is rolled back whole.
	alone := len(group) == 1
	savepoint, release, rollbackTo := tx.StmtContext(ctx, w.stmts.savepoint), tx.StmtContext(ctx, w.stmts.release), tx.StmtContext(ctx, w.stmts.rollbackTo)
	for i, op := range group {
		if err := op.ctx.Err(); err != nil {
			results[i] = err // gone before its turn: nothing done
			continue
		}
		if !alone {
			if _, err := savepoint.ExecContext(ctx); err != nil {
				tx.Rollback()
				fail(err)
				return
			}
		}
		if err := op.fn(context.WithoutCancel(op.ctx), tx); err != nil {
			results[i] = err
			if alone {
				tx.Rollback()
				fail(err)
				return
			}
			// Undo this write only. If SQLite already rolled the whole
			// transaction back (an I/O error, a full disk), the savepoint
			// is gone: then nothing of the group stands, and every
			// caller hears so.
			if _, rerr := rollbackTo.ExecContext(ctx); rerr != nil {
				tx.Rollback()
				fail(errors.Join(err, rerr))
				return
			}
		}
		if !alone {
			if _, err := release.ExecContext(ctx); err != nil {
				tx.Rollback()
				fail(err)
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		fail(err)
		return
	}
	if w.walPath == "" {
		for i := range group {
			group[i].result <- results[i]
		}
		return
	}
	w.synced <- &liteGroup{ops: group, results: results}
}
