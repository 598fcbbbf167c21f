package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Session works on one task, for example by watching one live room.
type Session interface {
	// Run works on task until ctx is cancelled, which happens when the
	// supervisor ends the task or the worker stops. It hands data to out.Emit
	// and signs of life without data (a room's heartbeat) to out.Seen. If Run
	// returns while the task is still assigned, the worker runs it again
	// after a backoff; a task that keeps failing stops looking alive, and the
	// supervisor moves it elsewhere.
	Run(ctx context.Context, task protocol.Task, out *Output) error
}

// SessionFunc adapts a function to Session.
type SessionFunc func(ctx context.Context, task protocol.Task, out *Output) error

// Run calls f.
func (f SessionFunc) Run(ctx context.Context, task protocol.Task, out *Output) error {
	return f(ctx, task, out)
}

// Defaults.
const (
	DefaultReportInterval  = 10 * time.Second // a third of the supervisor's default 30 s worker timeout
	DefaultSendQueue       = 10_000
	DefaultMaxPayloadBytes = 1<<20 - 4<<10
	DefaultMinBackoff      = 200 * time.Millisecond
	DefaultMaxBackoff      = 10 * time.Second
	readLimit              = 64 << 20 // an instruction set with a reset lists every task the worker keeps
)

// Config configures a Worker.
type Config struct {
	// URL of the supervisor's worker endpoint, ws:// or wss:// (required).
	URL string
	// Token authenticates the worker; sent as "Authorization: Bearer <token>".
	Token string
	// WorkerID names the worker; unique in the fleet and stable across
	// restarts so the supervisor recognises it (required).
	WorkerID string
	// MaxLoad is the most tasks the worker runs at once (required, > 0).
	MaxLoad int
	// Session runs the tasks (required).
	Session Session
	// ReportInterval between reports (default 10s); keep it well under the
	// supervisor's worker_timeout.
	ReportInterval time.Duration
	// SendQueue is how many payloads may wait for the connection (default
	// 10000); past it Emit drops and counts.
	SendQueue int
	// MinBackoff and MaxBackoff bound the wait between reconnects and between
	// restarts of a failed session (defaults 200ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// MaxPayloadBytes drops (and counts) payloads whose data is larger, so
	// one huge message cannot exceed the supervisor's max_message_bytes and
	// cost the connection (default 1 MiB - 4 KiB, under its 1 MiB default).
	MaxPayloadBytes int
	// Logger for connection and session events (default: discard).
	Logger *slog.Logger
	// HTTPClient dials the WebSocket (default http.DefaultClient).
	HTTPClient *http.Client
}

func (c *Config) validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("worker: URL is required")
	case err != nil:
		return fmt.Errorf("worker: URL: %w", err)
	case u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("worker: URL %q: scheme must be ws or wss", c.URL)
	case c.WorkerID == "":
		return errors.New("worker: WorkerID is required")
	case c.MaxLoad <= 0:
		return fmt.Errorf("worker: MaxLoad %d must be positive", c.MaxLoad)
	case c.Session == nil:
		return errors.New("worker: Session is required")
	case c.ReportInterval < 0 || c.SendQueue < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 || c.MaxPayloadBytes < 0:
		return errors.New("worker: durations and sizes may not be negative")
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.SendQueue == 0 {
		c.SendQueue = DefaultSendQueue
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	return nil
}

// Worker runs sessions for a supervisor. Create it with New and start it with
// Run.
type Worker struct {
	c   Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	ending   map[string]chan struct{} // task -> done of a session still stopping
	wg       sync.WaitGroup           // session goroutines

	out  chan protocol.Payload
	kick chan struct{} // asks the writer for a report now (the task set changed)

	connected                          atomic.Bool
	connects, reports, payloads, drops atomic.Uint64
	instructions, rejections           atomic.Uint64
	running                            atomic.Bool
}

type session struct {
	task     protocol.Task
	cancel   context.CancelFunc
	done     chan struct{}
	lastSeen atomic.Int64 // unix ns, 0 until the first data
}

// New validates c and returns a Worker.
func New(c Config) (*Worker, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Worker{
		c: c, log: c.Logger.With("worker", c.WorkerID),
		sessions: map[string]*session{},
		ending:   map[string]chan struct{}{},
		out:      make(chan protocol.Payload, c.SendQueue),
		kick:     make(chan struct{}, 1),
	}, nil
}

// Stats counts what a worker did.
type Stats struct {
	Connected    bool
	Connects     uint64 // successful connections
	Reports      uint64 // reports sent
	Payloads     uint64 // payloads sent
	Dropped      uint64 // payloads dropped: send queue full, or data over MaxPayloadBytes
	Instructions uint64 // instruction sets applied
	Rejections   uint64 // error messages received from the supervisor
	Running      int    // sessions running now
}

// Stats returns the counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	n := len(w.sessions)
	w.mu.Unlock()
	return Stats{
		Connected: w.connected.Load(), Connects: w.connects.Load(), Reports: w.reports.Load(),
		Payloads: w.payloads.Load(), Dropped: w.drops.Load(), Instructions: w.instructions.Load(),
		Rejections: w.rejections.Load(), Running: n,
	}
}

// Tasks returns the ids of the tasks running now, sorted.
func (w *Worker) Tasks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.sessions))
	for id := range w.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Run connects, reconnects and serves until ctx is cancelled; then it ends
// every session, waits for them and returns ctx's error. It may be called
// once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	defer func() {
		w.mu.Lock()
		for id, s := range w.sessions {
			s.cancel()
			delete(w.sessions, id)
		}
		w.mu.Unlock()
		w.wg.Wait()
	}()
	bo := w.c.MinBackoff
	for {
		err := w.connectOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errWasConnected) {
			bo = w.c.MinBackoff // it worked for a while: retry soon
		}
		w.log.Warn("supervisor connection ended; reconnecting", "err", err, "in", bo)
		if !sleep(ctx, jitter(bo)) {
			return ctx.Err()
		}
		bo = min(2*bo, w.c.MaxBackoff)
	}
}

var errWasConnected = errors.New("connection lost")

// connectOnce runs one connection until it fails.
func (w *Worker) connectOnce(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	h := http.Header{}
	if w.c.Token != "" {
		h.Set("Authorization", "Bearer "+w.c.Token)
	}
	conn, resp, err := websocket.Dial(dctx, w.c.URL, &websocket.DialOptions{HTTPHeader: h, HTTPClient: w.c.HTTPClient})
	cancel()
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return fmt.Errorf("supervisor refused the token (%s): %w", resp.Status, err)
		}
		return err
	}
	conn.SetReadLimit(readLimit)
	w.connects.Add(1)
	w.connected.Store(true)
	defer w.connected.Store(false)
	w.log.Info("connected to supervisor", "url", w.c.URL)

	cctx, stop := context.WithCancel(ctx)
	defer stop()
	werr := make(chan error, 1)
	go func() { werr <- w.writeLoop(cctx, conn); stop() }()
	rerr := w.readLoop(cctx, conn)
	stop()
	we := <-werr
	conn.Close(websocket.StatusGoingAway, "worker stopping")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if rerr == nil {
		rerr = we
	}
	return fmt.Errorf("%w: %w", errWasConnected, rerr)
}

func (w *Worker) readLoop(ctx context.Context, conn *websocket.Conn) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			w.log.Warn("ignoring a binary message from the supervisor")
			continue
		}
		var env protocol.Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			w.log.Warn("ignoring a malformed message from the supervisor", "err", err)
			continue
		}
		switch env.Type {
		case protocol.TypeInstruction:
			var in protocol.Instruction
			if err := json.Unmarshal(data, &in); err != nil {
				w.log.Warn("ignoring a malformed instruction set", "err", err)
				continue
			}
			w.apply(&in)
		case protocol.TypeError:
			var e protocol.Error
			_ = json.Unmarshal(data, &e)
			w.rejections.Add(1)
			w.log.Warn("supervisor rejected a message", "reason", e.Reason)
		default:
			w.log.Warn("ignoring a message of unknown type", "type", env.Type)
		}
	}
}

// writeLoop sends a report at once (so a restarted supervisor learns what
// this worker holds), then one every interval and whenever the task set
// changes, and payloads as they come.
func (w *Worker) writeLoop(ctx context.Context, conn *websocket.Conn) error {
	t := time.NewTicker(w.c.ReportInterval)
	defer t.Stop()
	if err := w.sendReport(ctx, conn); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := w.sendReport(ctx, conn); err != nil {
				return err
			}
		case <-w.kick:
			if err := w.sendReport(ctx, conn); err != nil {
				return err
			}
		case p := <-w.out:
			if err := w.send(ctx, conn, p); err != nil {
				// This payload is lost with the connection; the other
				// workers of its task send it too.
				return err
			}
			w.payloads.Add(1)
		}
	}
}

func (w *Worker) sendReport(ctx context.Context, conn *websocket.Conn) error {
	if err := w.send(ctx, conn, w.report()); err != nil {
		return err
	}
	w.reports.Add(1)
	return nil
}

func (w *Worker) report() protocol.Report {
	w.mu.Lock()
	tasks := make([]protocol.TaskStatus, 0, len(w.sessions))
	for id, s := range w.sessions {
		ts := protocol.TaskStatus{TaskID: id}
		if ns := s.lastSeen.Load(); ns != 0 {
			ts.LastSeen = time.Unix(0, ns).UTC()
		}
		tasks = append(tasks, ts)
	}
	w.mu.Unlock()
	slices.SortFunc(tasks, func(a, b protocol.TaskStatus) int {
		if a.TaskID < b.TaskID {
			return -1
		}
		if a.TaskID > b.TaskID {
			return 1
		}
		return 0
	})
	return protocol.Report{Type: protocol.TypeReport, WorkerID: w.c.WorkerID, MaxLoad: w.c.MaxLoad, Tasks: tasks, SentAt: time.Now().UTC()}
}

func (w *Worker) send(ctx context.Context, conn *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, b)
}

// apply carries out an instruction set: reset first, then end, then add.
func (w *Worker) apply(in *protocol.Instruction) {
	w.instructions.Add(1)
	w.mu.Lock()
	changed := false
	if in.Reset {
		keep := make(map[string]bool, len(in.Add))
		for _, t := range in.Add {
			keep[t.TaskID] = true
		}
		for id := range w.sessions {
			if !keep[id] {
				w.stopLocked(id)
				changed = true
			}
		}
	}
	for _, id := range in.End {
		if w.stopLocked(id) {
			changed = true
		}
	}
	var refused []string
	for _, t := range in.Add {
		if _, ok := w.sessions[t.TaskID]; ok || t.TaskID == "" {
			continue
		}
		if len(w.sessions) >= w.c.MaxLoad {
			refused = append(refused, t.TaskID)
			continue
		}
		w.startLocked(t)
		changed = true
	}
	n := len(w.sessions)
	w.mu.Unlock()
	if len(refused) > 0 {
		// The next report shows the supervisor what actually runs.
		w.log.Warn("refused tasks past max load", "max_load", w.c.MaxLoad, "tasks", refused)
	}
	w.log.Debug("applied instruction set", "reset", in.Reset, "add", len(in.Add), "end", len(in.End), "running", n)
	if changed {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

func (w *Worker) stopLocked(id string) bool {
	s, ok := w.sessions[id]
	if !ok {
		return false
	}
	s.cancel()
	delete(w.sessions, id)
	w.ending[id] = s.done
	return true
}

func (w *Worker) startLocked(t protocol.Task) {
	// Sessions must outlive the connection that started them (a supervisor
	// restart must not end them), so they hang off the worker's lifetime.
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{task: t, cancel: cancel, done: make(chan struct{})}
	w.sessions[t.TaskID] = s
	prev := w.ending[t.TaskID]
	w.wg.Add(1)
	go w.runSession(ctx, s, prev)
}

// runSession runs s until its context ends. prev, if not nil, is an earlier
// session of the same task that is still stopping: never two at once.
func (w *Worker) runSession(ctx context.Context, s *session, prev chan struct{}) {
	defer w.wg.Done()
	defer func() {
		w.mu.Lock()
		if w.ending[s.task.TaskID] == s.done {
			delete(w.ending, s.task.TaskID)
		}
		w.mu.Unlock()
		close(s.done)
	}()
	if prev != nil {
		<-prev
	}
	out := &Output{w: w, s: s}
	bo := w.c.MinBackoff
	for {
		start := time.Now()
		err := w.safeRun(ctx, s, out)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > w.c.MaxBackoff {
			bo = w.c.MinBackoff // it ran fine for a while
		}
		w.log.Warn("session ended; restarting", "task", s.task.TaskID, "err", err, "in", bo)
		if !sleep(ctx, jitter(bo)) {
			return
		}
		bo = min(2*bo, w.c.MaxBackoff)
	}
}

// safeRun turns a panicking session into an error: one bad room must not take
// the worker's other sessions down.
func (w *Worker) safeRun(ctx context.Context, s *session, out *Output) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("session panicked: %v", r)
		}
	}()
	return w.c.Session.Run(ctx, s.task, out)
}

// Output is how a session hands over what it gets.
type Output struct {
	w *Worker
	s *session
}

// Emit sends one payload. messageID identifies the message at its origin
// (the same for every worker watching the room) and is the supervisor's dedup
// key; pass "" to dedup by content. data that is not JSON is sent as a JSON
// string (and so is JSON null, which the supervisor refuses). Emit never
// blocks: when the send queue is full, or data is over MaxPayloadBytes, it
// drops the payload, counts it in Stats.Dropped and returns false.
func (o *Output) Emit(messageID string, data []byte) bool {
	o.Seen()
	if len(data) > o.w.c.MaxPayloadBytes {
		o.w.drops.Add(1)
		o.w.log.Warn("dropped a payload over MaxPayloadBytes", "task", o.s.task.TaskID, "bytes", len(data))
		return false
	}
	raw := json.RawMessage(data)
	if t := bytes.TrimSpace(data); !json.Valid(data) || string(t) == "null" {
		s, _ := json.Marshal(string(data))
		raw = s
	} else {
		raw = append(json.RawMessage(nil), data...) // the caller may reuse data
	}
	p := protocol.Payload{Type: protocol.TypePayload, WorkerID: o.w.c.WorkerID, TaskID: o.s.task.TaskID, MessageID: messageID, Data: raw}
	select {
	case o.w.out <- p:
		return true
	default:
		o.w.drops.Add(1)
		return false
	}
}

// Seen marks the task alive without sending data (a heartbeat): the next
// report carries the time as the task's last_seen.
func (o *Output) Seen() { o.s.lastSeen.Store(time.Now().UnixNano()) }

func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
