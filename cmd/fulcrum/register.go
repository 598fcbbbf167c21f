package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery"
)

func newRegisterCmd() *cobra.Command {
	var (
		endpoints          []string
		prefix, url        string
		weight, maxConc    int
		ttl                time.Duration
		startedAt          string
		username, password string
	)
	cmd := &cobra.Command{
		Use:   "register --prefix /fulcrum/upstreams/api/ --url http://10.0.0.5:8080 [-- command args...]",
		Short: "Register a target in etcd for gateway discovery while it runs",
		Long: `Put a target under an etcd key prefix that a gateway upstream discovers
(discovery: {etcd: {prefix: ...}}, see docs/gateway.md), with a lease kept
alive while this command runs and the target's start time, which the
gateway's warm-up counts from.

Without a command, it registers until SIGTERM or SIGINT and then removes the
key. With one (after --), it starts the command, registers it with the
command's start time, passes SIGTERM/SIGINT on, and removes the key when the
command exits, exiting with its status. If this process is killed outright,
the key disappears when the lease lapses (--ttl).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if prefix == "" || url == "" {
				return errors.New("register: --prefix and --url are required")
			}
			if !strings.HasSuffix(prefix, "/") {
				return fmt.Errorf("register: --prefix %q must end with / (one key per target below it)", prefix)
			}
			t := discovery.Target{URL: url, Weight: weight, MaxConcurrency: maxConc}
			if startedAt != "" {
				v, err := time.Parse(time.RFC3339Nano, startedAt)
				if err != nil {
					return fmt.Errorf("register: --started-at %q is not an RFC 3339 time (like 2026-11-23T21:00:00Z)", startedAt)
				}
				t.StartedAt = v
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			cli, err := discovery.NewEtcdClient(config.EtcdDiscovery{Endpoints: endpoints, DialTimeout: config.Duration(5 * time.Second),
				Username: username, Password: password})
			if err != nil {
				return fmt.Errorf("register: %w", err)
			}
			defer cli.Close()

			var child *exec.Cmd
			exited := make(chan error, 1)
			if len(args) > 0 {
				child = exec.Command(args[0], args[1:]...)
				child.Stdin, child.Stdout, child.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
				if err := child.Start(); err != nil {
					return fmt.Errorf("register: %w", err)
				}
				if t.StartedAt.IsZero() {
					t.StartedAt = time.Now()
				}
				go func() { exited <- child.Wait() }()
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			reg, err := discovery.Register(rctx, cli, prefix, t, ttl, log)
			cancel()
			if err != nil {
				var childErr error
				if child != nil {
					_ = child.Process.Signal(syscall.SIGTERM)
					childErr = <-exited
				}
				if ctx.Err() == nil {
					return fmt.Errorf("register: %w", err)
				}
				// Stopped while registering: a stop, not a failure, and
				// Register left nothing registered.
				fmt.Fprintf(cmd.OutOrStdout(), "stopped before %s was registered under %s; nothing left registered\n", url, prefix)
				if childErr != nil {
					return fmt.Errorf("register: command: %w", childErr)
				}
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered %s (ttl %v)\n", reg.Key, ttl)
			var childErr error
			select {
			case <-ctx.Done():
				if child != nil {
					_ = child.Process.Signal(syscall.SIGTERM)
					childErr = <-exited
				}
			case childErr = <-exited:
			case <-reg.Done():
			}
			if err := reg.Close(); err != nil {
				log.Warn("deregister failed; the key lapses with its lease", "key", reg.Key, "err", err)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "deregistered %s\n", reg.Key)
			}
			if childErr != nil {
				return fmt.Errorf("register: command: %w", childErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&endpoints, "etcd", []string{"http://127.0.0.1:2379"}, "etcd client URLs")
	f.StringVar(&prefix, "prefix", "", "key prefix the gateway watches (ends with /)")
	f.StringVar(&url, "url", "", "the target, http://host:port as the gateway should reach it")
	f.IntVar(&weight, "weight", 1, "the target's weight")
	f.IntVar(&maxConc, "max-concurrency", 0, "the target's max concurrency (0: unlimited)")
	f.DurationVar(&ttl, "ttl", 10*time.Second, "lease TTL: how long the key outlives this process if it is killed")
	f.StringVar(&startedAt, "started-at", "", "when the target started, RFC 3339 (default: the command's start, else now)")
	f.StringVar(&username, "username", "", "etcd user, when authentication is on")
	f.StringVar(&password, "password", "", "etcd password (prefer FULCRUM_ETCD_PASSWORD)")
	cmd.PreRun = func(*cobra.Command, []string) {
		if password == "" {
			password = os.Getenv("FULCRUM_ETCD_PASSWORD")
		}
	}
	return cmd
}
