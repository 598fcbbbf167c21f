// Command flow benchmarks the flow task service end to end and beside River
// on the same PostgreSQL, in one run:
//
//	cd bench && go run ./flow -pg postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// End to end: tasks/s to create N one-stage tasks and work them to success
// (create in batches, hold, run a no-op stage, set success) through the HTTP
// API with the worker SDK, on SQLite and on PostgreSQL; then River (used as a
// library, in process, no HTTP) with the same job shape on the same
// PostgreSQL; with -only myfloor, the smallest River-like queue on MariaDB
// (myfloor.go), what any queue there can reach. Hold latency: W workers
// (1, 8, 64) each looping hold one task, set success, over a pre-filled
// table; p50 and p99 of the hold call.
//
// Beside tasks/s, each end-to-end row has the CPU a task cost (medians, from
// getrusage and /proc): in this process (the flow server, the SDK workers
// and the client, or River's client; SQLite too) and in the database
// server's processes. It moves less than tasks/s on a shared machine.
//
// Each run gets fresh databases (created and dropped on the PostgreSQL
// server) and a fresh SQLite file, so runs do not see each other's rows.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/server"
	"github.com/fulcrum-lb/fulcrum/flow/worker"
)

func main() {
	var (
		pg        = flag.String("pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN (a database on it is created per run); empty skips PostgreSQL and River")
		my        = flag.String("mysql", "mysql://root@tcp(127.0.0.1:3306)/test", "MySQL/MariaDB DSN as flow serve --db takes it (a table prefix per run); empty skips it")
		only      = flag.String("only", "", "comma-separated subset of sqlite,postgres,mysql,river,myfloor to run (default all; myfloor: the smallest River-like queue on MySQL/MariaDB)")
		parts     = flag.String("parts", "e2e,hold", "which parts: e2e (end to end), hold (hold latency)")
		holdW     = flag.String("hold-workers", "1,8,64", "worker counts of the hold-latency runs")
		tasks     = flag.Int("tasks", 20000, "tasks per end-to-end run")
		holdTasks = flag.Int("hold-tasks", 3000, "tasks per hold-latency run")
		workers   = flag.Int("workers", 4, "SDK workers in the end-to-end runs")
		conc      = flag.Int("concurrency", 256, "handlers per SDK worker")
		holdLimit = flag.Int("hold-limit", 500, "most tasks per hold in the end-to-end runs (the type's schedule_limit and the SDK's HoldLimit)")
		report    = flag.Int("report-batch", 256, "most outcomes per set_tasks from the SDK (its ReportBatch)")
		runs      = flag.Int("runs", 3, "rounds of the end-to-end runs (the table shows medians)")
		riverMax  = flag.Int("river-workers", 2000, "River's MaxWorkers (River's own benchmark uses 2000)")
		cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
		memprof   = flag.String("memprofile", "", "write a profile of the whole run's allocations here")
		fairKeys  = flag.Int("fair-keys", 0, "end to end with the type fair and its tasks spread round-robin over this many fairness keys (0: not fair, no keys)")
		timeline  = flag.Bool("timeline", false, "print each end-to-end round's milestones to stderr (first create acknowledged, first stage or job run, last one, confirmed)")
	)
	flag.Parse()
	showTimeline = *timeline
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench flow:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *memprof != "" {
		defer func() {
			f, err := os.Create(*memprof)
			if err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	ctx := context.Background()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	sel := map[string]bool{}
	for _, k := range strings.Split(*only, ",") {
		if k = strings.TrimSpace(k); k != "" {
			sel[k] = true
		}
	}
	want := func(k string) bool { return len(sel) == 0 || sel[k] }
	var hw []int
	for _, f := range strings.Split(*holdW, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench flow: -hold-workers %q: want positive counts separated by commas\n", *holdW)
			os.Exit(2)
		}
		hw = append(hw, n)
	}
	cfg := benchConfig{fairKeys: *fairKeys, holdLimit: *holdLimit, reportBatch: *report, holdWorkers: hw, pg: *pg, my: *my, want: want, e2e: strings.Contains(*parts, "e2e"), hold: strings.Contains(*parts, "hold")}
	if err := run(ctx, cfg, *tasks, *holdTasks, *workers, *conc, *riverMax, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "bench flow:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// showTimeline is -timeline.
var showTimeline bool

// milestones are the moments of one end-to-end round, from its clock.
type milestones struct {
	start                                   time.Time
	firstCreate, firstRun, lastRun, created atomic.Int64 // ns since start; 0: not yet
	doneByCreated                           int64        // tasks finished when the last create was acknowledged
}

func (m *milestones) mark(at *atomic.Int64) { at.CompareAndSwap(0, int64(time.Since(m.start))) }

func (m *milestones) print(system string, end time.Duration) {
	if !showTimeline {
		return
	}
	ms := func(x *atomic.Int64) string { return fmt.Sprintf("%.1fms", float64(x.Load())/1e6) }
	fmt.Fprintf(os.Stderr, "  %s: first create acked %s, first run %s, all created %s (%d done by then), last run %s, confirmed %.1fms\n",
		system, ms(&m.firstCreate), ms(&m.firstRun), ms(&m.created), m.doneByCreated, ms(&m.lastRun), float64(end)/1e6)
}

type e2eRow struct {
	system, db string
	perSec     float64   // median
	vsRiver    float64   // median of the rounds' ratios to River's; -1: no River
	all        []float64 // every round
	cpuHere    float64   // median CPU per task, µs, in this process
	cpuDB      float64   // and in the database server; -1: not measured
}

// e2eResult is one end-to-end round: tasks/s and CPU per task (µs) in this
// process and in the database server.
type e2eResult struct{ perSec, self, db float64 }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

type holdRow struct {
	db       string
	workers  int
	perSec   float64
	p50, p99 time.Duration
}

// benchConfig says which databases and parts run.
type benchConfig struct {
	pg, my      string            // DSNs; empty skips
	want        func(string) bool // sqlite, postgres, mysql, river
	e2e, hold   bool
	holdWorkers []int
	holdLimit   int // end to end: tasks per hold
	reportBatch int // end to end: outcomes per set_tasks
	fairKeys    int // end to end: a fair type, tasks over this many fairness keys (0: not fair)
}

// target is one database a flow server runs on in one run: a DSN and a
// table prefix (MySQL gets a fresh prefix instead of a fresh database).
type target struct{ name, dsn, prefix string }

// comm is the database server's process name ("" for SQLite, in process).
func (t target) comm() string {
	switch t.name {
	case "postgres":
		return envOr("BENCH_PG_COMM", "postgres")
	case "mysql":
		return envOr("BENCH_MY_COMM", "mariadbd")
	}
	return ""
}

func run(ctx context.Context, cfg benchConfig, n, holdN, workers, conc, riverMax, runs int) error {
	if runs < 1 || n < 1 || holdN < 1 || workers < 1 || conc < 1 || riverMax < 1 || cfg.holdLimit < 1 || cfg.reportBatch < 1 {
		return errors.New("-runs, -tasks, -hold-tasks, -workers, -concurrency, -river-workers, -hold-limit and -report-batch must be positive")
	}
	pg := cfg.pg
	dir, err := os.MkdirTemp("", "bench-flow-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var pgDBs []string
	newPG := func(tag string) (string, error) {
		d, err := createPG(ctx, pg, tag)
		if err == nil {
			pgDBs = append(pgDBs, d)
		}
		return d, err
	}
	defer func() {
		for _, d := range pgDBs {
			dropPG(pg, d)
		}
	}()
	var myPrefixes []string
	defer func() { dropMySQL(cfg.my, myPrefixes) }()
	// targets makes fresh databases for one run of each flow system.
	targets := func(tag string) ([]target, error) {
		var ts []target
		if cfg.want("sqlite") {
			ts = append(ts, target{"sqlite", "sqlite://" + filepath.Join(dir, fmt.Sprintf("%s.db", tag)), ""})
		}
		if pg != "" && cfg.want("postgres") {
			d, err := newPG(tag)
			if err != nil {
				return nil, err
			}
			ts = append(ts, target{"postgres", d, ""})
		}
		if cfg.my != "" && cfg.want("mysql") {
			p := fmt.Sprintf("bf%s_%d_", tag, time.Now().UnixNano()%1e9)
			myPrefixes = append(myPrefixes, p)
			ts = append(ts, target{"mysql", cfg.my, p})
		}
		return ts, nil
	}

	// Each round runs every system once, on fresh databases, one after the
	// other, so a busy machine slows them alike; the table shows medians.
	results := map[string][]e2eResult{}
	var keys []string
	for _, k := range []string{"sqlite", "postgres", "mysql"} {
		if cfg.want(k) && (k == "sqlite" || k == "postgres" && pg != "" || k == "mysql" && cfg.my != "") {
			keys = append(keys, "flow/"+k)
		}
	}
	withFloor := cfg.my != "" && cfg.want("myfloor")
	if withFloor {
		keys = append(keys, "floor/mysql")
	}
	withRiver := pg != "" && cfg.want("river")
	if withRiver {
		keys = append(keys, "river/postgres")
	}
	for round := 1; cfg.e2e && round <= runs; round++ {
		ts, err := targets(fmt.Sprintf("e2e%d", round))
		if err != nil {
			return err
		}
		for _, d := range ts {
			fmt.Fprintf(os.Stderr, "round %d: fulcrum flow on %s, %d tasks...\n", round, d.name, n)
			r, err := flowE2E(ctx, d, n, workers, conc, cfg.holdLimit, cfg.reportBatch, cfg.fairKeys)
			if err != nil {
				return fmt.Errorf("flow on %s: %w", d.name, err)
			}
			results["flow/"+d.name] = append(results["flow/"+d.name], r)
		}
		if withFloor {
			p := fmt.Sprintf("bfloor%d_%d_", round, time.Now().UnixNano()%1e9)
			myPrefixes = append(myPrefixes, p)
			fmt.Fprintf(os.Stderr, "round %d: the floor queue on mysql, %d jobs...\n", round, n)
			r, err := myFloorE2E(ctx, cfg.my, p, n, riverMax)
			if err != nil {
				return fmt.Errorf("floor: %w", err)
			}
			results["floor/mysql"] = append(results["floor/mysql"], r)
		}
		if withRiver {
			d, err := newPG("river")
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d: River on postgres, %d jobs...\n", round, n)
			r, err := riverE2E(ctx, d, n, riverMax)
			if err != nil {
				return fmt.Errorf("river: %w", err)
			}
			results["river/postgres"] = append(results["river/postgres"], r)
		}
	}
	var rows []e2eRow
	// Each round runs River right after the flow systems, so a round's
	// ratio compares runs under the same load on the machine; the table
	// shows the median of the rounds' ratios.
	river := results["river/postgres"]
	for _, k := range keys {
		if !cfg.e2e {
			break
		}
		system, dbName, _ := strings.Cut(k, "/")
		name := "fulcrum flow (HTTP, SDK)"
		switch system {
		case "river":
			name = "River (in process)"
		case "floor":
			name = "floor queue (in process)"
		}
		var rates, selfs, dbs []float64
		for _, r := range results[k] {
			rates, selfs, dbs = append(rates, r.perSec), append(selfs, r.self), append(dbs, r.db)
		}
		vsRiver := -1.0
		if len(river) == len(rates) && len(rates) > 0 {
			var ratios []float64
			for i, r := range rates {
				ratios = append(ratios, r/river[i].perSec)
			}
			vsRiver = median(ratios)
		}
		rows = append(rows, e2eRow{name, dbName, median(rates), vsRiver, rates, median(selfs), median(dbs)})
	}

	var holds []holdRow
	if cfg.hold {
		ts, err := targets("hold")
		if err != nil {
			return err
		}
		for _, d := range ts {
			for _, w := range cfg.holdWorkers {
				fmt.Fprintf(os.Stderr, "hold latency: %s, %d workers...\n", d.name, w)
				r, err := holdLatency(ctx, d, holdN, w)
				if err != nil {
					return fmt.Errorf("hold latency on %s with %d workers: %w", d.name, w, err)
				}
				r.db = d.name
				holds = append(holds, r)
			}
		}
	}

	out := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(out, "end to end, %d one-stage tasks (create, hold, stage, set success), median of %d rounds\n", n, runs)
	fmt.Fprintln(out, "CPU per task (µs, from /proc): in this process (HTTP, JSON, SDK, drivers; River; SQLite) and in the database server")
	fmt.Fprintln(out, "system\tdb\ttasks/s\tvs River (postgres, per round)\tCPU here\tCPU db\tCPU total\tevery round")
	for _, r := range rows {
		ratio := "-"
		if r.vsRiver > 0 {
			ratio = fmt.Sprintf("%.2fx", r.vsRiver)
		}
		var each []string
		for _, x := range r.all {
			each = append(each, fmt.Sprintf("%.0f", x))
		}
		dbCPU, total := "-", "-" // not measured: no server process found
		switch {
		case r.cpuDB >= 0:
			dbCPU, total = fmt.Sprintf("%.1f", r.cpuDB), fmt.Sprintf("%.1f", r.cpuHere+r.cpuDB)
		case r.db == "sqlite":
			total = fmt.Sprintf("%.1f", r.cpuHere) // in this process
		}
		fmt.Fprintf(out, "%s\t%s\t%.0f\t%s\t%.1f\t%s\t%s\t%s\n", r.system, r.db, r.perSec, ratio, r.cpuHere, dbCPU, total, strings.Join(each, " "))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "hold latency, %d tasks, each worker: hold 1, set success, repeat\n", holdN)
	fmt.Fprintln(out, "db\tworkers\tholds/s\tp50\tp99")
	for _, h := range holds {
		fmt.Fprintf(out, "%s\t%d\t%.0f\t%v\t%v\n", h.db, h.workers, h.perSec, h.p50.Round(10*time.Microsecond), h.p99.Round(10*time.Microsecond))
	}
	return out.Flush()
}

// flowE2E creates n tasks in batches while workers SDK workers work them,
// and returns tasks per second from the first create to the last success.
func flowE2E(ctx context.Context, d target, n, workers, conc, holdLimit, reportBatch, fairKeys int) (e2eResult, error) {
	var res e2eResult
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: d.dsn, TablePrefix: d.prefix})
	if err != nil {
		return res, err
	}
	defer srv.Close()
	c, err := client.New([]string{"http://" + srv.Addr()}, client.Options{})
	if err != nil {
		return res, err
	}
	defer c.Close()
	tt := flow.TaskType{TaskType: "bench", ScheduleLimit: holdLimit, ScheduleIntervalMS: 100, MaxProcessingMS: 60_000,
		MaxRetryNum: 3, RetryIntervalMS: 100, MaxRetryIntervalMS: 1000, Fair: fairKeys > 0}
	if err := c.RegisterTask(ctx, tt); err != nil {
		return res, err
	}
	var recorded, ran atomic.Int64
	var m milestones
	all := make(chan struct{})
	var ws []*worker.Worker
	var wg sync.WaitGroup
	for i := range workers {
		w, err := worker.New(worker.Config{Client: c, WorkerID: fmt.Sprintf("bench-%d", i),
			Concurrency: conc, MaxBacklog: max(4*conc, 2*holdLimit), HoldLimit: holdLimit, ReportBatch: reportBatch,
			// The clock stops when the server has acknowledged the last
			// success, as River's stops at its last completion event
			// (sent once the completion is committed).
			OnReported: func(r worker.Report) {
				if r.Err == nil && r.Status == flow.StatusSuccess && recorded.Add(1) == int64(n) {
					close(all)
				}
			}})
		if err != nil {
			return res, err
		}
		w.Handle("bench", "work", func(context.Context, *worker.Task) (worker.Result, error) {
			switch ran.Add(1) {
			case 1:
				m.mark(&m.firstRun)
			case int64(n):
				m.mark(&m.lastRun)
			}
			return worker.Done(nil), nil
		})
		ws = append(ws, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(ctx) }()
	}
	// The CPU sample first: reading /proc took 15 ms of the clock here.
	cpu0 := markCPU(d.comm())
	start := time.Now()
	m.start = start
	if err := createAll(ctx, n, func(ctx context.Context, from, to int) error {
		nts := make([]flow.NewTask, 0, to-from)
		for i := from; i < to; i++ {
			nt := flow.NewTask{TaskType: "bench", TaskStage: "work", TaskContext: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
			if fairKeys > 0 {
				nt.FairnessKey = "tenant-" + strconv.Itoa(i%fairKeys)
			}
			nts = append(nts, nt)
		}
		_, err := c.CreateTasks(ctx, nts)
		m.mark(&m.firstCreate)
		return err
	}); err != nil {
		return res, err
	}
	m.mark(&m.created)
	m.doneByCreated = recorded.Load()
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		return res, errors.New("tasks did not finish in 10 minutes")
	}
	elapsed, to := time.Since(start), markCPU(d.comm())
	m.print("flow/"+d.name, elapsed)
	for _, w := range ws {
		w.Stop()
	}
	wg.Wait()
	// What the workers were told, checked against what the server has.
	st, err := c.Stats(ctx)
	if err != nil {
		return res, err
	}
	for _, t := range st.Types {
		if t.TaskType == "bench" && t.Counts["success"] != int64(n) {
			return res, fmt.Errorf("%d successes acknowledged, but the server counts %d", n, t.Counts["success"])
		}
	}
	res.perSec = float64(n) / elapsed.Seconds()
	res.self, res.db = to.perTask(cpu0, n)
	return res, nil
}

// createAll calls create over [0, n) in batches of 500, four at a time.
func createAll(ctx context.Context, n int, create func(ctx context.Context, from, to int) error) error {
	const batch, par = 500, 4
	sem := make(chan struct{}, par)
	errc := make(chan error, n/batch+1)
	var wg sync.WaitGroup
	for from := 0; from < n; from += batch {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := create(ctx, from, min(from+batch, n)); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// holdLatency pre-creates n tasks, then w goroutines each loop hold(1) and
// set success until a hold comes back empty.
func holdLatency(ctx context.Context, d target, n, w int) (holdRow, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DB: d.dsn, TablePrefix: d.prefix})
	if err != nil {
		return holdRow{}, err
	}
	defer srv.Close()
	c, err := client.New([]string{"http://" + srv.Addr()}, client.Options{})
	if err != nil {
		return holdRow{}, err
	}
	defer c.Close()
	typ := fmt.Sprintf("hold%d", w)
	if err := c.RegisterTask(ctx, flow.TaskType{TaskType: typ, ScheduleLimit: 10, ScheduleIntervalMS: 100,
		MaxProcessingMS: 60_000, MaxRetryNum: 1, RetryIntervalMS: 100, MaxRetryIntervalMS: 100}); err != nil {
		return holdRow{}, err
	}
	if err := createAll(ctx, n, func(ctx context.Context, from, to int) error {
		nts := make([]flow.NewTask, to-from)
		for i := range nts {
			nts[i] = flow.NewTask{TaskType: typ, TaskStage: "work"}
		}
		_, err := c.CreateTasks(ctx, nts)
		return err
	}); err != nil {
		return holdRow{}, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	errc := make(chan error, w)
	var wg sync.WaitGroup
	// Each worker first opens its connection (a type lookup), and all
	// start together: a worker's first hold would otherwise time a TCP
	// connect, which a running worker does not pay (64 of 1000 samples).
	var ready sync.WaitGroup
	ready.Add(w)
	begin := make(chan struct{})
	var start time.Time
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			_, err := c.GetTaskType(ctx, typ)
			ready.Done()
			if err != nil {
				errc <- err
				return
			}
			<-begin
			for {
				t0 := time.Now()
				got, err := c.HoldTasks(ctx, flow.HoldTasksRequest{TaskType: typ, Limit: 1, WorkerID: fmt.Sprintf("h%d", i)})
				if err != nil {
					errc <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mine = append(mine, time.Since(t0))
				if err := c.SetTask(ctx, flow.SetTaskRequest{TaskID: got[0].TaskID, Lease: got[0].Lease, Status: flow.StatusSuccess}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	ready.Wait()
	start = time.Now()
	close(begin)
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return holdRow{}, err
	}
	if len(lat) != n {
		return holdRow{}, fmt.Errorf("held %d tasks, created %d", len(lat), n)
	}
	slices.Sort(lat)
	return holdRow{workers: w, perSec: float64(n) / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}, nil
}

// createPG creates a fresh database on the server of dsn and returns its DSN.
func createPG(ctx context.Context, dsn, tag string) (string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	name := fmt.Sprintf("bench_flow_%s_%d", tag, time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dropMySQL drops the tables the runs made on MySQL (one table prefix
// each).
func dropMySQL(dsn string, prefixes []string) {
	if dsn == "" || len(prefixes) == 0 {
		return
	}
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		return
	}
	defer db.Close()
	for _, p := range prefixes {
		db.Exec("DROP TABLE IF EXISTS " + p + "tasks, " + p + "task_types, " + p + "meta, " + p + "rate_keys, " + p + "counts, " + p + "count_deltas, " + p + "job")
	}
}

func dropPG(dsn, fresh string) {
	u, err := url.Parse(fresh)
	if err != nil {
		return
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return
	}
	defer db.Close()
	db.Exec("DROP DATABASE IF EXISTS " + u.Path[1:] + " WITH (FORCE)")
}

// envOr: a server of the bench's own started under another process name
// (a symlink to the binary) has its CPU counted apart from a shared one's.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
