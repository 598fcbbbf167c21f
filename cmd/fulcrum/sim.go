package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/supervisor/sim"
)

// newSimCmd returns `fulcrum sim`, simulators for demos and tests.
func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulators for demos and tests",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSimRoomsCmd())
	return cmd
}

func newSimRoomsCmd() *cobra.Command {
	var (
		listen string
		c      sim.Config
	)
	cmd := &cobra.Command{
		Use:   "rooms",
		Short: "Serve simulated live rooms for the supervisor demo",
		Long: `Serve simulated live rooms over Server-Sent Events.

  GET  /rooms                the rooms as a task list (source: {type: http, url: http://ADDR/rooms})
  GET  /rooms/ROOM/events    a room's stream: the same messages and ids for every watcher, heartbeats
  POST /rooms?count=N        change the number of rooms
  GET  /stats                counters`,
		Example: "  fulcrum sim rooms --listen 127.0.0.1:7400 --rooms 50 --rate 2",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			s, err := sim.New(c)
			if err != nil {
				return fmt.Errorf("sim rooms: --%w", err)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("sim rooms: --listen: %w", err)
			}
			ctx, stop := signal.NotifyContext(simContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go s.Run(ctx)
			srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			// stderr: stdout may be a pipe of JSON lines (run.sh's is the sink's).
			fmt.Fprintf(cmd.ErrOrStderr(), "sim rooms: %d rooms on http://%s/rooms\n", s.Stats().Rooms, ln.Addr())
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:7400", "address to serve on")
	f.IntVar(&c.Rooms, "rooms", sim.DefaultRooms, "number of rooms (room-1 … room-N)")
	f.Float64Var(&c.Rate, "rate", sim.DefaultRate, "messages per second in each watched room")
	f.DurationVar(&c.Heartbeat, "heartbeat", sim.DefaultHeartbeat, "heartbeat interval on each stream (at most 30s)")
	return cmd
}

// simContext is the command's context, or Background when run without one.
func simContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
