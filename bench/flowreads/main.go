// Command flowreads measures what the console and Prometheus read from a
// flow server over a big tasks table: it fills the table with N tasks in
// one bulk INSERT ... SELECT (generate_series on PostgreSQL, a recursive
// CTE on SQLite and MySQL/MariaDB), starts a flow server on it, and times
// GET /v1/stats, GET /v1/funnel and GET /metrics, each -reads times. For
// comparison it times once the GROUP BY over the table those reads ran
// before the counts were kept (issue 37, point 6).
//
//	cd bench && go run ./flowreads -db postgres://postgres@127.0.0.1:5432/test?sslmode=disable -rows 1000000
//	cd bench && go run ./flowreads -db sqlite:///tmp/reads.db -rows 1000000
//	cd bench && go run ./flowreads -db 'mysql://root@tcp(127.0.0.1:3306)/test' -rows 1000000
//
// The tables get a prefix of their own, dropped at the end (-keep keeps
// them; -reuse reads kept ones again without a fill, so that two builds'
// reads can alternate on one table). The tasks spread over 4 types, 3
// stages each, and every status.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/server"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

func main() {
	var (
		dsn    = flag.String("db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "database, as flow serve --db takes it")
		rows   = flag.Int("rows", 1000000, "tasks to fill the table with")
		reads  = flag.Int("reads", 20, "times each endpoint is read")
		prefix = flag.String("prefix", "reads_", "table prefix (dropped first and at the end)")
		keep   = flag.Bool("keep", false, "keep the tables at the end")
		wait   = flag.Duration("wait", 0, "pause before the reads, for the database's background work after the fill (InnoDB's purge of the folded deltas)")
		reuse  = flag.Bool("reuse", false, "read the tables an earlier -keep run filled with -rows tasks, without filling them again (to alternate builds' reads on one table)")
	)
	flag.Parse()
	if err := run(*dsn, *prefix, *rows, *reads, *keep, *reuse, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "flowreads:", err)
		os.Exit(1)
	}
}

var types = []string{"video", "audio", "image", "mail"}

func run(dsn, prefix string, rows, reads int, keep, reuse bool, wait time.Duration) error {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, dsn, store.Options{TablePrefix: prefix, Logger: quiet})
	if err != nil {
		return err
	}
	if !reuse {
		st.DropTables(ctx)
	}
	st.Close()
	if st, err = store.Open(ctx, dsn, store.Options{TablePrefix: prefix, Logger: quiet}); err != nil {
		return err
	}
	defer st.Close()
	if !keep {
		defer st.DropTables(ctx)
	}
	if !reuse {
		if err := prepare(ctx, st, prefix, rows); err != nil {
			return err
		}
	}

	srv, err := server.Start(ctx, server.Config{DB: dsn, TablePrefix: prefix, Listen: "127.0.0.1:0", Logger: quiet, Retention: -1})
	if err != nil {
		return err
	}
	defer srv.Close()
	time.Sleep(wait)
	for _, path := range []string{"/v1/stats", "/v1/funnel", "/metrics"} {
		var took []time.Duration
		for i := 0; i < reads; i++ {
			t := time.Now()
			resp, err := http.Get(srv.URL() + path)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
			}
			took = append(took, time.Since(t))
			if i == 0 && path == "/v1/stats" {
				if err := checkTotal(b, rows); err != nil {
					return err
				}
			}
		}
		slices.Sort(took)
		fmt.Printf("%-11s p50 %6.2f ms  max %6.2f ms  (%d reads)\n", path, ms(took[len(took)/2]), ms(took[len(took)-1]), reads)
	}
	return nil
}

// checkTotal: the stats read add up to the tasks filled.
func checkTotal(b []byte, rows int) error {
	var sr flow.StatsResponse
	if err := json.Unmarshal(b, &sr); err != nil {
		return err
	}
	var n int64
	for _, t := range sr.Types {
		for _, c := range t.Counts {
			n += c
		}
	}
	if n != int64(rows) {
		return fmt.Errorf("stats count %d tasks, want %d", n, rows)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fill inserts rows tasks in one statement: task i has type i % 4, stage
// i % 3, and status by i % 1000: 60 % success, 10 % failed, 5 %
// cancelled, 24.9 % pending and 0.1 % processing (as many as workers
// hold: a thousand at 1M; leases far ahead, so no rescue moves them).
func fill(ctx context.Context, st *store.SQLStore, rows int, now time.Time) error {
	t := st.TablePrefix() + "tasks"
	us := now.UnixMicro()
	cols := "task_id, task_type, task_stage, status, task_context, priority, order_time, crt_retry_num, max_retry_num, retry_interval_ms," +
		" max_retry_interval_ms, owner, lease, lease_expiry, schedule_log, create_time, modify_time"
	sel := func(i, pad string) string {
		typ := "CASE " + i + " % 4 WHEN 0 THEN 'video' WHEN 1 THEN 'audio' WHEN 2 THEN 'image' ELSE 'mail' END"
		stage := "CASE " + i + " % 3 WHEN 0 THEN 'fetch' WHEN 1 THEN 'resize' ELSE 'upload' END"
		m := "(" + i + " % 1000)"
		status := "CASE WHEN " + m + " < 600 THEN 3 WHEN " + m + " < 700 THEN 4 WHEN " + m + " < 750 THEN 5 WHEN " + m + " < 999 THEN 1 ELSE 2 END"
		le := fmt.Sprintf("CASE WHEN %s = 999 THEN %d ELSE 0 END", m, us+int64(24*time.Hour/time.Microsecond))
		return fmt.Sprintf("SELECT %s, %s, %s, %s, NULL, 0, %d + %s, 0, 1, 1000, 1000, '', '', %s, '[]', %d, %d",
			pad, typ, stage, status, us, i, le, us, us)
	}
	var q string
	switch st.Dialect() {
	case "postgres":
		q = "INSERT INTO " + t + " (" + cols + ") " + sel("i", "'00' || lpad(i::text, 24, '0')") + " FROM generate_series(1, $1) i"
	case "sqlite":
		q = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) INSERT INTO " + t + " (" + cols + ") " +
			sel("i", "'00' || substr('000000000000000000000000' || i, -24, 24)") + " FROM n"
	case "mysql":
		// A recursion as deep as the table is beyond MariaDB's default cap;
		// a cross join of digits is not.
		digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5" +
			" UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
		var from, expr []string
		for k, m := 0, 1; m < rows; k, m = k+1, m*10 {
			from = append(from, fmt.Sprintf("%s d%d", digits, k))
			expr = append(expr, fmt.Sprintf("d%d.d * %d", k, m))
		}
		q = "INSERT INTO " + t + " (" + cols + ") " + sel("i", "CONCAT('00', LPAD(i, 24, '0'))") + " FROM (SELECT 1 + " +
			strings.Join(expr, " + ") + " AS i FROM " + strings.Join(from, " CROSS JOIN ") + ") n WHERE i <= ?"
	}
	_, err := st.DB().ExecContext(ctx, q, rows)
	return err
}

// prepare registers the types, fills the table with rows tasks and
// counts them, timing the GROUP BY the reads replaced.
func prepare(ctx context.Context, st *store.SQLStore, prefix string, rows int) error {
	now := time.Now().UTC()
	for _, name := range types {
		tt := flow.TaskType{TaskType: name, ScheduleLimit: 100, ScheduleIntervalMS: 1000, MaxProcessingMS: 60000, MaxRetryNum: 1,
			RetryIntervalMS: 1000, MaxRetryIntervalMS: 1000}
		if err := st.RegisterType(ctx, tt, now); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := fill(ctx, st, rows, now); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	fillTime := time.Since(t0)
	var err error
	// PostgreSQL's autovacuum and InnoDB's statistics would have caught up
	// with a table this size by the time anyone reads it; SQLite keeps no
	// statistics unless asked, and flow does not ask.
	switch st.Dialect() {
	case "postgres":
		_, err = st.DB().ExecContext(ctx, "ANALYZE "+prefix+"tasks")
	case "mysql":
		_, err = st.DB().ExecContext(ctx, "ANALYZE TABLE "+prefix+"tasks")
	}
	if err != nil {
		return err
	}
	t0 = time.Now()
	folded, err := st.FoldCounts(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%s: filled %d tasks in %v; fold of the fill's %d count changes %v\n", st.Dialect(), rows, fillTime.Round(time.Millisecond),
		folded, time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	var groups int
	r, err := st.DB().QueryContext(ctx, "SELECT task_type, status, COUNT(*) FROM "+prefix+"tasks GROUP BY task_type, status")
	if err != nil {
		return err
	}
	for r.Next() {
		groups++
	}
	r.Close()
	fmt.Printf("GROUP BY over the table (stats before the counts): %v (%d groups)\n", time.Since(t0).Round(time.Millisecond), groups)
	t0 = time.Now()
	if err := st.RebuildCounts(ctx); err != nil {
		return err
	}
	fmt.Printf("RebuildCounts (POST /v1/rebuild_counts): %v\n", time.Since(t0).Round(time.Millisecond))
	return nil
}
