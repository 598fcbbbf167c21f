package supervisor

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
	"github.com/fulcrum-lb/fulcrum/supervisor/leadership"
	"github.com/fulcrum-lb/fulcrum/supervisor/lease"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
)

// WorkerPath is where workers connect.
const WorkerPath = "/ws"

// publisher is what the server needs from a sink.
type publisher interface {
	sink.Sink
	Published() uint64
	Dropped() uint64
	Pending() int
}

// Server is a running supervisor: the worker endpoint, the admin API and the
// event loop that owns all state.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	http   *http.Server
	src    source.Source
	sink   publisher
	dedup  *dedup.Deduper
	window dedup.Store // the dedup window outside the process; nil: memory only
	m      *metrics
	ctx    context.Context
	cancel context.CancelFunc
	events chan func(now time.Time)
	wg     sync.WaitGroup
	once   sync.Once

	offered atomic.Uint64 // payloads handed to the sink

	// Messages read from each worker (by id) that the event loop has not
	// handled yet: a worker with one is not silent, however far behind the
	// loop is (Core.Tick). An entry lives while its count is above zero.
	backlog struct {
		sync.Mutex
		n map[string]int
	}

	// High availability (nil ha: the supervisor runs alone). ha stores the
	// fleet's admin changes and dedup window; leadership itself is el's.
	ha *lease.Lease
	el *leadership.Elector

	// Owned by the event loop goroutine.
	clock    struct{ base, at time.Time } // the loop's clock read base at wall time at (now)
	core     *Core
	leading  uint64           // the term core's lifecycle leads, 0 for none
	conns    map[string]*conn // by worker id
	querying bool
}

// Start validates cfg, opens the source and the sink, listens on
// cfg.Listen and starts warming up. The server runs until ctx is done or
// Close is called.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("supervisor config: %w", err)
	}
	src, err := source.Open(cfg.Source)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	start := time.Now()
	core, err := NewCore(cfg.Timings(), cfg.Redundancy, start)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("supervisor: listen: %w", err)
	}
	var ha *lease.Lease
	if cfg.HA.Database != "" {
		host, _ := os.Hostname()
		holder := fmt.Sprintf("%s-%d-%d", host, os.Getpid(), rand.Uint32())
		if ha, err = lease.Open(ctx, cfg.HA.Database, cfg.HA.Name, holder, cfg.HA.Advertise, cfg.HA.Lease); err != nil {
			ln.Close()
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	sk, err := sink.Open(ctx, cfg.Sink, log)
	if err != nil {
		ln.Close()
		if ha != nil {
			ha.Close()
		}
		return nil, fmt.Errorf("supervisor: sink: %w", err)
	}
	dd := dedup.New(cfg.Dedup.Window, cfg.Dedup.MaxEntries)
	var window dedup.Store
	switch {
	case ha != nil:
		window = ha.DedupLog(cfg.Dedup.Window, rateLimited(log, "dedup window not stored; a replay of these may be published twice"))
	case cfg.Dedup.Path != "":
		// A single supervisor: the window is read back before the
		// listener serves, so the first replayed payload already meets it.
		fs, err := dedup.OpenFile(cfg.Dedup.Path, cfg.Dedup.Window)
		if err == nil {
			var es []dedup.Entry
			var unsure []dedup.Entry
			if es, unsure, err = dedup.ReadFile(cfg.Dedup.Path, start.Add(-cfg.Dedup.Window)); err == nil {
				// Uncertain: handed to the sink, unconfirmed when the last
				// process stopped; their replay is published again.
				log.Info("dedup window restored", "path", cfg.Dedup.Path, "keys", dd.Restore(es, start), "uncertain", len(unsure))
			}
			if err != nil {
				fs.Close()
			}
		}
		if err != nil {
			ln.Close()
			sk.Close()
			return nil, fmt.Errorf("supervisor: %w", err)
		}
		window = fs
	}
	if window != nil {
		sk.OnSending(recordWith(window.Sending, log))
		sk.OnDelivered(recordWith(window.Append, log))
		warn := rateLimited(log, "dedup window not recorded; a replay of these may be published twice")
		sk.OnIdle(func() {
			if err := window.Flush(); err != nil {
				warn(err)
			}
		})
	}
	s := &Server{
		cfg:    cfg,
		log:    log,
		ln:     ln,
		src:    src,
		sink:   sk,
		dedup:  dd,
		window: window,
		events: make(chan func(time.Time), 1024),
		core:   core,
		conns:  map[string]*conn{},
		ha:     ha,
	}
	s.clock.base, s.clock.at = start, start
	var l leadership.Lease
	if ha != nil {
		l = ha // a nil *lease.Lease must not become a non-nil interface
	}
	s.el = leadership.New(l, leadership.Config{TTL: cfg.HA.Lease, Tick: cfg.Tick, Advertise: cfg.HA.Advertise, Log: log,
		Elected: s.elected, Resigned: s.resigned})
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.m = newMetrics(s)
	s.http = &http.Server{Handler: s.withConsole(s.routes()), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(3)
	go func() { defer s.wg.Done(); s.loop() }()
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("supervisor: serve", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
			s.cancel()
		case <-s.ctx.Done():
		}
		s.http.Close()
	}()
	if ha != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.el.Run(s.ctx) }()
	}
	log.Info("supervisor started", "addr", s.Addr(), "warmup", cfg.Warmup, "redundancy", cfg.Redundancy,
		"source", cfg.Source.Type, "sink", cfg.Sink.Type, "role", s.el.State().Role)
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: workers are disconnected (they keep their
// sessions and reconnect to the next supervisor), and the sink delivers what
// it buffered within its flush timeout.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		err = s.sink.Close() // its last confirmations are recorded in the window
		if s.window != nil {
			if werr := s.window.Close(); werr != nil && err == nil {
				err = werr
			}
		}
		if s.ha != nil {
			s.ha.Close()
		}
		s.log.Info("supervisor stopped")
	})
	return err
}

// post hands f to the event loop; false if the server is closing.
func (s *Server) post(f func(time.Time)) bool {
	select {
	case s.events <- f:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// call runs f on the event loop and returns its result.
func call[T any](ctx context.Context, s *Server, f func(now time.Time) T) (T, error) {
	ch := make(chan T, 1)
	var zero T
	if !s.post(func(now time.Time) { ch <- f(now) }) {
		return zero, errors.New("supervisor is closing")
	}
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-s.ctx.Done():
		return zero, errors.New("supervisor is closing")
	}
}

func (s *Server) loop() {
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	defer func() {
		for _, c := range s.conns {
			c.close(websocket.StatusGoingAway, "supervisor shutting down")
		}
	}()
	for {
		select {
		case <-s.ctx.Done():
			return
		case f := <-s.events:
			f(s.now())
		case <-tick.C:
			s.onTick()
		}
	}
}

// maxGap is the most time the loop's clock counts between two ticks.
func (s *Server) maxGap() time.Duration { return max(2*s.cfg.Tick, time.Second) }

// now reads the loop's clock, which drives every timeout, warm-up and
// query: the wall clock, except that a gap between two ticks counts as
// maxGap at most. Time in which the supervisor itself could not run (a
// machine out of CPU, a paused VM, a loop held by a long call) is not time
// in which its workers were silent: their reports were waiting on it.
func (s *Server) now() time.Time {
	return s.clock.base.Add(min(time.Since(s.clock.at), s.maxGap()))
}

// onTick moves the loop's clock on and expires what timed out. The loop's
// select picks a due tick or a queued event at random, so a tick may come
// before reports read earlier: those workers count as heard (waiting).
func (s *Server) onTick() {
	wall := time.Now()
	now := s.clock.base.Add(min(wall.Sub(s.clock.at), s.maxGap()))
	s.clock.base, s.clock.at = now, wall
	s.core.Tick(now, s.waiting)
	s.settle(now)
}

// received counts a message read from a worker, before it is posted to the
// event loop; the loop calls handled when it takes it.
func (s *Server) received(workerID string) {
	s.backlog.Lock()
	if s.backlog.n == nil {
		s.backlog.n = map[string]int{}
	}
	s.backlog.n[workerID]++
	s.backlog.Unlock()
}

func (s *Server) handled(workerID string) {
	s.backlog.Lock()
	if s.backlog.n[workerID]--; s.backlog.n[workerID] <= 0 {
		delete(s.backlog.n, workerID)
	}
	s.backlog.Unlock()
}

// waiting reports whether a message from the worker is read and not yet
// handled.
func (s *Server) waiting(workerID string) bool {
	s.backlog.Lock()
	defer s.backlog.Unlock()
	return s.backlog.n[workerID] > 0
}

// settle sends what the last events produced: instruction sets, the
// disconnection of dead workers, a task query when one is due.
func (s *Server) settle(now time.Time) {
	// One read of the gate: alone, or leading the term this lifecycle
	// belongs to with the lease still trusted.
	leads := s.el.Leads(s.leading)
	// A query comes due only while leading: a standby's (or a term not
	// yet open's) stays due for when it leads.
	if leads && s.core.TakeQuery() && !s.querying {
		s.querying = true
		go s.query(s.core, s.leading)
	}
	send, drop := s.core.Flush(now)
	if !leads {
		send = nil // stepped down, or the lease no longer trusted (the elector not yet told): nothing more to say
	}
	for _, o := range send {
		s.m.instructions.Inc()
		c := s.conns[o.WorkerID]
		if c == nil {
			// Not connected: its next connection gets everything again.
			s.m.undelivered.Inc()
			continue
		}
		o.Instruction.Term = s.leading
		b, err := json.Marshal(o.Instruction)
		if err != nil { // cannot happen with these types
			s.log.Error("supervisor: encode instruction", "err", err)
			continue
		}
		if !c.enqueue(b) {
			s.m.undelivered.Inc()
			s.disconnect(c, websocket.StatusTryAgainLater, "send queue full")
		}
	}
	for _, id := range drop {
		s.log.Warn("worker dead: silent past worker_timeout", "worker", id, "timeout", s.cfg.WorkerTimeout)
		if c := s.conns[id]; c != nil {
			s.disconnect(c, websocket.StatusPolicyViolation, "silent past worker_timeout")
		}
	}
	s.m.refresh(s)
}

func (s *Server) disconnect(c *conn, code websocket.StatusCode, reason string) {
	if s.conns[c.id] == c {
		delete(s.conns, c.id)
	}
	c.close(code, reason)
}

// query asks the source for the task list on behalf of core (the lifecycle
// of one term: a result for a core that has since been replaced is
// dropped). A leader's first query also loads the admin changes stored in
// the database, which the end of warm-up applies like queued ones.
func (s *Server) query(core *Core, term uint64) {
	ctx, cancel := context.WithTimeout(s.ctx, max(s.cfg.Source.Timeout, time.Second))
	tasks, err := s.src.List(ctx)
	var stored struct {
		add    []protocol.Task
		remove []string
	}
	if err == nil && s.ha != nil && core.Phase() == Warming {
		if stored.add, stored.remove, err = s.ha.LoadTasks(ctx); err != nil {
			err = fmt.Errorf("load admin task changes: %w", err)
		}
	}
	cancel()
	s.post(func(now time.Time) {
		if s.core != core {
			return // a term ended meanwhile; the new one queries for itself
		}
		s.querying = false
		if err != nil {
			s.log.Error("task query failed", "err", err, "retry_in", min(s.cfg.QueryRetry, s.cfg.QueryInterval))
		}
		if len(stored.add) > 0 || len(stored.remove) > 0 {
			core.AdminTasks(stored.add, stored.remove) // queued: warming up
		}
		was := s.core.Phase()
		s.core.QueryResult(now, tasks, err)
		if changed := s.core.TakeSourceChanges(); s.ha != nil && len(changed) > 0 {
			go func() {
				ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
				defer cancel()
				if err := s.ha.ForgetTasks(ctx, term, changed); err != nil {
					s.log.Warn("could not drop stored admin changes the source overrode", "err", err)
				}
			}()
		}
		if was == Warming && s.core.Phase() == Running {
			w, t, _, missing := s.core.Engine().Counts()
			s.log.Info("warm-up over: tasks assigned", "workers", w, "tasks", t, "missing_holders", missing)
		}
		s.settle(now)
	})
}

// ---- workers ----

type conn struct {
	term uint64 // the leadership term it was accepted in
	ws   *websocket.Conn
	out  chan []byte
	done chan struct{}
	once sync.Once
	id   string // the worker id, set by the reader from the first report
}

func (c *conn) enqueue(b []byte) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.out <- b:
		return true
	default:
		return false
	}
}

func (c *conn) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		close(c.done)
		go c.ws.Close(code, reason) // the closing handshake waits; the loop must not
	})
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		s.m.rejected.WithLabelValues("unauthorized").Inc()
		unauthorized(w)
		return
	}
	term := s.el.Term()
	if !s.el.Leads(term) {
		s.standbyAnswer(w)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the HTTP error
	}
	ws.SetReadLimit(s.cfg.MaxMessageBytes)
	c := &conn{term: term, ws: ws, out: make(chan []byte, s.cfg.SendQueue), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go s.writeLoop(ctx, c)
	s.readLoop(ctx, c)
	s.post(func(time.Time) {
		if c.id != "" && s.conns[c.id] == c {
			delete(s.conns, c.id)
		}
	})
	c.close(websocket.StatusNormalClosure, "")
}

func (s *Server) writeLoop(ctx context.Context, c *conn) {
	for {
		select {
		case b := <-c.out:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.ws.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				c.close(websocket.StatusInternalError, "write failed")
				return
			}
		case <-c.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) readLoop(ctx context.Context, c *conn) {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			s.reject(c, "invalid", "binary frames are not part of the protocol: send JSON text frames")
			continue
		}
		msg, err := decodeMessage(data)
		if err != nil {
			s.reject(c, "invalid", err.Error())
			continue
		}
		switch m := msg.(type) {
		case *protocol.Report:
			s.m.messages.WithLabelValues(protocol.TypeReport).Inc()
			first := false
			if c.id == "" {
				c.id, first = m.WorkerID, true
			} else if m.WorkerID != c.id {
				s.reject(c, "identity", fmt.Sprintf("report: worker_id %q differs from %q, the id this connection reported first", m.WorkerID, c.id))
				continue
			}
			s.received(m.WorkerID)
			if !s.post(func(now time.Time) { s.handled(m.WorkerID); s.onReport(now, c, m, first) }) {
				return
			}
		case *protocol.Payload:
			s.m.messages.WithLabelValues(protocol.TypePayload).Inc()
			if c.id == "" {
				s.reject(c, "identity", "payload before the first report: send a report first")
				continue
			}
			if m.WorkerID != c.id {
				s.reject(c, "identity", fmt.Sprintf("payload: worker_id %q differs from %q, the id this connection reported", m.WorkerID, c.id))
				continue
			}
			s.received(m.WorkerID)
			if !s.post(func(now time.Time) { s.handled(m.WorkerID); s.onPayload(now, c, m) }) {
				return
			}
		}
	}
}

func (s *Server) reject(c *conn, kind, reason string) {
	s.m.rejected.WithLabelValues(kind).Inc()
	s.log.Debug("message rejected", "worker", c.id, "reason", reason)
	b, _ := json.Marshal(protocol.Error{Type: protocol.TypeError, Reason: reason})
	c.enqueue(b)
}

func (s *Server) onReport(now time.Time, c *conn, r *protocol.Report, first bool) {
	if !s.el.Leads(c.term) {
		c.close(websocket.StatusTryAgainLater, "no longer the leader")
		return
	}
	if first {
		if old := s.conns[r.WorkerID]; old != nil && old != c {
			old.close(websocket.StatusPolicyViolation, "replaced by a newer connection of the same worker")
		}
		s.conns[r.WorkerID] = c
	} else if s.conns[r.WorkerID] != c {
		return // a replaced connection's late message
	}
	if r.MaxLoad > s.cfg.MaxLoadCeiling {
		// Counted as the ceiling: a worker claiming too much is not
		// refused, only kept from looking like room for everything.
		r.MaxLoad = s.cfg.MaxLoadCeiling
	}
	s.core.Report(now, r, first)
	s.settle(now)
}

func (s *Server) onPayload(now time.Time, c *conn, p *protocol.Payload) {
	if s.conns[p.WorkerID] != c || !s.el.Leads(c.term) {
		return
	}
	if !s.core.Payload(now, p) {
		s.m.payloads.WithLabelValues("unknown_task").Inc()
		return
	}
	k := dedup.Key(p.TaskID, p.MessageID, p.Data)
	if !s.dedup.FirstKey(k, now) {
		s.m.payloads.WithLabelValues("duplicate").Inc()
		return
	}
	s.m.payloads.WithLabelValues("published").Inc()
	s.offered.Add(1)
	if err := s.sink.Publish(s.ctx, sink.Message{TaskID: p.TaskID, MessageID: p.MessageID, Data: p.Data, Key: k, At: now.UnixNano()}); err != nil {
		s.log.Debug("sink dropped a payload", "task", p.TaskID, "err", err) // counted by the sink
	}
}

// roleStatus fills the leadership fields of a status.
func (s *Server) roleStatus(st *Status) {
	el := s.el.State()
	st.Role, st.Term, st.Leader = el.Role.String(), el.Term, el.Leader
}

// standbyAnswer refuses a worker or an admin call on a supervisor that does
// not lead: 503, with the leader's worker URL in the Fulcrum-Leader header
// and the body (and its admin URL in the body).
func (s *Server) standbyAnswer(w http.ResponseWriter) {
	leader := s.el.LeaderElsewhere(s.ctx)
	if leader != "" {
		w.Header().Set(protocol.LeaderHeader, leader)
	}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "standby supervisor: not the leader", "leader": leader,
		"leader_admin": adminURL(leader)})
}

// adminURL is the admin API's base URL of a supervisor known by its worker
// URL (the same listener): ws://h:7300/ws becomes http://h:7300.
func adminURL(workerURL string) string {
	u, err := url.Parse(workerURL)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := "http"
	if u.Scheme == "wss" || u.Scheme == "https" {
		scheme = "https"
	}
	return scheme + "://" + u.Host
}

// elected prepares term, which the elector has just taken the lease for,
// before its gate opens: the fleet's dedup window is read, then the event
// loop starts term's lifecycle. Workers are accepted only after both, so
// their replay meets the window and lands in the new lifecycle.
func (s *Server) elected(ctx context.Context, term uint64) {
	s.restoreWindow(s.cfg.HA.Lease / 3)
	call(ctx, s, func(now time.Time) struct{} { s.lead(now, term); return struct{}{} })
}

// resigned ends term on the event loop; the elector has already closed the
// gate.
func (s *Server) resigned(term uint64) {
	s.post(func(now time.Time) { s.stepDown(now, term) })
}

// restoreWindow reads the fleet's dedup window, which the previous leader
// recorded, before this one leads: workers are accepted only once lead has
// run, so their replay meets the window. Bounded by limit (the lease must
// still be renewed); a failure is logged and leading goes on (the replay
// may then publish again what the old leader had published).
func (s *Server) restoreWindow(limit time.Duration) {
	if s.window == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, limit)
	defer cancel()
	now := time.Now()
	es, err := s.window.Load(ctx, now.Add(-s.cfg.Dedup.Window))
	if err != nil {
		s.log.Error("dedup window not read from the database; payloads replayed now may be published twice", "err", err)
		return
	}
	var unsure int
	if dl, ok := s.window.(*lease.DedupLog); ok {
		if u, err := dl.Uncertain(ctx); err == nil {
			unsure = len(u) // handed to the sink, unconfirmed when the last leader stopped: published again
		}
	}
	s.log.Info("dedup window restored", "keys", s.dedup.Restore(es, now), "uncertain", unsure)
}

// recordWith makes the sink's OnSending and OnDelivered hooks: the keys of
// messages handed to the destination, then of those it confirmed, go to the
// window's store. Publish, then record: a message is in
// the store only once its destination has it, so a crash can never make a
// replayed payload look published when it was not (no loss); a crash
// between the confirmation and this write publishes that one group again.
func recordWith(record func([]dedup.Entry) error, log *slog.Logger) func([]sink.Message) {
	var buf []dedup.Entry // the sink's one delivery goroutine calls this
	warn := rateLimited(log, "dedup window not recorded; a replay of these may be published twice")
	return func(ms []sink.Message) {
		buf = buf[:0]
		for _, m := range ms {
			buf = append(buf, dedup.Entry{Key: m.Key, At: m.At})
		}
		if err := record(buf); err != nil {
			warn(err)
		}
	}
}

// rateLimited logs msg with an error at most once every 5 s.
func rateLimited(log *slog.Logger, msg string) func(error) {
	var last atomic.Int64
	return func(err error) {
		now := time.Now().UnixNano()
		if l := last.Load(); now-l >= int64(5*time.Second) && last.CompareAndSwap(l, now) {
			log.Warn(msg, "err", err)
		}
	}
}

// lead starts term: a fresh lifecycle, warming up, that workers now reach.
func (s *Server) lead(now time.Time, term uint64) {
	core, err := NewCore(s.cfg.Timings(), s.cfg.Redundancy, now)
	if err != nil { // the config was validated; cannot happen
		s.log.Error("supervisor: new term", "err", err)
		return
	}
	s.core, s.querying, s.leading = core, false, term
	s.log.Info("leading", "term", term, "warmup", s.cfg.Warmup)
	s.m.refresh(s)
}

// stepDown ends term: every worker is disconnected (they go to the next
// leader) and the lifecycle starts afresh, idle, as a standby's.
func (s *Server) stepDown(now time.Time, term uint64) {
	if s.leading != term {
		return
	}
	s.leading = 0
	for id, c := range s.conns {
		c.close(websocket.StatusTryAgainLater, "no longer the leader")
		delete(s.conns, id)
	}
	if core, err := NewCore(s.cfg.Timings(), s.cfg.Redundancy, now); err == nil {
		s.core, s.querying = core, false
	}
	s.log.Warn("stepped down: standing by", "term", term)
	s.m.refresh(s)
}

// ---- auth ----

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true // allowed on a loopback listener only (Config.Validate)
	}
	tok := r.URL.Query().Get("token")
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, v, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return false
		}
		tok = strings.TrimSpace(v)
	}
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="fulcrum supervisor"`)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong token (Authorization: Bearer TOKEN, or ?token=TOKEN)"})
}
