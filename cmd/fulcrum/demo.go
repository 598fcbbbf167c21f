package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/demo"
)

type demoOptions struct {
	listen, admin string
	upstreams     []string
	strategy      string
	accessLog     bool
}

func newDemoCmd() *cobra.Command {
	o := demoOptions{}
	var (
		gogc  int
		addrs listenFlags
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run 3 local demo upstreams behind a round-robin gateway",
		Long: `Start three tiny upstreams (each answers with its name) and a gateway in
front of them, then print what to curl. No setup needed:

  go run ./cmd/fulcrum demo
  curl -s localhost:8080/   # upstream-1, upstream-2, upstream-3, ...

Ports taken? --listen, --admin and --upstreams move them (or
FULCRUM_GATEWAY_LISTEN and FULCRUM_GATEWAY_ADMIN):

  go run ./cmd/fulcrum demo --listen 127.0.0.1:18080 --admin 127.0.0.1:19901 \
      --upstreams 127.0.0.1:19001,127.0.0.1:19002,127.0.0.1:19003`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			setGC(gogc)
			if err := addrs.resolve(cmd); err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			o.listen, o.admin = addrs.listenOr("127.0.0.1:8080"), addrs.adminOr("127.0.0.1:9901")
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	addrs.register(cmd, "gateway address (default 127.0.0.1:8080, or $FULCRUM_GATEWAY_LISTEN)",
		"admin API and console address (default 127.0.0.1:9901, or $FULCRUM_GATEWAY_ADMIN)")
	cmd.Flags().StringSliceVar(&o.upstreams, "upstreams", []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}, "demo upstream addresses")
	cmd.Flags().StringVar(&o.strategy, "strategy", "round_robin", "balance strategy")
	cmd.Flags().BoolVar(&o.accessLog, "access-log", false, "print an access log line per request")
	cmd.Flags().IntVar(&gogc, "gogc", 400, "GC target percentage unless GOGC is set")
	cmd.AddCommand(newDemoUpstreamsCmd())
	return cmd
}

func newDemoUpstreamsCmd() *cobra.Command {
	var (
		listen  []string
		permits []int
		latency time.Duration
	)
	cmd := &cobra.Command{
		Use:   "upstreams --listen 127.0.0.1:9001,127.0.0.1:9002",
		Short: "Run only the demo upstreams (for benchmarks and experiments)",
		Long: `Run only the demo upstreams. With --permits each serves that many requests
at once, each held for --latency, and refuses one more at once with 503, as a
full server does: targets for the capacity strategy to learn limits from
(examples/gateway/learned.yaml).`,
		Example: `  fulcrum demo upstreams
  fulcrum demo upstreams --permits 10,20,40 --latency 20ms   # 3 upstreams that refuse past 10, 20, 40 at once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(permits) > 1 && len(permits) != len(listen) {
				return fmt.Errorf("demo upstreams: --permits: %d values for %d --listen addresses (give one for all, or one each)", len(permits), len(listen))
			}
			if latency < 0 {
				return fmt.Errorf("demo upstreams: --latency: %v is negative", latency)
			}
			opts := make([]demo.Options, len(listen))
			for i := range opts {
				opts[i].Latency = latency
				if len(permits) > 0 {
					opts[i].Permits = permits[min(i, len(permits)-1)]
					if opts[i].Permits <= 0 {
						return fmt.Errorf("demo upstreams: --permits: %d is not positive", opts[i].Permits)
					}
				}
			}
			us, err := demo.StartAllWith(listen, opts)
			if err != nil {
				return fmt.Errorf("demo upstreams: --listen: %w", err)
			}
			for i, u := range us {
				fmt.Fprintf(cmd.OutOrStdout(), "%s listening on http://%s", u.Name, u.Addr)
				if opts[i].Permits > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), " (%d permits, %v each; 503 when full)", opts[i].Permits, opts[i].Latency)
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			ctx, stop := signal.NotifyContext(ctxOf(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			demo.Wait(ctx, us)
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&listen, "listen", []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}, "addresses, one upstream each")
	cmd.Flags().IntSliceVar(&permits, "permits", nil, "requests each upstream serves at once, one value for all or one per address; one more gets 503 (default: unlimited)")
	cmd.Flags().DurationVar(&latency, "latency", 0, "how long each request holds its permit before the answer")
	return cmd
}

func ctxOf(cmd *cobra.Command) context.Context {
	if c := cmd.Context(); c != nil {
		return c
	}
	return context.Background()
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(o.upstreams) == 0 {
		o.upstreams = []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}
	}
	if o.strategy == "" {
		o.strategy = "round_robin"
	}
	// The flags are checked here, by name: the config below is generated,
	// and an error at one of its lines would point at a file nobody wrote.
	if !balance.Known(o.strategy) {
		return fmt.Errorf("demo: --strategy: unknown strategy %q (known: %s)", o.strategy, strings.Join(balance.Names(), ", "))
	}
	if o.listen == "" {
		o.listen = "127.0.0.1:8080"
	}
	if o.admin == "" {
		o.admin = "127.0.0.1:9901"
	}
	if o.admin == "off" {
		return errors.New("demo: --admin: the demo needs its admin API (give host:port)")
	}
	for _, a := range o.upstreams {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("demo: --upstreams: %q is not host:port, like 127.0.0.1:9001", a)
		}
	}
	us, err := demo.StartAll(o.upstreams)
	if err != nil {
		return fmt.Errorf("demo: --upstreams: %w (move them with --upstreams, like --upstreams 127.0.0.1:19001,127.0.0.1:19002,127.0.0.1:19003)", err)
	}
	defer demo.CloseAll(us)
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nadmin: {listen: %q}\naccess_log: {enabled: %v}\nupstreams:\n  demo:\n    strategy: %s\n    targets:\n", o.listen, o.admin, o.accessLog, o.strategy)
	for _, u := range us {
		fmt.Fprintf(&b, "      - {url: \"http://%s\"}\n", u.Addr)
	}
	cfg, err := config.Parse([]byte(b.String()))
	if err != nil {
		// Not reached with the flags checked above; say where it came from.
		return fmt.Errorf("demo: the generated config: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := gateway.New(cfg, gateway.Options{Logger: log})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Fulcrum demo: %d upstreams behind a %s gateway.\n", len(us), o.strategy)
	for _, u := range us {
		fmt.Fprintf(out, "  %s  http://%s\n", u.Name, u.Addr)
	}
	fmt.Fprintf(out, `
Console: http://%[2]s/ui/   (the targets live: health, in-flight, latency; disable, weight, drain)

Try:
  for i in 1 2 3 4 5 6; do curl -s http://%[1]s/; done   # round robin: upstream-1, -2, -3, -1, ...
  curl -s http://%[2]s/upstreams                        # targets, weights, health, in-flight
  curl -s http://%[2]s/metrics | grep fulcrum_gateway    # Prometheus metrics
Ctrl-C to stop.
`, o.listen, o.admin)
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveWithSignals(sctx, g, log, cfg.ShutdownGrace.D())
}
