package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/flow/server"
)

// newFlowCmd is `fulcrum flow`: serve, plus the command-line client.
func newFlowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "flow",
		Short: "The multi-stage task service (server and client)",
	}
	cmd.AddCommand(newFlowServeCmd())
	for _, c := range flowClientCmds() {
		if c != nil {
			cmd.AddCommand(c)
		}
	}
	return cmd
}

func newFlowServeCmd() *cobra.Command {
	var cfg server.Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a flow server (SQLite in the working directory unless --db says otherwise)",
		Long: `Run a flow server. The schema is created or migrated on start; several
servers may share one PostgreSQL or MySQL database (see docs/flow.md).

  --db sqlite://fulcrum-flow.db                        (default; ?synchronous=normal relaxes fsync)
  --db postgres://user@host:5432/db?sslmode=disable
  --db 'mysql://user:pass@tcp(host:3306)/db'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			// go-redis prints its own lines (every failed dial, before our
			// error says the same once): send them to debug, unseen.
			redis.SetLogger(redisLogger{cfg.Logger})
			if cfg.Token == "" {
				cfg.Token = os.Getenv("FULCRUM_FLOW_TOKEN")
			}
			s, err := server.Start(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fulcrum flow listening on %s\n", s.Addr())
			<-ctx.Done()
			cfg.Logger.Info("flow server shutting down")
			return s.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "address to serve the HTTP API on")
	f.StringVar(&cfg.DB, "db", "sqlite://fulcrum-flow.db", "database: sqlite://PATH, postgres://... or mysql://...")
	f.StringVar(&cfg.TablePrefix, "table-prefix", "flow_", "prefix of the table names")
	f.StringVar(&cfg.LockMode, "lock", server.LockSkipLocked, "how holds exclude each other: skip_locked (row locks) or redis (redsync lock around each hold)")
	f.StringVar(&cfg.RedisAddr, "redis", "127.0.0.1:6379", "Redis address for --lock redis")
	f.DurationVar(&cfg.Retention, "retention", 0, "keep finished tasks this long after they end (default 168h; negative keeps forever)")
	f.DurationVar(&cfg.RescueInterval, "rescue-interval", 0, "how often to return tasks with expired leases to pending (default 1s)")
	f.DurationVar(&cfg.PruneInterval, "prune-interval", 0, "how often to delete finished tasks past the retention (default 1m)")
	f.DurationVar(&cfg.CountFoldInterval, "count-fold-interval", 0, "how often to fold the task counts' changes into their totals, PostgreSQL and MySQL (default 1s)")
	f.DurationVar(&cfg.MaxWait, "max-wait", 0, "longest wait_ms a hold may wait (default 30s)")
	f.DurationVar(&cfg.PollInterval, "poll-interval", 0, "how often a waiting hold looks again without a signal (default 1s)")
	f.StringVar(&cfg.Token, "token", "", "API token required on every endpoint but /healthz (default $FULCRUM_FLOW_TOKEN); required when --listen is not loopback")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", 0, "API requests served at once, waiting holds included; past it 503 with Retry-After (default 1024)")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", 0, "time allowed to read a request's header, and then its body (default 10s)")
	return cmd
}

// redisLogger takes go-redis's log lines at debug level, where the
// default level does not show them.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
