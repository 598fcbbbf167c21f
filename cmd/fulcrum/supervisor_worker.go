package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/supervisor/sim"
	"github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// newSupervisorWorkerCmd returns `fulcrum supervisor worker`, which
// newSupervisorCmd adds as a subcommand: a worker whose sessions watch rooms
// of `fulcrum sim rooms` and send their messages as payloads.
func newSupervisorWorkerCmd() *cobra.Command {
	var (
		c            worker.Config
		simBase      string
		verbose      bool
		drainTimeout time.Duration
	)
	host, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a demo worker that watches simulated rooms",
		Long: `Run a worker for the supervisor. It connects over WebSocket, reports every
--report-interval, and runs one session per assigned task: the session watches
the room at the task spec's "url" (as listed by "fulcrum sim rooms"), or at
--sim/rooms/TASK_ID/events, and sends each message as a payload.

The token can also come from the environment variable FULCRUM_TOKEN.`,
		Example: "  fulcrum supervisor worker --supervisor ws://127.0.0.1:7300/ws --token T --id w1 --max-load 100",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case c.MaxLoad <= 0:
				return fmt.Errorf("supervisor worker: --max-load: %d must be positive", c.MaxLoad)
			case c.WorkerID == "":
				return fmt.Errorf("supervisor worker: --id: required")
			}
			if c.Token == "" {
				c.Token = os.Getenv("FULCRUM_TOKEN")
			}
			for _, u := range strings.Split(c.URL, ",") {
				if err := worker.CheckURL(u); err != nil {
					return fmt.Errorf("supervisor worker: --supervisor: %w", err)
				}
			}
			if urls := strings.Split(c.URL, ","); len(urls) > 1 {
				c.URL, c.URLs = urls[0], urls[1:]
			}
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			c.Session = &sim.RoomSession{Base: simBase}
			w, err := worker.New(c)
			if err != nil {
				return fmt.Errorf("supervisor worker: %w", err)
			}
			sig, stop := signal.NotifyContext(simContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithCancel(simContext(cmd))
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			select {
			case err = <-done: // retrying cannot help
			case <-sig.Done():
				// A planned stop: the supervisor places our rooms elsewhere
				// and ends them here once the new holders run them.
				c.Logger.Info("draining: waiting for the supervisor to move our tasks", "timeout", drainTimeout)
				dctx, dcancel := context.WithTimeout(context.Background(), drainTimeout)
				if derr := w.Drain(dctx); derr != nil {
					c.Logger.Warn("drain incomplete; stopping anyway", "err", derr, "still_running", len(w.Tasks()))
				}
				dcancel()
				cancel()
				err = <-done
			}
			s := w.Stats()
			c.Logger.Info("worker stopped", "reports", s.Reports, "payloads", s.Payloads, "dropped", s.Dropped)
			var fatal *worker.FatalError
			if errors.As(err, &fatal) {
				return fmt.Errorf("supervisor worker: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.URL, "supervisor", "ws://127.0.0.1:7300/ws", "the supervisor's worker endpoint; with high availability every supervisor's, comma-separated")
	f.StringVar(&c.Token, "token", "", "token the supervisor expects (or FULCRUM_TOKEN)")
	f.StringVar(&c.WorkerID, "id", host+"-"+strconv.Itoa(os.Getpid()), "worker id, unique in the fleet and stable across restarts")
	f.IntVar(&c.MaxLoad, "max-load", 100, "most tasks this worker runs at once")
	f.DurationVar(&c.ReportInterval, "report-interval", worker.DefaultReportInterval, "time between reports (keep well under the supervisor's worker_timeout)")
	f.IntVar(&c.SendQueue, "send-queue", worker.DefaultSendQueue, "payloads that may wait for the connection")
	f.StringVar(&simBase, "sim", "http://127.0.0.1:7400", "simulator URL for tasks whose spec has no url")
	f.BoolVar(&verbose, "verbose", false, "log every instruction set")
	f.DurationVar(&drainTimeout, "drain-timeout", time.Minute, "on SIGTERM or SIGINT, how long to wait for the supervisor to move this worker's tasks before stopping")
	return cmd
}
