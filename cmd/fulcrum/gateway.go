package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery"
)

func newGatewayCmd() *cobra.Command {
	var (
		path     string
		check    bool
		demoMode bool
		gogc     int
	)
	cmd := &cobra.Command{
		Use:   "gateway --config gateway.yaml",
		Short: "Run the HTTP load-balancing gateway",
		Long: `Run the HTTP reverse proxy described by a YAML config (see docs/gateway.md).

SIGHUP re-reads the config (a bad file leaves the running config as it was);
SIGTERM or SIGINT stop accepting and let in-flight requests finish within
shutdown_grace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			setGC(gogc)
			if demoMode {
				return runDemo(cmd.Context(), cmd.OutOrStdout(), demoOptions{listen: "127.0.0.1:8080", admin: "127.0.0.1:9901"})
			}
			if path == "" {
				return errors.New("gateway: --config is required (or --demo)")
			}
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			if check {
				// Names under discovery with require: true must resolve.
				if err := discovery.Check(context.Background(), cfg); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				// --check refuses what start would refuse: TLS files,
				// strategy settings, discovery providers.
				if err := gateway.Check(cfg, gateway.Options{}); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d upstreams, %d routes)\n", path, len(cfg.Upstreams), len(cfg.Routes))
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			g, err := gateway.New(cfg, gateway.Options{ConfigPath: path, Logger: log})
			if err != nil {
				return err
			}
			return serveWithSignals(cmd.Context(), g, log, cfg.ShutdownGrace.D())
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "config file (YAML)")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit")
	cmd.Flags().BoolVar(&demoMode, "demo", false, "run the demo (3 local upstreams behind a gateway) instead of a config")
	cmd.Flags().IntVar(&gogc, "gogc", 400, "GC target percentage unless GOGC is set (the proxy's live heap is small, so a higher target trades a little memory for fewer collections)")
	return cmd
}

// setGC applies the --gogc default unless the environment chose.
func setGC(gogc int) {
	if os.Getenv("GOGC") == "" && gogc > 0 {
		debug.SetGCPercent(gogc)
	}
}

// serveWithSignals runs g until SIGTERM/SIGINT, reloading on SIGHUP.
func serveWithSignals(ctx context.Context, g *gateway.Gateway, log *slog.Logger, grace time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := g.Start(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				if err := g.Reload(); err != nil {
					log.Error("reload refused; running config unchanged", "err", err)
				} else {
					log.Info("reloaded")
				}
				continue
			}
			log.Info("draining", "signal", s.String(), "grace", grace)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		return g.Shutdown(sctx)
	}
}
