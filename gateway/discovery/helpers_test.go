package discovery

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// recorder runs a provider's Watch for the test's duration and keeps what
// it sent.
type recorder struct {
	mu    sync.Mutex
	lists [][]Target
}

func watch(t *testing.T, p Provider) *recorder {
	t.Helper()
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Watch(ctx, func(ts []Target) {
			r.mu.Lock()
			r.lists = append(r.lists, ts)
			r.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// updates is how many lists were sent.
func (r *recorder) updates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lists)
}

// last is the last list sent, in short form.
func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lists) == 0 {
		return "(nothing sent)"
	}
	return short(r.lists[len(r.lists)-1])
}

// await waits until the last list sent reads want.
func (r *recorder) await(t *testing.T, want string) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("targets %q (last sent: %s)", want, r.last()), func() bool { return r.last() == want })
}

// short writes a list as "url w=N mc=N started=T, ...".
func short(ts []Target) string {
	var parts []string
	for _, t := range ts {
		s := fmt.Sprintf("%s w=%d", t.URL, t.Weight)
		if t.MaxConcurrency != 0 {
			s += fmt.Sprintf(" mc=%d", t.MaxConcurrency)
		}
		if !t.StartedAt.IsZero() {
			s += " started=" + t.StartedAt.UTC().Format("15:04:05")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// logBuffer is a logger whose output a test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

func newLogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
