package gateway

import (
	"context"
	"log/slog"
	"time"
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
