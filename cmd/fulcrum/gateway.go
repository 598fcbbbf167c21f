package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
		addrs    listenFlags
	)
	cmd := &cobra.Command{
		Use:   "gateway --config gateway.yaml",
		Short: "Run the HTTP load-balancing gateway",
		Long: `Run the HTTP reverse proxy described by a YAML config (see docs/gateway.md).

--listen and --admin (or FULCRUM_GATEWAY_LISTEN and FULCRUM_GATEWAY_ADMIN)
override the file's listen and admin.listen, on start and on every reload.
Relative paths in the file are read from the file's folder.

SIGHUP re-reads the config (a bad file leaves the running config as it was);
SIGTERM or SIGINT stop accepting and let in-flight requests finish within
shutdown_grace.`,
		Example: `  fulcrum gateway --config examples/gateway/basic.yaml
  fulcrum gateway --config examples/gateway/basic.yaml --listen 127.0.0.1:18080 --admin 127.0.0.1:19901`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			setGC(gogc)
			if err := addrs.resolve(cmd); err != nil {
				return fmt.Errorf("gateway: %w", err)
			}
			if demoMode {
				return runDemo(cmd.Context(), cmd.OutOrStdout(), demoOptions{listen: addrs.listenOr("127.0.0.1:8080"), admin: addrs.adminOr("127.0.0.1:9901")})
			}
			if path == "" {
				return errors.New("gateway: --config is required (or --demo)")
			}
			cfg, err := config.LoadWith(path, addrs.override)
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
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (listen %s, admin %s, %d upstreams, %d routes)\n",
					path, cfg.Listen, cfg.Admin.Listen, len(cfg.Upstreams), len(cfg.Routes))
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			g, err := gateway.New(cfg, gateway.Options{ConfigPath: path, Override: addrs.override, Logger: log})
			if err != nil {
				return err
			}
			return serveWithSignals(cmd.Context(), g, log, cfg.ShutdownGrace.D())
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "config file (YAML)")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit")
	addrs.register(cmd, "the proxy's address, host:port (overrides the file's listen; default $FULCRUM_GATEWAY_LISTEN)",
		"the admin API's address, host:port or off (overrides the file's admin.listen; default $FULCRUM_GATEWAY_ADMIN)")
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
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w (a port in use: move it with --listen or --admin, or %s / %s)", err, envGatewayListen, envGatewayAdmin)
		}
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

// The environment variables that stand for --listen and --admin of
// `fulcrum gateway` and `fulcrum demo`.
const (
	envGatewayListen = "FULCRUM_GATEWAY_LISTEN"
	envGatewayAdmin  = "FULCRUM_GATEWAY_ADMIN"
)

// listenFlags are --listen and --admin: a flag wins, then its environment
// variable, then the file (or the command's default).
type listenFlags struct {
	listen, admin string
}

func (l *listenFlags) register(cmd *cobra.Command, listenHelp, adminHelp string) {
	cmd.Flags().StringVar(&l.listen, "listen", "", listenHelp)
	cmd.Flags().StringVar(&l.admin, "admin", "", adminHelp)
}

// resolve fills what the flags left empty from the environment and
// checks both, naming the flag or variable that gave a bad value.
func (l *listenFlags) resolve(cmd *cobra.Command) error {
	check := func(flag, env, want string, v *string) error {
		name := "--" + flag
		if !cmd.Flags().Changed(flag) {
			*v, name = os.Getenv(env), env
		}
		if *v == "" || (flag == "admin" && *v == "off") {
			return nil
		}
		if _, _, err := net.SplitHostPort(*v); err != nil {
			return fmt.Errorf("%s: %q is not %s", name, *v, want)
		}
		return nil
	}
	return errors.Join(
		check("listen", envGatewayListen, "host:port, like 127.0.0.1:8080", &l.listen),
		check("admin", envGatewayAdmin, "host:port, like 127.0.0.1:9901, or off", &l.admin))
}

// override puts the given addresses over a config file's.
func (l *listenFlags) override(c *config.Config) {
	if l.listen != "" {
		c.Listen = l.listen
	}
	if l.admin != "" {
		c.Admin.Listen = l.admin
	}
}

func (l *listenFlags) listenOr(def string) string { return cmp.Or(l.listen, def) }
func (l *listenFlags) adminOr(def string) string  { return cmp.Or(l.admin, def) }
