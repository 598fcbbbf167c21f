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
	"strings"
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
	DefaultReplay          = 10 * time.Second
	// DefaultHandshakeTimeout bounds the WebSocket opening handshake. A
	// live supervisor answers it from its HTTP server, not its event loop,
	// so it takes milliseconds even when busy; a frozen one (SIGSTOP, a
	// paused VM) accepts the TCP connection and never answers.
	DefaultHandshakeTimeout = 3 * time.Second
	readLimit               = 64 << 20 // an instruction set with a reset lists every task the worker keeps
)

// Config configures a Worker.
type Config struct {
	// URL of the supervisor's worker endpoint, ws:// or wss:// (required).
	URL string
	// URLs of further supervisors sharing one database (high availability):
	// the worker connects to one at a time, goes where a standby says the
	// leader is, and tries the next when one cannot be reached.
	URLs []string
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
	// Replay: payloads sent within this long before a connection ends are
	// sent again on the next one (default 10s; negative: never). A
	// supervisor killed with payloads still in its buffers loses them; the
	// next one (after a restart or a failover) gets them again. The same
	// supervisor drops the repeats as duplicates; a new one publishes them
	// again, so the sink sees them twice unless it deduplicates (JetStream
	// does, by message id). At most SendQueue payloads are kept.
	Replay time.Duration
	// HandshakeTimeout bounds the WebSocket opening handshake with one
	// supervisor (default 3s): one that does not answer in time (frozen,
	// stopped) is left for the next URL at once, without backoff.
	HandshakeTimeout time.Duration
	// Logger for connection and session events (default: discard).
	Logger *slog.Logger
	// HTTPClient dials the WebSocket (default http.DefaultClient).
	HTTPClient *http.Client
}

func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("worker: URL is required")
	}
	for _, raw := range append([]string{c.URL}, c.URLs...) {
		if err := CheckURL(raw); err != nil {
			return fmt.Errorf("worker: URL %w", err)
		}
	}
	switch {
	case c.WorkerID == "":
		return errors.New("worker: WorkerID is required")
	case c.MaxLoad <= 0:
		return fmt.Errorf("worker: MaxLoad %d must be positive", c.MaxLoad)
	case c.Session == nil:
		return errors.New("worker: Session is required")
	case c.ReportInterval < 0 || c.SendQueue < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 || c.MaxPayloadBytes < 0:
		return errors.New("worker: durations and sizes may not be negative")
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("worker: HandshakeTimeout %v may not be negative", c.HandshakeTimeout)
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
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
	if c.Replay == 0 {
		c.Replay = DefaultReplay
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

	// Owned by the writer (one connection at a time).
	replay []sent    // payloads sent lately, oldest first, for the next connection
	ended  time.Time // when the last connection's writer stopped
	urls   []string
	next   string // where to connect next (a standby named the leader), or ""

	term atomic.Uint64 // highest leadership term seen in an instruction set

	draining  atomic.Bool
	drained   chan struct{} // closed when, draining, no session runs
	drainOnce sync.Once

	connected                          atomic.Bool
	connects, reports, payloads, drops atomic.Uint64
	instructions, rejections, stale    atomic.Uint64
	replayed                           atomic.Uint64
	running                            atomic.Bool
}

type sent struct {
	p  protocol.Payload
	at time.Time
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
		urls:     append([]string{c.URL}, c.URLs...),
		drained:  make(chan struct{}),
	}, nil
}

// Drain is a planned stop, make before break: the worker tells the
// supervisor (its reports say draining), which gives each of its tasks to
// another worker and ends it here once the new holder runs it. Drain
// returns when no session runs any more, or with ctx's error (the caller
// then stops Run anyway, and the supervisor moves what is left after its
// timeouts). Run must be running; cancel its context after Drain.
func (w *Worker) Drain(ctx context.Context) error {
	w.draining.Store(true)
	w.mu.Lock()
	n := len(w.sessions)
	w.mu.Unlock()
	if n == 0 {
		w.drainOnce.Do(func() { close(w.drained) })
	}
	select { // report now, not at the next interval
	case w.kick <- struct{}{}:
	default:
	}
	select {
	case <-w.drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	Stale        uint64 // instruction sets ignored: their term was older than one already seen
	Replayed     uint64 // payloads sent again on a new connection
	Term         uint64 // highest leadership term seen
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
		Rejections: w.rejections.Load(), Stale: w.stale.Load(), Replayed: w.replayed.Load(),
		Term: w.term.Load(), Running: n,
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
	for i := 0; ; i++ {
		u := w.urls[i%len(w.urls)]
		if w.next != "" {
			u, w.next = w.next, ""
			i-- // the list resumes where it was
		}
		err := w.connectOnce(ctx, u)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fatal *FatalError
		if errors.As(err, &fatal) {
			w.log.Error("stopping: the supervisor refuses this worker", "url", u, "err", err)
			return err
		}
		if errors.Is(err, errWasConnected) || w.next != "" || (errors.Is(err, errHandshakeTimeout) && len(w.urls) > 1) {
			// It worked for a while, we know where to go, or this one is
			// frozen and another may lead: retry soon.
			bo = w.c.MinBackoff
		}
		w.log.Warn("supervisor connection ended; reconnecting", "url", u, "err", err, "in", bo)
		if !sleep(ctx, jitter(bo)) {
			return ctx.Err()
		}
		bo = min(2*bo, w.c.MaxBackoff)
	}
}

var (
	errWasConnected     = errors.New("connection lost")
	errHandshakeTimeout = errors.New("no answer to the WebSocket handshake (supervisor frozen or overloaded?); trying the next")
)

// FatalError is what Run returns when retrying cannot help: the supervisor
// refused the token (401, 403), or there is no worker endpoint at the URL
// (404: a URL without /ws, say).
type FatalError struct {
	URL    string
	Status int
	Reason string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("worker: %s answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Reason)
}

// CheckURL checks a supervisor's worker endpoint URL as Config does,
// with an error that shows the URL to give instead: a scheme (ws or wss)
// and a path (the supervisor's is /ws) are required.
func CheckURL(raw string) error {
	if !strings.Contains(raw, "://") {
		return fmt.Errorf("%q has no scheme: give ws://%s (or wss://)", raw, withWS(raw))
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %w", raw, err)
	case u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: scheme must be ws or wss", raw)
	case u.Path == "" || u.Path == "/":
		// The supervisor's root answers its console, not a worker.
		return fmt.Errorf("%q has no path: the supervisor's worker endpoint is /ws (%s://%s/ws)", raw, u.Scheme, u.Host)
	}
	return nil
}

// withWS is a scheme-less address with the worker endpoint's path added
// when it has none, for the error that suggests the URL to give.
func withWS(raw string) string {
	if strings.Contains(raw, "/") {
		return raw
	}
	return raw + "/ws"
}

// LeaderHeader is where a standby supervisor's 503 names the leader.
const LeaderHeader = protocol.LeaderHeader

// connectOnce runs one connection to u until it fails.
func (w *Worker) connectOnce(ctx context.Context, u string) error {
	dctx, cancel := context.WithTimeout(ctx, w.c.HandshakeTimeout)
	h := http.Header{}
	if w.c.Token != "" {
		h.Set("Authorization", "Bearer "+w.c.Token)
	}
	conn, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPHeader: h, HTTPClient: w.c.HTTPClient})
	timedOut := dctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		if resp == nil {
			if timedOut {
				return fmt.Errorf("%w: %w (after %v)", errHandshakeTimeout, err, w.c.HandshakeTimeout)
			}
			return err
		}
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return &FatalError{u, resp.StatusCode, "the supervisor refused the token (check --token or FULCRUM_TOKEN)"}
		case http.StatusNotFound:
			return &FatalError{u, resp.StatusCode, "no worker endpoint there (the supervisor's is at /ws, e.g. ws://HOST:7300/ws)"}
		case http.StatusServiceUnavailable:
			if l := resp.Header.Get(LeaderHeader); l != "" && l != u {
				w.next = l
				return fmt.Errorf("standby supervisor; the leader is %s", l)
			}
		}
		return err
	}
	conn.SetReadLimit(readLimit)
	w.connects.Add(1)
	w.connected.Store(true)
	defer w.connected.Store(false)
	w.log.Info("connected to supervisor", "url", u)

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

// writeLoop sends a report at once, with the specs of the tasks it runs (so
// a restarted supervisor learns what this worker holds), then the payloads
// of the replay window, then a report every interval and whenever the task
// set changes, and payloads as they come.
func (w *Worker) writeLoop(ctx context.Context, conn *websocket.Conn) error {
	t := time.NewTicker(w.c.ReportInterval)
	defer t.Stop()
	defer func() { w.ended = time.Now() }()
	if err := w.sendReport(ctx, conn, true); err != nil {
		return err
	}
	// What the last connection sent in its final Replay: sent again with
	// their first send time, so a connection that fails at once replays
	// them once more.
	cut := w.ended.Add(-w.c.Replay)
	for _, r := range w.replay {
		if r.at.Before(cut) {
			continue
		}
		if err := w.send(ctx, conn, r.p); err != nil {
			return err
		}
		w.replayed.Add(1)
	}
	var pinging atomic.Bool
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := w.sendReport(ctx, conn, false); err != nil {
				return err
			}
			// A supervisor that is stuck (not dead: its socket still takes
			// our writes) would hold this worker's payloads forever; one
			// that does not answer a ping within two report intervals is
			// left for the next (a standby becomes the leader meanwhile).
			if pinging.CompareAndSwap(false, true) {
				go func() {
					defer pinging.Store(false)
					pctx, cancel := context.WithTimeout(ctx, 2*w.c.ReportInterval)
					defer cancel()
					if err := conn.Ping(pctx); err != nil && ctx.Err() == nil {
						w.log.Warn("supervisor does not answer pings; reconnecting", "err", err)
						conn.CloseNow()
					}
				}()
			}
		case <-w.kick:
			if err := w.sendReport(ctx, conn, false); err != nil {
				return err
			}
		case p := <-w.out:
			if err := w.send(ctx, conn, p); err != nil {
				// The replay window sends it again on the next
				// connection; the other workers of its task send it too.
				w.remember(p)
				return err
			}
			w.payloads.Add(1)
			w.remember(p)
		}
	}
}

// remember keeps p for the replay window: written to a socket is not
// published (the supervisor may die with it in its buffers).
func (w *Worker) remember(p protocol.Payload) {
	if w.c.Replay < 0 {
		return
	}
	now := time.Now()
	cut := now.Add(-w.c.Replay) // older ones are past every future connection's window
	drop := 0
	for drop < len(w.replay) && (w.replay[drop].at.Before(cut) || len(w.replay)-drop >= w.c.SendQueue) {
		drop++
	}
	if drop > 0 {
		n := copy(w.replay, w.replay[drop:])
		clear(w.replay[n:])
		w.replay = w.replay[:n]
	}
	w.replay = append(w.replay, sent{p, now})
}

func (w *Worker) sendReport(ctx context.Context, conn *websocket.Conn, first bool) error {
	if err := w.send(ctx, conn, w.report(first)); err != nil {
		return err
	}
	w.reports.Add(1)
	return nil
}

// report states the worker; withSpecs (the first report of a connection)
// adds each task's spec.
func (w *Worker) report(withSpecs bool) protocol.Report {
	w.mu.Lock()
	tasks := make([]protocol.TaskStatus, 0, len(w.sessions))
	for id, s := range w.sessions {
		ts := protocol.TaskStatus{TaskID: id}
		if withSpecs {
			ts.Spec = s.task.Spec
		}
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
	return protocol.Report{Type: protocol.TypeReport, WorkerID: w.c.WorkerID, MaxLoad: w.c.MaxLoad, Tasks: tasks,
		SentAt: time.Now().UTC(), Draining: w.draining.Load()}
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

// apply carries out an instruction set: reset first, then end, then add. A
// set from an older leadership term than one already seen is ignored: its
// sender lost its lease and another supervisor leads.
func (w *Worker) apply(in *protocol.Instruction) {
	for {
		cur := w.term.Load()
		if in.Term < cur {
			w.stale.Add(1)
			w.log.Warn("ignored an instruction set from an older supervisor term", "term", in.Term, "current", cur)
			return
		}
		if in.Term == cur || w.term.CompareAndSwap(cur, in.Term) {
			break
		}
	}
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
	if n == 0 && w.draining.Load() {
		w.drainOnce.Do(func() { close(w.drained) })
	}
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
