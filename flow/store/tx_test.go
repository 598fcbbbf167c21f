package store_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Tasks created in the application's own transaction exist only once it
// commits; on PostgreSQL the commit wakes the servers' holds.
func TestCreateInCallersTransaction(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "app.db")
		txCreate(t, "sqlite", "sqlite://"+path, "sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Postgres(t)
		txCreate(t, "postgres", dsn, "pgx", dsn)
	})
	t.Run("mysql", func(t *testing.T) {
		dsn := testenv.MySQL(t)
		txCreate(t, "mysql", "mysql://"+dsn, "mysql", dsn)
	})
}

func txCreate(t *testing.T, dialect, serverDSN, driver, appDSN string) {
	ctx := context.Background()
	p := storetest.Prefix()
	var mu sync.Mutex
	woken := map[string]int{}
	st, err := store.Open(ctx, serverDSN, store.Options{TablePrefix: p, OnDue: func(typ string) { mu.Lock(); woken[typ]++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.DropTables(context.Background())
		st.Close()
	})
	now := time.Now().UTC()
	if err := st.RegisterType(ctx, flow.TaskType{TaskType: "mail", ScheduleLimit: 10, ScheduleIntervalMS: 1000, MaxProcessingMS: 60000,
		RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}, now); err != nil {
		t.Fatal(err)
	}
	app, err := sql.Open(driver, appDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if dialect == "mysql" {
		app.SetMaxOpenConns(1) // the session setting below holds for the one connection
		if _, err := app.Exec("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := store.NewTxCreator(dialect, p)
	if err != nil {
		t.Fatal(err)
	}
	tasks := []flow.NewTask{{TaskType: "mail", TaskStage: "send", TaskContext: []byte(`{"to":"a@b"}`)}, {TaskType: "mail", UniqueKey: "welcome-1"}}

	// Rolled back: nothing.
	tx, err := app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := c.Create(ctx, tx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetTask(ctx, rolled.TaskIDs[0]); !errors.Is(err, flow.ErrNotFound) {
		t.Fatalf("uncommitted task visible: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for _, id := range rolled.TaskIDs {
		if _, err := st.GetTask(ctx, id); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("rolled-back task %s exists: %v", id, err)
		}
	}

	// Committed: both there; the unique key is live now.
	tx, err = app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Create(ctx, tx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, id := range got.TaskIDs {
		if r, err := st.GetTask(ctx, id); err != nil || r.Status != flow.StatusPending {
			t.Fatalf("committed task %s: %+v %v", id, r, err)
		}
	}
	if dialect == "postgres" {
		testenv.Eventually(t, "the commit's NOTIFY reached the server", func() bool { mu.Lock(); defer mu.Unlock(); return woken["mail"] > 0 })
	}
	tx, err = app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Create(ctx, tx, tasks[1:])
	tx.Commit()
	if err != nil || len(again.ExistingIndex) != 1 || again.TaskIDs[0] != got.TaskIDs[1] {
		t.Fatalf("same unique key again: %+v %v", again, err)
	}
	held, err := st.Hold(ctx, store.HoldParams{TaskType: "mail", WorkerID: "w", Limit: 10, Lease: flow.NewLease(), Now: time.Now().UTC(), LeaseExpiry: time.Now().Add(time.Minute)})
	if err != nil || len(held) != 2 {
		t.Fatalf("hold after commit: %d %v", len(held), err)
	}

	// Errors name the problem and leave the transaction to the caller.
	tx, err = app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, tx, []flow.NewTask{{TaskType: "nope"}}); !errors.Is(err, flow.ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := c.Create(ctx, tx, []flow.NewTask{{TaskType: "mail", DelayMS: -1}}); err == nil || err.Error() != "tasks[0].delay_ms: -1 is negative" {
		t.Fatalf("bad task: %v", err)
	}
	tx.Rollback()

	if dialect == "postgres" {
		conn, err := pgx.Connect(ctx, serverDSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		ptx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pg, err := c.CreatePgx(ctx, ptx, tasks[:1])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetTask(ctx, pg.TaskIDs[0]); !errors.Is(err, flow.ErrNotFound) {
			t.Fatalf("uncommitted pgx task visible: %v", err)
		}
		if err := ptx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := st.GetTask(ctx, pg.TaskIDs[0]); err != nil || string(r.TaskContext) != `{"to":"a@b"}` {
			t.Fatalf("committed pgx task: %+v %v", r, err)
		}
	}
}
