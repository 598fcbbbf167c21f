package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
)

// TxCreator creates tasks inside an application's own database
// transaction, on the database a flow server uses (River's InsertTx, the
// transactional outbox): the tasks exist only if the application's
// transaction commits, together with whatever else it wrote. On PostgreSQL
// the insert also NOTIFYs in the transaction, so the commit wakes waiting
// holds on every server. The tables must exist (a server created them).
type TxCreator struct{ s *SQLStore }

// NewTxCreator makes a TxCreator for dialect "postgres", "mysql" or
// "sqlite" and the servers' table prefix ("" means "flow_").
func NewTxCreator(dialectName, prefix string) (*TxCreator, error) {
	if prefix == "" {
		prefix = "flow_"
	}
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("store: table prefix %q: use at most 40 letters, digits and _", prefix)
	}
	for _, d := range drivers {
		if d.name == dialectName {
			s := &SQLStore{p: prefix}
			s.drv = d.sqlOnly(s)
			s.q = buildQueries(s.drv, prefix, false)
			return &TxCreator{s: s}, nil
		}
	}
	return nil, fmt.Errorf("store: dialect %q: want postgres, mysql or sqlite", dialectName)
}

// Create validates tasks, reads their types' configs and inserts them in
// tx. The answer lists the ids in order; a task whose unique_key is live
// for its type is not inserted and answers that task's id, listed in
// ExistingIndex. On MySQL run tx at READ COMMITTED, as the servers do, so
// a unique key committed by another transaction is seen.
func (c *TxCreator) Create(ctx context.Context, tx *sql.Tx, tasks []flow.NewTask) (*flow.CreateTaskResponse, error) {
	return c.create(ctx, sqlTx{tx}, tasks)
}

func (c *TxCreator) create(ctx context.Context, tx txRunner, tasks []flow.NewTask) (*flow.CreateTaskResponse, error) {
	if len(tasks) == 0 {
		return &flow.CreateTaskResponse{TaskIDs: []string{}}, nil
	}
	if len(tasks) > flow.MaxBatch {
		return nil, fmt.Errorf("tasks: %d tasks, at most %d at once", len(tasks), flow.MaxBatch)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	ids := flow.NewTaskIDs(now, len(tasks))
	types := map[string]flow.TaskType{}
	recs := make([]flow.Record, len(tasks))
	for i := range tasks {
		t := tasks[i] // ValidateNewTask normalises; keep the caller's slice as it was
		if err := flow.ValidateNewTask(fmt.Sprintf("tasks[%d].", i), &t); err != nil {
			return nil, err
		}
		tt, ok := types[t.TaskType]
		if !ok {
			var err error
			tt, err = scanType(tx.queryRow(ctx, c.s.q.getType, t.TaskType))
			if errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("task type %q: %w", t.TaskType, flow.ErrUnknownType)
			}
			if err != nil {
				return nil, fmt.Errorf("task type %s: %w", t.TaskType, err)
			}
			types[t.TaskType] = tt
		}
		recs[i] = flow.NewRecord(ids[i], t, tt, now)
	}
	got, existing, err := c.s.insertEach(ctx, tx, recs)
	if err != nil {
		return nil, fmt.Errorf("create %d tasks: %w", len(recs), err)
	}
	out := &flow.CreateTaskResponse{TaskIDs: got}
	for i, e := range existing {
		if e {
			out.ExistingIndex = append(out.ExistingIndex, i)
		}
	}
	return out, nil
}
