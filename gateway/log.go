package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Log: one access line per request, for both transports, written here
// and nowhere else; gateway-made answers are counted here too.

// accessLine is what the access log says about one request.
type accessLine struct {
	start        time.Time
	rid, client  string
	proto        string // net/http path only
	method, path string
	up           *upstream
	target       string // "" when the gateway answered itself
	retries      int    // retries made
	reason       string // why the gateway answered itself (502/503/504)
}

// logRequest counts a gateway-made answer and writes the access line.
func (g *Gateway) logRequest(ctx context.Context, l *accessLine, status int) {
	if l.target == "" {
		g.countLocal(l.up, status)
	}
	if g.access == nil {
		return
	}
	name := ""
	if l.up != nil {
		name = l.up.name
	}
	attrs := []slog.Attr{
		slog.String("request_id", l.rid),
		slog.String("client", l.client),
		slog.String("method", l.method),
		slog.String("path", l.path),
		slog.String("upstream", name),
		slog.String("target", l.target),
		slog.Int("status", status),
		slog.Int("retries", l.retries),
		slog.Duration("duration", time.Since(l.start)),
	}
	if l.proto != "" {
		attrs = append(attrs, slog.String("proto", l.proto))
	}
	if l.reason != "" {
		attrs = append(attrs, slog.String("reason", l.reason))
	}
	g.access.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
}

// logLine fills in the fast path's connection fields and logs.
func (cc *clientConn) logLine(l *accessLine, status int) {
	if cc.g.access != nil {
		l.rid, l.client = string(cc.rid), string(cc.ip)
	}
	cc.g.logRequest(context.Background(), l, status)
}

// asyncWriter hands access lines to a goroutine that writes them, so no
// request, and no event loop, ever waits on the log's disk or pipe.
// Lines collect in one buffer while the goroutine writes the other
// (double buffering: nothing allocated per line); past accessBufMax
// bytes waiting, a line is dropped and counted
// (fulcrum_gateway_access_log_dropped_total) rather than held.
type asyncWriter struct {
	w       io.Writer
	dropped prometheus.Counter
	mu      sync.Mutex
	buf     []byte
	spare   []byte
	wake    chan struct{}
	closed  bool
	done    chan struct{}
}

const accessBufMax = 4 << 20

func newAsyncWriter(w io.Writer, dropped prometheus.Counter) *asyncWriter {
	a := &asyncWriter{w: w, dropped: dropped, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.run()
	return a
}

func (a *asyncWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	if a.closed || len(a.buf)+len(p) > accessBufMax {
		a.mu.Unlock()
		a.dropped.Inc()
		return len(p), nil
	}
	a.buf = append(a.buf, p...)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (a *asyncWriter) run() {
	defer close(a.done)
	for {
		_, open := <-a.wake
		a.flush()
		if !open {
			return
		}
	}
}

// flush writes buffered lines until none are left, swapping buffers so
// writers append to one while the other is written.
func (a *asyncWriter) flush() {
	for {
		a.mu.Lock()
		out := a.buf
		a.buf, a.spare = a.spare[:0], nil
		a.mu.Unlock()
		if len(out) > 0 {
			_, _ = a.w.Write(out)
		}
		a.mu.Lock()
		a.spare = out[:0]
		more := len(a.buf) > 0
		a.mu.Unlock()
		if !more {
			return
		}
	}
}

// close writes what is buffered and stops the goroutine.
func (a *asyncWriter) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	a.mu.Unlock()
	close(a.wake)
	<-a.done
}
