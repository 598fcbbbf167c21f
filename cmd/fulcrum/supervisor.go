package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/supervisor"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
)

// newSupervisorCmd returns `fulcrum supervisor --config supervisor.yaml`,
// with `fulcrum supervisor worker` beneath it.
func newSupervisorCmd() *cobra.Command {
	var (
		path    string
		check   bool
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "supervisor --config supervisor.yaml",
		Short: "Run the long-running session supervisor",
		Long: `Run the supervisor described by a YAML config (see docs/supervisor.md): it
keeps every task of its source running on k distinct workers, moves the tasks
of dead workers, and publishes the workers' payloads once each to its sink.

The token may be left out of the file and given in FULCRUM_TOKEN (without
either, only a loopback listen address is allowed).
SIGTERM or SIGINT stop it; workers keep their sessions and reconnect to the
next supervisor, whose warm-up lets them keep what they hold. With
ha.database set, several supervisors share a PostgreSQL or MySQL database
and one leads; the others stand by and take over when its lease lapses.

  fulcrum supervisor status     workers, loads, deficit and sink counters`,
		Example: "  fulcrum supervisor --config examples/supervisor/supervisor.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("supervisor: --config is required")
			}
			cfg, err := loadSupervisorConfig(path)
			if err != nil {
				return err
			}
			if check {
				if err := checkSupervisorSource(commandContext(cmd), cfg); err != nil {
					return fmt.Errorf("supervisor config %s: %w", path, err)
				}
				// The sink is tried as the gateway's --check resolves
				// names: a broker down, a wrong password, a missing
				// queue or stream fail here, not in a log after start.
				if err := sink.Check(commandContext(cmd), cfg.Sink); err != nil {
					return fmt.Errorf("supervisor config %s: %w", path, err)
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (listen %s, redundancy %d, source %s, sink %s)\n",
					path, cfg.Listen, cfg.Redundancy, cfg.Source.Type, cfg.Sink.Type)
				return err
			}
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(commandContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := supervisor.Start(ctx, cfg, log)
			if err != nil {
				return err
			}
			<-ctx.Done()
			return s.Close()
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "config file (YAML)")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "log at debug level (every rejected message)")
	if w := newSupervisorWorkerCmd(); w != nil {
		cmd.AddCommand(w)
	}
	cmd.AddCommand(newSupervisorStatusCmd())
	return cmd
}

// loadSupervisorConfig reads the file, taking the token from FULCRUM_TOKEN
// when the file has none (without either, only a loopback listener is
// allowed, and it checks no token).
func loadSupervisorConfig(path string) (supervisor.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return supervisor.Config{}, fmt.Errorf("supervisor config: %w", err)
	}
	cfg, err := supervisor.ParseConfigWith(data, func(c *supervisor.Config) {
		if c.Token == "" {
			c.Token = os.Getenv("FULCRUM_TOKEN")
		}
		c.ResolvePaths(filepath.Dir(path))
	})
	if err != nil {
		return supervisor.Config{}, fmt.Errorf("supervisor config %s: %w", path, err)
	}
	return cfg, nil
}

// checkSupervisorSource reads a file source once, so --check fails on a
// path that does not exist or a list that does not parse, as start would.
// An http source is not fetched: its server need not be up at check time.
func checkSupervisorSource(ctx context.Context, cfg supervisor.Config) error {
	if cfg.Source.Type != "file" {
		return nil
	}
	src, err := source.Open(cfg.Source)
	if err != nil {
		return err
	}
	_, err = src.List(ctx)
	return err
}

func commandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
