package supervisor

import (
	"fmt"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/wheel"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Phase is where the supervisor is in its lifecycle.
type Phase int

// Phases.
const (
	// Warming: workers are accepted and heard, nothing is assigned.
	Warming Phase = iota
	// Running: the first task query succeeded and tasks are assigned.
	Running
)

func (p Phase) String() string {
	if p == Warming {
		return "warming"
	}
	return "running"
}

// Timings are the lifecycle's durations (see Config).
type Timings struct {
	Warmup, WorkerTimeout, TaskTimeout, Tick, QueryInterval, QueryRetry time.Duration
}

type timerKind uint8

const (
	timerWorker  timerKind = iota + 1 // a worker's silence
	timerHolding                      // a task's silence on one worker
	timerWarmup                       // the end of warm-up
	timerQuery                        // the next task query
)

type timerKey struct {
	kind         timerKind
	worker, task string
}

type holdingKey struct{ worker, task string }

// Core is the supervisor's lifecycle around the Engine: warm-up, task
// queries, worker and task timeouts on one timer wheel, admin changes. Like
// the engine it is synchronous and takes the time as an argument, so a test
// can drive a whole fleet through hours with a fake clock; the server calls
// it from its one event loop goroutine.
type Core struct {
	t        Timings
	eng      *Engine
	wheel    *wheel.Wheel[timerKey]
	phase    Phase
	fired    []timerKey
	lastSeen map[holdingKey]time.Time
	source   map[string]struct{} // ids of the source's last list, for the diff
	pending  struct {            // admin changes made while warming up, net
		add    map[string]protocol.Task
		order  []string // ids in add, first-added first (may list removed ones)
		remove map[string]struct{}
	}
	query   bool     // a task query is due
	drop    []string // dead workers, to disconnect
	changed []string // ids a later query added or removed (TakeSourceChanges)
	// Counters beyond the engine's.
	WorkerDeaths, TaskTimeouts, Queries, QueryErrors uint64
}

// NewCore starts the lifecycle at now, warming up.
func NewCore(t Timings, k int, now time.Time) (*Core, error) {
	eng, err := NewEngine(k)
	if err != nil {
		return nil, err
	}
	slots := int(max(t.WorkerTimeout, t.TaskTimeout)/t.Tick) + 2
	w, err := wheel.New[timerKey](t.Tick, min(slots, 1<<16), now)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	c := &Core{t: t, eng: eng, wheel: w, lastSeen: map[holdingKey]time.Time{}}
	w.Set(timerKey{kind: timerWarmup}, now.Add(t.Warmup))
	return c, nil
}

// Engine exposes the assignment engine, for views.
func (c *Core) Engine() *Engine { return c.eng }

// Phase reports the lifecycle phase.
func (c *Core) Phase() Phase { return c.phase }

// Timers reports how many timeouts are armed on the wheel.
func (c *Core) Timers() int { return c.wheel.Len() }

// Report handles a worker's report. first is true for the first report on a
// connection (the worker gets its whole assignment again).
func (c *Core) Report(now time.Time, r *protocol.Report, first bool) {
	c.wheel.Set(timerKey{kind: timerWorker, worker: r.WorkerID}, now.Add(c.t.WorkerTimeout))
	if c.phase == Warming {
		claims := make([]protocol.Task, len(r.Tasks))
		for i, ts := range r.Tasks {
			claims[i] = protocol.Task{TaskID: ts.TaskID, Spec: ts.Spec}
		}
		c.eng.Claim(r.WorkerID, r.MaxLoad, claims)
		return
	}
	running := make([]string, len(r.Tasks))
	for i, ts := range r.Tasks {
		running[i] = ts.TaskID
	}
	c.eng.Report(r.WorkerID, r.MaxLoad, running, first)
	if r.Draining {
		c.eng.Drain(r.WorkerID)
	}
	// A task whose last_seen moved on since the last report is alive.
	for _, ts := range r.Tasks {
		if ts.LastSeen.IsZero() || !c.eng.Holds(r.WorkerID, ts.TaskID) {
			continue
		}
		hk := holdingKey{r.WorkerID, ts.TaskID}
		if prev, ok := c.lastSeen[hk]; ok && !ts.LastSeen.After(prev) {
			continue
		}
		c.lastSeen[hk] = ts.LastSeen
		c.wheel.Set(timerKey{timerHolding, r.WorkerID, ts.TaskID}, now.Add(c.t.TaskTimeout))
		c.eng.Alive(r.WorkerID, ts.TaskID)
	}
}

// Payload notes a payload's liveness: its worker and its task on that worker
// are alive. It reports whether the payload is to be published: after
// warm-up, when the task is supervised; while warming up, when the sending
// worker reported that it runs the task. So a restarted supervisor (or a
// new leader) publishes the data of every task its fleet runs from the
// first report on, and only tasks no worker reports wait for the task query.
func (c *Core) Payload(now time.Time, p *protocol.Payload) bool {
	if c.eng.HasWorker(p.WorkerID) {
		c.wheel.Set(timerKey{kind: timerWorker, worker: p.WorkerID}, now.Add(c.t.WorkerTimeout))
		c.eng.Proven(p.WorkerID) // it produces data, held task or not
		if c.eng.Holds(p.WorkerID, p.TaskID) {
			c.wheel.Set(timerKey{timerHolding, p.WorkerID, p.TaskID}, now.Add(c.t.TaskTimeout))
			c.eng.Alive(p.WorkerID, p.TaskID)
		}
	}
	if c.phase == Warming {
		return c.eng.Claims(p.WorkerID, p.TaskID)
	}
	return c.eng.HasTask(p.TaskID)
}

// Tick advances the timer wheel to now and handles what expired.
//
// waiting (nil: none) reports whether a message from a worker has been
// received but not yet handed to Report or Payload. Such a worker is not
// silent: its timeouts, and those of its holdings, are looked at again a
// tick later instead of expiring, and handling the message re-arms them. So
// a supervisor that falls behind its messages (a stalled or starved event
// loop) does not take its own backlog for the fleet's silence.
func (c *Core) Tick(now time.Time, waiting func(workerID string) bool) {
	c.fired = c.fired[:0]
	c.wheel.Advance(now, func(k timerKey) { c.fired = append(c.fired, k) })
	var dead []string
	var silent [][2]string
	for _, k := range c.fired {
		if (k.kind == timerWorker || k.kind == timerHolding) && waiting != nil && waiting(k.worker) {
			c.wheel.Set(k, now.Add(c.t.Tick))
			continue
		}
		switch k.kind {
		case timerWorker:
			dead = append(dead, k.worker)
		case timerHolding:
			delete(c.lastSeen, holdingKey{k.worker, k.task})
			if c.phase == Running {
				silent = append(silent, [2]string{k.worker, k.task})
			}
		case timerWarmup, timerQuery:
			c.query = true
		}
	}
	if len(dead) == 0 && len(silent) == 0 {
		return
	}
	// Holdings of a worker that died in the same tick go with the worker.
	for _, id := range dead {
		if c.eng.HasWorker(id) {
			c.drop = append(c.drop, id)
		}
	}
	nd, nv := c.eng.Expire(dead, silent)
	c.WorkerDeaths += uint64(nd)
	c.TaskTimeouts += uint64(nv)
}

// QueryResult applies a task query's outcome. The first success ends
// warm-up with a full assignment with reset; later ones are diffed against
// the source's previous list (so admin changes stand until the source
// changes the same task). A failure is retried after QueryRetry.
func (c *Core) QueryResult(now time.Time, tasks []protocol.Task, err error) {
	c.Queries++
	if err != nil {
		c.QueryErrors++
		c.wheel.Set(timerKey{kind: timerQuery}, now.Add(min(c.t.QueryRetry, c.t.QueryInterval)))
		return
	}
	c.wheel.Set(timerKey{kind: timerQuery}, now.Add(c.t.QueryInterval))
	ids := make(map[string]struct{}, len(tasks))
	for _, t := range tasks {
		ids[t.TaskID] = struct{}{}
	}
	if c.phase == Warming {
		c.phase = Running
		c.source = ids
		p := &c.pending
		all := make([]protocol.Task, 0, len(tasks)+len(p.add))
		for _, t := range tasks {
			if _, gone := p.remove[t.TaskID]; !gone {
				all = append(all, t)
			}
		}
		for _, id := range p.order {
			if t, ok := p.add[id]; ok {
				all = append(all, t)
				delete(p.add, id)
			}
		}
		c.eng.Assign(all, nil, true)
		p.add, p.order, p.remove = nil, nil, nil
		return
	}
	var add []protocol.Task
	var remove []string
	for _, t := range tasks {
		if _, ok := c.source[t.TaskID]; !ok {
			add = append(add, t)
		}
	}
	for id := range c.source {
		if _, ok := ids[id]; !ok {
			remove = append(remove, id)
		}
	}
	c.source = ids
	if len(add) > 0 || len(remove) > 0 {
		c.eng.Assign(add, remove, false)
	}
	for _, t := range add {
		c.changed = append(c.changed, t.TaskID)
	}
	c.changed = append(c.changed, remove...)
}

// TakeSourceChanges returns, once, the ids that task queries added or
// removed since the last call: an admin change stored for one of them no
// longer stands (the source changed that task after it).
func (c *Core) TakeSourceChanges() []string {
	ch := c.changed
	c.changed = nil
	return ch
}

// TakeQuery reports, once, that a task query is due.
func (c *Core) TakeQuery() bool {
	q := c.query
	c.query = false
	return q
}

// AdminTasks adds and removes tasks at once (queued until warm-up ends).
func (c *Core) AdminTasks(add []protocol.Task, remove []string) {
	if c.phase == Warming {
		// Queued as the net effect, in call order: a later call undoes an
		// earlier one on the same id (remove then add keeps the task, add
		// then remove drops it), as it would after warm-up.
		p := &c.pending
		if p.add == nil {
			p.add, p.remove = map[string]protocol.Task{}, map[string]struct{}{}
		}
		for _, id := range remove {
			delete(p.add, id)
			p.remove[id] = struct{}{}
		}
		for _, t := range add {
			delete(p.remove, t.TaskID)
			if _, ok := p.add[t.TaskID]; !ok {
				p.order = append(p.order, t.TaskID)
			}
			p.add[t.TaskID] = t
		}
		return
	}
	c.eng.Assign(add, remove, false)
}

// Drain starts a planned stop of a worker (Engine.Drain); false if the
// worker is unknown or the supervisor is still warming up.
func (c *Core) Drain(workerID string) bool {
	if c.phase == Warming {
		return false
	}
	return c.eng.Drain(workerID)
}

// Rebalance moves the fewest holdings that bring every worker within
// threshold of its fair share; nothing moves while warming up.
func (c *Core) Rebalance(threshold float64) int {
	if c.phase == Warming {
		return 0
	}
	return c.eng.Rebalance(threshold)
}

// Flush returns the instruction sets to send and the workers to disconnect,
// and arms a task timeout for every holding an instruction starts: a
// worker has TaskTimeout to report data from a task it was given. Timers of
// holdings that ended are left to expire and be ignored, which keeps ends
// O(1).
func (c *Core) Flush(now time.Time) (send []Outgoing, drop []string) {
	send = c.eng.Flush()
	for _, o := range send {
		for _, t := range o.Instruction.Add {
			c.wheel.Set(timerKey{timerHolding, o.WorkerID, t.TaskID}, now.Add(c.t.TaskTimeout))
		}
	}
	drop, c.drop = c.drop, nil
	return send, drop
}
