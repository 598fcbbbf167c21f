package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
)

// liteWriter is SQLite's group commit. SQLite has one writer and, with
// synchronous=FULL, one fsync per commit: with one transaction per hold
// and per set, 64 busy workers queue for about a thousand commits a
// second. The writer goroutine takes every write waiting (up to
// maxGroup), runs each in a savepoint of one transaction, and commits once;
// each caller gets its own outcome, and only after the commit (so an
// acknowledged write is durable, as before). A write that fails is rolled
// back to its savepoint and the others go on.
type liteWriter struct {
	db   *sql.DB
	log  *slog.Logger
	ops  chan *liteOp
	done chan struct{}
	once sync.Once
}

type liteOp struct {
	ctx    context.Context
	fn     func(context.Context, *sql.Tx) error
	result chan error
}

const maxGroup = 128

func newLiteWriter(db *sql.DB, log *slog.Logger) *liteWriter {
	w := &liteWriter{db: db, log: log, ops: make(chan *liteOp, maxGroup), done: make(chan struct{})}
	go w.run()
	return w
}

var errWriterClosed = errors.New("store closed")

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
	return <-op.result // always answered: the group runs to its commit
}

func (w *liteWriter) close() {
	w.once.Do(func() { close(w.done) })
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

func (w *liteWriter) apply(group []*liteOp) {
	results := make([]error, len(group))
	fail := func(err error) {
		for i := range group {
			group[i].result <- err
		}
	}
	ctx := context.Background()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
		return
	}
	for i, op := range group {
		if err := op.ctx.Err(); err != nil {
			results[i] = err // gone before its turn: nothing done
			continue
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
			tx.Rollback()
			fail(err)
			return
		}
		if err := op.fn(context.WithoutCancel(op.ctx), tx); err != nil {
			results[i] = err
			// Undo this write only. If SQLite already rolled the whole
			// transaction back (an I/O error, a full disk), the savepoint
			// is gone: then nothing of the group stands, and every
			// caller hears so.
			if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO op"); rerr != nil {
				tx.Rollback()
				fail(errors.Join(err, rerr))
				return
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE op"); err != nil {
			tx.Rollback()
			fail(err)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		fail(err)
		return
	}
	for i := range group {
		group[i].result <- results[i]
	}
}
