package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is the River job with the same shape as the flow bench task: a
// small JSON payload and a stage that does nothing.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverE2E inserts n jobs in batches (InsertManyFast, River's quickest
// insert) while a River client with maxWorkers (River's benchmark uses
// 2000) works them, and returns jobs
// per second from the first insert to the last completion event.
func riverE2E(ctx context.Context, dsn string, n, maxWorkers int) (e2eResult, error) {
	var res e2eResult
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	mig, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		// River's own benchmark (cmd/river bench) settings, much faster than
		// the client's defaults (100ms fetch cooldown, 1s poll).
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return res, err
	}
	events, unsub := rc.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1000})
	defer unsub()
	if err := rc.Start(ctx); err != nil {
		return res, err
	}
	defer rc.Stop(context.WithoutCancel(ctx))
	cpu0 := markCPU(envOr("BENCH_PG_COMM", "postgres")) // before the clock, as in flowE2E
	start := time.Now()
	m := milestones{start: start}
	finished := make(chan error, 1)
	var done atomic.Int64
	go func() {
		for got := 0; got < n; got++ {
			done.Store(int64(got))
			if ev := <-events; ev == nil {
				finished <- errors.New("river closed the event channel")
				return
			}
			if got == 0 {
				m.mark(&m.firstRun)
			}
		}
		finished <- nil
	}()
	if err := createAll(ctx, n, func(ctx context.Context, from, to int) error {
		params := make([]river.InsertManyParams, 0, to-from)
		for i := from; i < to; i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: i}})
		}
		_, err := rc.InsertManyFast(ctx, params)
		m.mark(&m.firstCreate)
		return err
	}); err != nil {
		return res, err
	}
	m.mark(&m.created)
	m.doneByCreated = done.Load()
	select {
	case err := <-finished:
		if err != nil {
			return res, err
		}
	case <-time.After(10 * time.Minute):
		return res, errors.New("jobs did not finish in 10 minutes")
	}
	elapsed, to := time.Since(start), markCPU(envOr("BENCH_PG_COMM", "postgres"))
	m.print("river", elapsed)
	res.perSec = float64(n) / elapsed.Seconds()
	res.self, res.db = to.perTask(cpu0, n)
	return res, nil
}
