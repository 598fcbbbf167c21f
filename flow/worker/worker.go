package worker

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/pool"
)

// Config sets up a Worker. Only one of Servers and Client is needed.
type Config struct {
	// Servers are the flow server base URLs; a client over them is made
	// (and closed) by the worker.
	Servers []string
	// Client is used instead of Servers when set; the worker does not close it.
	Client *client.Client
	// Token is the servers' API token, for the client made from Servers.
	Token string
	// WorkerID names this worker to the server (the task's owner). Default:
	// hostname-pid-random.
	WorkerID string
	// Concurrency is how many handlers run at once. Default 8.
	Concurrency int
	// MaxBacklog is how many tasks the worker holds at most (queued, running
	// or being reported); it stops pulling while it holds that many.
	// Default 2 x Concurrency.
	MaxBacklog int
	// HoldLimit is the most tasks asked for in one hold. Default Concurrency.
	HoldLimit int
	// ScheduleInterval is how often a task type is pulled when its config
	// was not given to Register. Default 1s.
	ScheduleInterval time.Duration
	// ShutdownTimeout bounds Stop: after it, handler contexts are cancelled
	// and outcomes not yet reported are dropped (the server retries those
	// tasks once their leases expire). Default 30s.
	ShutdownTimeout time.Duration
	// ReportBatch is the most outcomes sent in one set_tasks. Default 256.
	ReportBatch int
	// ScheduleLog hands handlers each task's schedule log (Task.Raw's
	// ScheduleLog). Off by default: holds then ask the server to leave the
	// logs out, which it neither reads nor sends (end to end on
	// PostgreSQL, about 5 µs of CPU a task; docs/flow.md, Performance).
	// A handler that wants the history can read it with GetTask.
	ScheduleLog bool
	// OnReported, when set, is told the fate of every outcome the worker
	// reports, once: recorded by the server or given up. It is the SDK's
	// counterpart of River's job-completion events (a dashboard, a test
	// awaiting a task, a benchmark's clock). It runs on a reporter's
	// goroutine, so it must return quickly.
	OnReported func(Report)
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Report is the fate of one outcome (Config.OnReported).
type Report struct {
	TaskID, TaskType string
	Stage            string      // the stage that ran
	Status           flow.Status // what the worker set: success, failed, or pending
	NextStage        string      // with pending: the stage that runs next
	// Err is nil when the server recorded the outcome. Otherwise the outcome
	// was not recorded: the task was no longer this worker's
	// (client.ErrStaleLease, client.ErrNotFound), or the worker gave up
	// sending it (stopped, or its lease ran out), and the server runs the
	// stage again after the lease.
	Err error
}

// ErrNotReported is a Report's Err for an outcome dropped unsent at a
// shutdown that ran out of time.
var ErrNotReported = errors.New("flow worker: outcome dropped at shutdown")

func (c *Config) validate() error {
	switch {
	case c.Client == nil && len(c.Servers) == 0:
		return errors.New("flow worker: Servers: set Servers or Client")
	case c.Concurrency < 0:
		return fmt.Errorf("flow worker: Concurrency: %d is negative", c.Concurrency)
	case c.MaxBacklog < 0:
		return fmt.Errorf("flow worker: MaxBacklog: %d is negative", c.MaxBacklog)
	case c.HoldLimit < 0:
		return fmt.Errorf("flow worker: HoldLimit: %d is negative", c.HoldLimit)
	case c.ScheduleInterval < 0:
		return fmt.Errorf("flow worker: ScheduleInterval: %v is negative", c.ScheduleInterval)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("flow worker: ShutdownTimeout: %v is negative", c.ShutdownTimeout)
	case c.ReportBatch < 0:
		return fmt.Errorf("flow worker: ReportBatch: %d is negative", c.ReportBatch)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.MaxBacklog == 0 {
		c.MaxBacklog = 2 * c.Concurrency
	}
	if c.HoldLimit == 0 {
		c.HoldLimit = c.Concurrency
	}
	if c.HoldLimit > c.MaxBacklog {
		c.HoldLimit = c.MaxBacklog
	}
	if c.ScheduleInterval == 0 {
		c.ScheduleInterval = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.ReportBatch == 0 {
		c.ReportBatch = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.WorkerID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return nil
}

// Worker pulls tasks and runs their stages. Make it with New, add handlers
// with Handle (and type configs with Register), then call Run once.
type Worker struct {
	cfg       Config
	c         *client.Client
	ownClient bool
	log       *slog.Logger

	mu      sync.Mutex
	types   map[string]*typeState
	started bool

	held  atomic.Int64 // tasks held (or slots reserved for a hold in flight)
	room  broadcast    // notified when held drops
	queue chan *heldTask

	stop     chan struct{} // closed by Stop
	stopOnce sync.Once

	out outbox

	handlerBase context.Context // handlers' contexts derive from it (Run)

	liveMu sync.Mutex
	live   map[*heldTask]struct{} // held tasks the heartbeat renews
	liveCh chan struct{}          // a task was added to live that is due before armed
	armed  time.Time              // when the heartbeat's timer fires; zero: no timer
}

type typeState struct {
	cfg      *flow.TaskType // nil when the config was not given to Register
	handlers map[string]Handler
}

// New checks cfg and returns a Worker.
func New(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:   cfg,
		c:     cfg.Client,
		log:   cfg.Logger.With("worker", cfg.WorkerID),
		types: map[string]*typeState{},
		queue: make(chan *heldTask, cfg.MaxBacklog),
		stop:  make(chan struct{}),
	}
	w.out.init()
	w.live, w.liveCh = map[*heldTask]struct{}{}, make(chan struct{}, 1)
	if w.c == nil {
		c, err := client.New(cfg.Servers, client.Options{Logger: cfg.Logger, Token: cfg.Token})
		if err != nil {
			return nil, fmt.Errorf("flow worker: %w", err)
		}
		w.c, w.ownClient = c, true
	}
	return w, nil
}

// ID is the worker id sent with every hold.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Handle registers h for one stage of a task type. The worker pulls every
// task type it has a handler for.
func (w *Worker) Handle(taskType, stage string, h Handler) {
	if taskType == "" || stage == "" || h == nil {
		panic("flow worker: Handle needs a task type, a stage and a handler")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("flow worker: Handle after Run")
	}
	ts := w.typeLocked(taskType)
	ts.handlers[stage] = h
}

// Register gives the worker a task type's schedule config: Run sends it to
// the server (register_task) before pulling, and the worker pulls that type
// every ScheduleIntervalMS and renews leases at a third of MaxProcessingMS.
func (w *Worker) Register(tt flow.TaskType) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("flow worker: Register after Run")
	}
	ts := w.typeLocked(tt.TaskType)
	ts.cfg = &tt
}

func (w *Worker) typeLocked(name string) *typeState {
	ts := w.types[name]
	if ts == nil {
		ts = &typeState{handlers: map[string]Handler{}}
		w.types[name] = ts
	}
	return ts
}

// Stop asks a running worker to shut down: it stops pulling, finishes the
// handlers that run, gives back the tasks not started, and Run returns once
// every outcome is reported. Stop does not wait; Run does.
func (w *Worker) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// Run registers the configured task types, then pulls and runs tasks until
// ctx ends or Stop is called; then it drains as Stop describes and returns.
// It returns nil after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("flow worker: Run called twice")
	}
	w.started = true
	types := w.types
	w.mu.Unlock()
	if len(types) == 0 {
		return errors.New("flow worker: no handlers: call Handle before Run")
	}
	if w.ownClient {
		defer w.c.Close()
	}
	for name, ts := range types {
		if ts.cfg != nil {
			if err := w.c.RegisterTask(ctx, *ts.cfg); err != nil {
				return fmt.Errorf("flow worker: register task type %q: %w", name, err)
			}
			continue
		}
		// Not registered here: learn the type's pace and lease from the
		// server. A type the server does not know cannot be pulled.
		tt, err := w.c.GetTaskType(ctx, name)
		switch {
		case errors.Is(err, client.ErrNotFound):
			return fmt.Errorf("flow worker: task type %q: not registered on the server (call Register or register_task first): %w", name, err)
		case err != nil:
			w.log.Warn("flow worker: reading the task type's config failed; using the worker's defaults", "task_type", name, "err", err)
		default:
			ts.cfg = tt
		}
	}

	// Network calls outlive ctx: a drain still has to give tasks back and
	// report outcomes. netCancel ends them when Run returns.
	netCtx, netCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer netCancel()
	// Holds end at the shutdown deadline at the latest.
	holdCtx, holdCancel := context.WithCancel(netCtx)
	defer holdCancel()
	// Handlers keep running through a graceful stop; hardCancel ends them
	// when ShutdownTimeout runs out.
	hardCtx, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	// Handlers' contexts hang off one that never ends rather than off
	// hardCtx: a child of a shared cancelable context registers with it,
	// and unregisters, under its lock at every stage's start and end
	// (6.6 % of the process's CPU in a profile of the end-to-end
	// benchmark; 146 against 53 ns in a parallel microbenchmark). The
	// hard stop cancels each running handler itself.
	w.handlerBase = context.WithoutCancel(hardCtx)
	defer context.AfterFunc(hardCtx, func() { w.cancelRunning(context.Cause(hardCtx)) })()

	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.stop:
		}
	}()

	var reporting sync.WaitGroup
	for range reporters {
		reporting.Add(1)
		go func() { defer reporting.Done(); w.reportLoop(netCtx) }()
	}
	// The heartbeat keeps leases alive until every held task is reported.
	beatCtx, beatCancel := context.WithCancel(netCtx)
	defer beatCancel()
	var beats sync.WaitGroup
	beats.Add(1)
	go func() { defer beats.Done(); w.heartbeatLoop(beatCtx) }()

	var pullers, dispatcher sync.WaitGroup
	for name, ts := range types {
		pullers.Add(1)
		go func() { defer pullers.Done(); w.pullLoop(holdCtx, netCtx, name, ts) }()
	}
	runners := pool.New(w.cfg.Concurrency, pool.WithQueueSize(1))
	slots := make(chan struct{}, w.cfg.Concurrency)
	dispatcher.Add(1)
	go func() { defer dispatcher.Done(); w.dispatchLoop(hardCtx, runners, slots) }()

	<-w.stop
	w.log.Info("flow worker stopping", "backlog", w.held.Load())
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.ShutdownTimeout)
	defer dcancel()
	go func() {
		<-dctx.Done()
		holdCancel()
		hardCancel()
	}()

	// A hold in flight returns within its wait; what it brings is given back.
	pullers.Wait()
	// The dispatcher starts nothing more; the running stages finish (taking
	// every slot means none is running).
	dispatcher.Wait()
	for range w.cfg.Concurrency {
		slots <- struct{}{}
	}
	runners.Close(context.Background()) // nothing runs now: returns at once
	// What is still queued was never started: give it back.
	for drained := false; !drained; {
		select {
		case h := <-w.queue:
			w.giveBack(h)
		default:
			drained = true
		}
	}

	// Wait until every held task is reported, or dropped once the deadline
	// and a short grace for reports in flight have passed.
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	var grace <-chan time.Time
	deadline := dctx.Done()
	for w.held.Load() > 0 {
		select {
		case <-w.room.wait():
		case <-poll.C:
		case <-deadline:
			w.log.Warn("flow worker: shutdown timeout; outcomes not reported soon are dropped", "held", w.held.Load())
			g := time.NewTimer(5 * time.Second)
			defer g.Stop()
			grace, deadline = g.C, nil
		case <-grace:
			w.log.Warn("flow worker: dropping outcomes not reported; the server retries those tasks after their leases", "held", w.held.Load())
			w.out.dropAll()
			netCancel()
			grace = nil
		}
	}
	beatCancel()
	beats.Wait()
	w.out.close()
	reporting.Wait()
	w.log.Info("flow worker stopped")
	return nil
}

func (w *Worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// reserve waits for room in the backlog and reserves up to want slots. It
// waits until at least half of want is free, so a busy worker pulls in
// batches rather than one task per freed slot (each hold is a database
// transaction on the server). It returns 0 when the worker stops.
func (w *Worker) reserve(want int) int {
	least := int64(max(1, (want+1)/2))
	for {
		changed := w.room.wait() // before the check, so no release is missed
		cur := w.held.Load()
		free := int64(w.cfg.MaxBacklog) - cur
		if free >= least || (free > 0 && cur == 0) {
			n := min(int64(want), free)
			if w.held.CompareAndSwap(cur, cur+n) {
				return int(n)
			}
			continue
		}
		select {
		case <-w.stop:
			return 0
		case <-changed:
		}
	}
}

// unreserve returns n backlog slots.
func (w *Worker) unreserve(n int) {
	if n <= 0 {
		return
	}
	w.held.Add(-int64(n))
	w.room.notify()
}

// broadcast wakes every waiter at once (a sync.Cond that works in select).
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next notify.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// pullLoop holds tasks of one type until the worker stops.
// ctx bounds the holds; netCtx is for the renewals of what they bring.
func (w *Worker) pullLoop(ctx, netCtx context.Context, taskType string, ts *typeState) {
	interval := w.cfg.ScheduleInterval
	var leaseDur time.Duration
	if ts.cfg != nil {
		if ts.cfg.ScheduleIntervalMS > 0 {
			interval = time.Duration(ts.cfg.ScheduleIntervalMS) * time.Millisecond
		}
		leaseDur = time.Duration(ts.cfg.MaxProcessingMS) * time.Millisecond
	}
	// The long-poll wait: at least a second so an idle worker costs little,
	// at most 10s because a stop waits for the hold in flight (cancelling it
	// could strand tasks the server was claiming just then until their
	// leases expire).
	wait := min(max(interval, time.Second), 10*time.Second)
	backoff := interval
	for !w.stopping() {
		n := w.reserve(w.cfg.HoldLimit)
		if n == 0 {
			return
		}
		start := time.Now()
		tasks, err := w.c.HoldTasks(ctx, flow.HoldTasksRequest{
			TaskType: taskType, Limit: n, WorkerID: w.cfg.WorkerID, WaitMS: wait.Milliseconds(), OmitScheduleLog: !w.cfg.ScheduleLog,
		})
		if len(tasks) > n {
			// The server gave more than asked; keep them all, since they are
			// ours now, and let the backlog run over.
			w.held.Add(int64(len(tasks) - n))
		}
		w.unreserve(n - len(tasks))
		for i := range tasks {
			w.enqueue(netCtx, newHeld(w, &tasks[i], start, leaseDur))
		}
		if err != nil {
			w.log.Warn("flow worker: hold failed", "task_type", taskType, "err", err)
			w.sleep(jitter(backoff))
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = interval
		if len(tasks) == 0 && time.Since(start) < wait/2 {
			// The server answered an empty hold early (no long-poll): pull
			// again after the interval, with jitter so workers spread out.
			w.sleep(jitter(interval))
		}
	}
}

// sleep waits d or until the worker stops.
func (w *Worker) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stop:
	}
}

// jitter spreads d over [0.75d, 1.25d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d*3/4 + rand.N(d/2+1)
}

// enqueue queues a freshly held task for the runners, or gives it back if
// the worker is stopping.
func (w *Worker) enqueue(ctx context.Context, h *heldTask) {
	h.armRenew()
	if w.stopping() {
		w.giveBack(h)
		return
	}
	select {
	case w.queue <- h: // room is certain unless a server returned more than asked
	default:
		w.giveBack(h)
	}
}

// dispatchLoop hands queued tasks to the pool, at most Concurrency at a
// time (a slot each), so a task never waits in the pool behind another:
// it waits in the worker's queue, from where a stop can still give it back.
func (w *Worker) dispatchLoop(hardCtx context.Context, runners *pool.Pool, slots chan struct{}) {
	for {
		select {
		case <-w.stop:
			return
		case slots <- struct{}{}:
		}
		var h *heldTask
		select {
		case <-w.stop:
			<-slots
			return
		case h = <-w.queue:
		}
		if w.stopping() {
			<-slots
			w.giveBack(h)
			return
		}
		var state atomic.Int32 // 0 queued, 1 started, 2 abandoned
		err := runners.Go(hardCtx, pool.DefaultLoad, func(ctx context.Context) error {
			if !state.CompareAndSwap(0, 1) {
				return nil
			}
			w.runOne(ctx, h)
			return nil
		}, func(error) {
			if state.CompareAndSwap(0, 2) {
				w.giveBack(h) // skipped by the pool: never started
			}
			<-slots
		})
		if err != nil {
			// Not accepted (the pool is shutting down): never started.
			<-slots
			w.giveBack(h)
		}
	}
}

// runOne runs one stage and queues its outcome.
func (w *Worker) runOne(hardCtx context.Context, h *heldTask) {
	ctx, cancel := context.WithCancelCause(w.handlerBase)
	defer cancel(nil)
	if !h.start(cancel) {
		h.release() // lost while queued
		return
	}
	if hardCtx.Err() != nil {
		// The hard stop came before start recorded cancel, so
		// cancelRunning may have missed this one.
		cancel(context.Cause(hardCtx))
	}
	w.mu.Lock()
	handler := w.types[h.task.Type].handlers[h.task.Stage]
	w.mu.Unlock()
	var res Result
	var err error
	if handler == nil {
		err = fmt.Errorf("no handler for stage %q of task type %q on worker %s", h.task.Stage, h.task.Type, w.cfg.WorkerID)
	} else {
		res, err = call(ctx, handler, &h.task)
	}
	if h.isLost() {
		h.release()
		return
	}
	if err != nil && hardCtx.Err() != nil {
		// The shutdown deadline cancelled the stage: not the task's fault,
		// so it goes back without counting a retry.
		w.giveBack(h)
		return
	}
	w.out.push(&outcome{h: h, req: h.setRequest(res, err)})
}

// cancelRunning cancels the context of every handler that has started.
func (w *Worker) cancelRunning(cause error) {
	w.liveMu.Lock()
	var cancels []context.CancelCauseFunc
	for h := range w.live {
		h.mu.Lock()
		if h.cancel != nil {
			cancels = append(cancels, h.cancel)
		}
		h.mu.Unlock()
	}
	w.liveMu.Unlock()
	for _, c := range cancels {
		c(cause)
	}
}

// call runs a handler, turning a panic into an error.
func call(ctx context.Context, h Handler, t *Task) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, t)
}

// giveBack hands a task that was held but not started back to the server:
// pending, same stage and context, no delay, no error (so no retry counts).
func (w *Worker) giveBack(h *heldTask) {
	if h.isLost() {
		h.release()
		return
	}
	w.out.push(&outcome{h: h, req: flow.SetTaskRequest{
		TaskID: h.task.ID, Lease: h.lease, Status: flow.StatusPending,
		TaskStage: h.task.Stage, TaskContext: h.sentContext(),
	}})
}
