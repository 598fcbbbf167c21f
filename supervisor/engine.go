package supervisor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Engine is the assignment engine: which live worker holds which supervised
// task. It is a plain synchronous data structure, with no goroutines and no
// clock, so that it can be tested and benchmarked event by event; the server
// drives it from one event loop.
//
// Every event leaves the engine with these invariants: no worker holds a
// task twice, no worker holds more than its max load, and a task's holders
// only change when the task is new, removed, vacated (its holder died, went
// silent on it, or shed it when its max load dropped) or moved by an explicit
// Rebalance. Tasks with fewer than k holders are in deficit; every event that
// adds capacity fills the deficit.
//
// Each event appends to per-worker instruction sets; Flush hands them out.
//
// The hot paths (placing a holding, dropping one) touch no map: a worker
// keeps its tasks in a slice and each of a task's (at most k) holdings
// records its index there, so both directions are O(1) or O(k). Maps are
// used only to find a worker or a task by the id a message carries.
type Engine struct {
	k       int
	seq     uint64 // tasks made
	ord     uint64 // workers made
	workers map[string]*worker
	tasks   map[string]*task
	deficit []*task   // every task with inDef set is here (and maybe others, dropped at the next fill)
	outq    []*worker // workers with pending instructions
	stats   EngineStats
	// scratch, reused between events
	heap    candHeap
	skipped []cand
	ts      []*task
	// avoid: during one Expire, the workers a task went silent on, which
	// it is not placed on again this time (kept here, not in every task,
	// because it is empty but for that moment).
	avoid map[*task][]*worker
	// suspects: the workers now suspect (worker.suspect), so that Counts
	// looks at their holdings without walking every worker.
	suspects map[*worker]struct{}
}

// EngineStats counts what the engine did since it was made.
type EngineStats struct {
	Placed   uint64 // holdings created (task started on a worker)
	Vacated  uint64 // holdings lost to a dead worker, a silent task or a shed
	Moved    uint64 // holdings moved by Rebalance
	Adopted  uint64 // holdings taken over from a worker's report
	Removed  uint64 // tasks removed
	Deaths   uint64 // workers removed
	Resets   uint64 // reset assignments
	Ended    uint64 // end instructions issued
	Rejected uint64 // reported tasks a worker was told to end
	// Suspected: workers found holding tasks and producing nothing (a task
	// timed out with no life from them for any task since the last one).
	Suspected uint64
}

type worker struct {
	id      string
	ord     uint64 // join order: the placement's deterministic tie-break
	maxLoad int
	held    []*task                    // the tasks it holds; see holding.pos
	claims  map[string]json.RawMessage // tasks (and specs) reported while warming up, kept by a reset
	box     outbox                     // instructions not yet flushed
	queued  bool                       // in Engine.outq
	dead    bool
	// draining: stopping on purpose. It takes nothing new and keeps each
	// task until a replacement holder has shown life for it.
	draining bool
	// lived: it showed life (a payload for any task, a moved last_seen)
	// since its last task timeout or since it joined.
	lived bool
	// suspect: a task timed out on it while it had shown no life for any
	// task since the timeout before (or since it joined): a worker that
	// takes tasks and produces nothing. It is given nothing new (no
	// placement, adoption, swap or rebalance) and its holdings count toward
	// the deficit, until it sends data or reconnects (a restarted worker
	// gets a fresh chance).
	suspect bool
}

func (w *worker) free() int {
	if w.draining || w.suspect {
		return 0
	}
	return w.maxLoad - len(w.held)
}

// holding is one of a task's holders; pos is the task's index in w.held.
type holding struct {
	w   *worker
	pos int
	// fresh: placed while the task had a draining holder, and not yet seen
	// alive; the draining holder keeps the task until no holding is fresh.
	fresh bool
}

type task struct {
	seq      uint64
	spec     protocol.Task
	holders  []holding
	draining int  // holders on draining workers (counted in holders, not toward k)
	inDef    bool // fewer than k holders that are not draining
	listed   bool // in Engine.deficit
}

// live is how many holders count toward k: those not draining.
func (t *task) live() int { return len(t.holders) - t.draining }

func (t *task) heldBy(w *worker) bool {
	for _, h := range t.holders {
		if h.w == w {
			return true
		}
	}
	return false
}

// outbox is a worker's pending instruction set, as a log of operations;
// Flush keeps the last per task, so appending is all an event pays.
type outbox struct {
	reset bool
	ops   []op
}

type op struct {
	id string
	t  *task // the task to add (its spec is read at Flush); nil: end id
}

// Outgoing is one instruction set to send to one worker.
type Outgoing struct {
	WorkerID    string
	Instruction protocol.Instruction
}

// NewEngine returns an engine placing each task on k distinct workers.
func NewEngine(k int) (*Engine, error) {
	if k < 1 {
		return nil, fmt.Errorf("supervisor: redundancy must be at least 1, got %d", k)
	}
	return &Engine{
		k:        k,
		workers:  map[string]*worker{},
		tasks:    map[string]*task{},
		suspects: map[*worker]struct{}{},
	}, nil
}

// K reports the redundancy.
func (e *Engine) K() int { return e.k }

// Stats reports the counters.
func (e *Engine) Stats() EngineStats { return e.stats }

// ---- events ----

func (e *Engine) newWorker(id string) *worker {
	e.ord++
	w := &worker{id: id, ord: e.ord}
	e.workers[id] = w
	return w
}

// Claim records, while warming up, what a worker reports it runs (with the
// specs it sent, if any) and its max load, without assigning anything: the
// reset at the end of warm-up keeps these sessions where it can, and until
// then Claims lets the payloads of these tasks through.
func (e *Engine) Claim(workerID string, maxLoad int, running []protocol.Task) {
	w := e.workers[workerID]
	if w == nil {
		w = e.newWorker(workerID)
	}
	w.maxLoad = maxLoad
	if w.claims == nil {
		w.claims = make(map[string]json.RawMessage, len(running))
	}
	clear(w.claims)
	for _, t := range running {
		w.claims[t.TaskID] = t.Spec
	}
}

// Claims reports whether a worker reported, while warming up, that it runs
// a task.
func (e *Engine) Claims(workerID, taskID string) bool {
	w := e.workers[workerID]
	if w == nil {
		return false
	}
	_, ok := w.claims[taskID]
	return ok
}

// Claimed lists, while warming up, the tasks the workers reported, with the
// spec one of them sent and the claimants as holders: the assignment the
// fleet brought with it, which the reset at the end of warm-up keeps where
// it can.
func (e *Engine) Claimed() []TaskInfo {
	byID := map[string]*TaskInfo{}
	for _, w := range e.sortedWorkers() {
		for id, spec := range w.claims {
			ti := byID[id]
			if ti == nil {
				ti = &TaskInfo{ID: id, Spec: spec}
				byID[id] = ti
			}
			if ti.Spec == nil {
				ti.Spec = spec
			}
			ti.Holders = append(ti.Holders, w.id)
		}
	}
	out := make([]TaskInfo, 0, len(byID))
	for _, ti := range byID {
		ti.Missing = max(0, e.k-len(ti.Holders))
		out = append(out, *ti)
	}
	return out
}

// Report handles a worker's report after warm-up: a new worker joins (and
// fills the deficit), a changed max load is applied (a lower one sheds the
// excess, which is placed elsewhere), and the tasks it runs are reconciled
// with what it holds: a reported task it does not hold is adopted if that
// task still lacks holders, otherwise it is told to end it. Tasks it holds
// but does not report are left alone: an add may be in flight, and a task
// that never reports is caught by the task timeout. resync (the first report
// on a new connection) sends the worker its whole assignment with reset, in
// case instructions were lost while it was away.
func (e *Engine) Report(workerID string, maxLoad int, running []string, resync bool) {
	w := e.workers[workerID]
	grew := false
	if w == nil {
		w = e.newWorker(workerID)
		grew = true
	}
	w.claims = nil
	if resync && w.suspect {
		w.suspect, w.lived = false, false
		delete(e.suspects, w)
		grew = true // its capacity counts again
	}
	old := w.maxLoad
	w.maxLoad = maxLoad
	switch {
	case maxLoad > old:
		grew = true
	case len(w.held) > maxLoad:
		e.shed(w, len(w.held)-maxLoad)
		grew = true // what it shed must be placed elsewhere
	}
	for _, id := range running {
		t := e.tasks[id]
		if t != nil && t.heldBy(w) {
			continue
		}
		if t != nil && len(t.holders) < e.k && w.free() > 0 {
			e.hold(t, w)
			e.stats.Adopted++
			e.add(w, t)
			continue
		}
		e.stats.Rejected++
		e.end(w, id)
	}
	if resync {
		e.queue(w)
		w.box.reset = true
		w.box.ops = w.box.ops[:0]
		for _, t := range w.held {
			w.box.ops = append(w.box.ops, op{id: t.spec.TaskID, t: t})
		}
	}
	if grew {
		e.fill()
	}
}

// RemoveWorker handles a dead worker: its tasks are vacated and placed on
// other live workers; no other task moves.
func (e *Engine) RemoveWorker(workerID string) bool {
	dead, _ := e.Expire([]string{workerID}, nil)
	return dead == 1
}

// Vacate handles a task gone silent on one worker: the worker is told to end
// it and the task is placed on another worker (not that one, this time).
func (e *Engine) Vacate(workerID, taskID string) bool {
	_, n := e.Expire(nil, [][2]string{{workerID, taskID}})
	return n == 1
}

// Expire applies one tick's timeouts at once: dead workers (their tasks
// vacated) and silent holdings (worker, task: ended on that worker and
// placed elsewhere), then places all the vacancies in one pass, so that a
// burst of timeouts (a room server going down silences thousands of
// holdings in the same tick) costs one placement, not one per timeout. It
// returns how many workers and holdings it removed.
func (e *Engine) Expire(deadWorkers []string, silent [][2]string) (dead, vacated int) {
	for _, id := range deadWorkers {
		w := e.workers[id]
		if w == nil {
			continue
		}
		delete(e.workers, id)
		delete(e.suspects, w)
		w.dead = true // Flush skips its box
		e.stats.Deaths++
		dead++
		for _, t := range w.held {
			for i, h := range t.holders {
				if h.w == w {
					t.holders = slices.Delete(t.holders, i, i+1)
					break
				}
			}
			if w.draining {
				t.draining--
			}
			e.stats.Vacated++
			e.markDeficit(t)
		}
		w.held = nil
	}
	var struck []*worker
	for _, h := range silent {
		w := e.workers[h[0]]
		if w == nil {
			continue
		}
		t := e.tasks[h[1]]
		if t == nil || !t.heldBy(w) {
			continue
		}
		if !w.lived && !w.suspect {
			w.suspect = true
			e.suspects[w] = struct{}{}
			e.stats.Suspected++
		}
		struck = append(struck, w)
		e.release(t, w)
		e.end(w, h[1])
		e.stats.Vacated++
		vacated++
		if e.avoid == nil {
			e.avoid = map[*task][]*worker{}
		}
		e.avoid[t] = append(e.avoid[t], w) // elsewhere this time, though w has room now
	}
	for _, w := range struck {
		w.lived = false // the next timeout asks again: life since this one?
	}
	if dead > 0 || vacated > 0 {
		e.fill()
	}
	clear(e.avoid)
	return dead, vacated
}

// Assign is the assignment event (a task query's diff, an admin change, the
// end of warm-up). remove: tasks to end (unknown ids
// are ignored); add: tasks to supervise (known ids keep their holders and
// take the new spec); reset: every worker gets a reset instruction carrying
// everything it should hold, and the whole assignment is rebuilt keeping
// each worker's current and claimed sessions where that fits (at most k
// holders, within max load) before placing the rest.
func (e *Engine) Assign(add []protocol.Task, remove []string, reset bool) {
	for _, id := range remove {
		e.removeTask(id)
	}
	if len(e.tasks) == 0 && len(add) > 64 {
		e.tasks = make(map[string]*task, len(add)) // one allocation, not a growth series
	}
	// New tasks and their holder slots come from two slabs: two
	// allocations for the whole list instead of two per task.
	var slab []task
	var slots []holding
	e.deficit = slices.Grow(e.deficit, len(add))
	for _, spec := range add {
		if t := e.tasks[spec.TaskID]; t != nil {
			t.spec = spec
			continue
		}
		if len(slab) == 0 {
			n := min(len(add), 1<<14)
			slab = make([]task, n)
			slots = make([]holding, n*e.k)
		}
		t := &slab[0]
		slab = slab[1:]
		e.seq++
		t.seq, t.spec = e.seq, spec
		t.holders = slots[:0:e.k]
		slots = slots[e.k:]
		e.tasks[spec.TaskID] = t
		e.markDeficit(t)
	}
	if reset {
		e.reset()
	}
	e.fill()
}

func (e *Engine) removeTask(id string) bool {
	t := e.tasks[id]
	if t == nil {
		return false
	}
	for _, h := range t.holders {
		e.unheld(h)
		e.end(h.w, id)
	}
	t.holders = nil
	t.inDef = false // its entry in e.deficit is dropped by the next fill
	delete(e.tasks, id)
	e.stats.Removed++
	return true
}

func (e *Engine) reset() {
	e.stats.Resets++
	// What each worker should keep, in worker-id order: the tasks it holds,
	// then the ones it claimed. Sorted (stably) by task age below, so a
	// worker whose max load cannot take all of them keeps the oldest.
	type keep struct {
		t *task
		w *worker
	}
	var keeps []keep
	for _, w := range e.sortedWorkers() {
		for _, t := range w.held {
			keeps = append(keeps, keep{t, w})
		}
		for id := range w.claims { // distinct tasks: the order within a worker does not matter
			if t := e.tasks[id]; t != nil {
				keeps = append(keeps, keep{t, w})
			}
		}
		w.claims = nil
		w.held = w.held[:0]
		e.queue(w)
		w.box.reset = true
		w.box.ops = w.box.ops[:0]
	}
	for _, t := range e.tasks {
		t.holders = t.holders[:0]
		t.draining = 0
		e.markDeficit(t)
	}
	slices.SortStableFunc(keeps, func(a, b keep) int { return cmp.Compare(a.t.seq, b.t.seq) })
	for _, kp := range keeps {
		// A suspect keeps what it runs (placement is sticky); it only
		// takes nothing new.
		if len(kp.t.holders) < e.k && (kp.w.free() > 0 || (kp.w.suspect && !kp.w.draining && kp.w.maxLoad > len(kp.w.held))) && !kp.t.heldBy(kp.w) {
			e.hold(kp.t, kp.w)
			e.add(kp.w, kp.t)
		}
	}
}

// Rebalance moves the fewest holdings that bring every worker's load within
// threshold (a fraction, 0.1 = 10 %) of its fair share, the total load split
// in proportion to max load. It returns how many holdings moved. Draining
// workers take no part.
func (e *Engine) Rebalance(threshold float64) int {
	ws := slices.DeleteFunc(e.sortedWorkers(), func(w *worker) bool { return w.draining })
	total, capacity := 0, 0
	for _, w := range ws {
		total += len(w.held)
		capacity += w.maxLoad
	}
	if total == 0 || capacity == 0 {
		return 0
	}
	type band struct {
		w            *worker
		lower, upper int
	}
	bands := make([]band, len(ws))
	for i, w := range ws {
		fair := float64(total) * float64(w.maxLoad) / float64(capacity)
		bands[i] = band{w, int(math.Floor(fair * (1 - threshold))), min(w.maxLoad, int(math.Ceil(fair*(1+threshold))))}
	}
	moved := 0
	// Each move takes one holding from the worker furthest above its band
	// (or, if none is above, furthest above its lower bound) to the worker
	// furthest below its band (or furthest below its upper bound), so every
	// move removes one unit of violation: the count is the minimum.
	for range total {
		var donor, recv *band
		over, under := 0, 0
		for i := range bands {
			b := &bands[i]
			if d := len(b.w.held) - b.upper; d > over {
				donor, over = b, d
			}
			if d := b.lower - len(b.w.held); d > under {
				recv, under = b, d
			}
		}
		if donor == nil && recv == nil {
			break
		}
		if donor == nil {
			slack := 0
			for i := range bands {
				if b := &bands[i]; b != recv {
					if d := len(b.w.held) - b.lower; d > slack {
						donor, slack = b, d
					}
				}
			}
		}
		if recv == nil {
			room := 0
			for i := range bands {
				if b := &bands[i]; b != donor {
					if d := b.upper - len(b.w.held); d > room {
						recv, room = b, d
					}
				}
			}
		}
		if donor == nil || recv == nil || !e.moveOne(donor.w, recv.w) {
			break
		}
		moved++
	}
	e.fill() // a donor may now have room for a task in deficit
	return moved
}

// moveOne moves one task from a to b that b does not hold: the newest.
func (e *Engine) moveOne(a, b *worker) bool {
	var pick *task
	for _, t := range a.held {
		if !t.heldBy(b) && (pick == nil || t.seq > pick.seq) {
			pick = t
		}
	}
	if pick == nil || b.free() <= 0 {
		return false
	}
	e.release(pick, a)
	e.end(a, pick.spec.TaskID)
	e.hold(pick, b)
	e.add(b, pick)
	e.stats.Moved++
	return true
}

// shed vacates n of w's tasks, newest first, because its max load dropped.
func (e *Engine) shed(w *worker, n int) {
	ts := slices.Clone(w.held)
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(b.seq, a.seq) })
	for _, t := range ts[:n] {
		e.release(t, w)
		e.end(w, t.spec.TaskID)
		e.stats.Vacated++
	}
}

// Drain starts a planned stop of a worker (make before break): it takes
// nothing new, each of its tasks gets a replacement holder, and it keeps
// each task until every replacement has shown life (Alive), so the task
// never runs on fewer than k workers meanwhile. A task for which no
// replacement has room stays on it. It reports whether the worker is known.
func (e *Engine) Drain(workerID string) bool {
	w := e.workers[workerID]
	if w == nil {
		return false
	}
	if w.draining {
		return true
	}
	w.draining = true
	for _, t := range w.held {
		t.draining++
		e.markDeficit(t)
	}
	e.fill()
	return true
}

// Alive notes a sign of life of a holding (a payload, an advancing
// last_seen). When the task had draining holders and this was the last
// replacement still unseen, the draining holders are told to end it.
func (e *Engine) Alive(workerID, taskID string) {
	e.Proven(workerID)
	t := e.tasks[taskID]
	if t == nil || t.draining == 0 {
		return
	}
	fresh := 0
	for i := range t.holders {
		h := &t.holders[i]
		if h.w.id == workerID {
			h.fresh = false
		}
		if h.fresh {
			fresh++
		}
	}
	if fresh > 0 || t.live() < e.k {
		return
	}
	for i := len(t.holders) - 1; i >= 0; i-- {
		if w := t.holders[i].w; w.draining {
			e.release(t, w)
			e.end(w, taskID)
		}
	}
}

// Proven notes that a worker sent data (for any task it runs, held or
// not): it produces, so a suspicion is lifted and its room counts again.
func (e *Engine) Proven(workerID string) {
	w := e.workers[workerID]
	if w == nil {
		return
	}
	w.lived = true
	if w.suspect {
		w.suspect = false
		delete(e.suspects, w)
		e.fill()
	}
}

// ---- placement ----

func (e *Engine) hold(t *task, w *worker) {
	t.holders = append(t.holders, holding{w: w, pos: len(w.held), fresh: t.draining > 0})
	w.held = append(w.held, t)
	e.stats.Placed++
	if w.draining {
		t.draining++
	}
	if t.live() >= e.k {
		t.inDef = false
	}
}

// unheld takes h's task out of its worker's list: the last task fills the
// gap, and its holding on that worker learns its new index.
func (e *Engine) unheld(h holding) {
	w := h.w
	last := len(w.held) - 1
	if h.pos != last {
		moved := w.held[last]
		w.held[h.pos] = moved
		for i := range moved.holders {
			if moved.holders[i].w == w {
				moved.holders[i].pos = h.pos
				break
			}
		}
	}
	w.held[last] = nil
	w.held = w.held[:last]
}

func (e *Engine) release(t *task, w *worker) {
	for i, h := range t.holders {
		if h.w == w {
			e.unheld(h)
			t.holders = slices.Delete(t.holders, i, i+1)
			if w.draining {
				t.draining--
			}
			break
		}
	}
	e.markDeficit(t)
}

func (e *Engine) markDeficit(t *task) {
	t.inDef = t.live() < e.k
	if t.inDef && !t.listed {
		t.listed = true
		e.deficit = append(e.deficit, t)
	}
}

// fill places every task in deficit, oldest first.
func (e *Engine) fill() {
	if len(e.deficit) == 0 {
		return
	}
	// Drop entries no longer in deficit (filled or removed).
	live := e.deficit[:0]
	for _, t := range e.deficit {
		if t.inDef {
			live = append(live, t)
		} else {
			t.listed = false
		}
	}
	clear(e.deficit[len(live):])
	e.deficit = live
	ts := slices.Grow(e.ts[:0], len(e.deficit))
	for _, t := range e.deficit {
		if len(t.holders) < len(e.workers) {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(a.seq, b.seq) })
	e.place(ts, true)
	// What the capped pass left (the others had no room for it) goes to
	// whoever has room.
	short := ts[:0:0]
	for _, t := range ts {
		if t.inDef {
			short = append(short, t)
		}
	}
	if len(short) > 0 {
		e.place(short, false)
		e.heal(short)
	}
	clear(ts)
	e.ts = ts[:0]
	// Keep only what is still short, so Counts (run after every event
	// for the metrics) walks the deficit, not every task placed.
	live = e.deficit[:0]
	for _, t := range e.deficit {
		if t.inDef {
			live = append(live, t)
		} else {
			t.listed = false
		}
	}
	clear(e.deficit[len(live):])
	e.deficit = live
}

// place gives each task up to k holders: a worker's share of the holdings
// to hand out is ceil(needed x weight/total weight), its weight being its
// free capacity (max load - running) but at most the number of tasks placed,
// since it can take one holding of each and no more: so a worker claiming an
// enormous max load weighs no more than one that can take the whole batch.
// The worker with the most share left takes the next holding it can (not
// holding the task, below max load); share steers, max load is the hard
// limit, and when capped no worker takes more than its share plus one (the
// caller places what that leaves with capped false). Holdings are handed
// out in rounds (every task its first holder, then its second...) so that
// when capacity is short, the deficit is spread thin rather than leaving
// some tasks with no holder.
func (e *Engine) place(ts []*task, capped bool) {
	if len(ts) == 0 {
		return
	}
	needed, totalWeight := 0, 0
	for _, t := range ts {
		needed += e.k - t.live()
	}
	h := e.heap[:0]
	for _, w := range e.workers {
		if f := w.free(); f > 0 {
			totalWeight += min(f, len(ts))
			h = append(h, cand{w: w, free: f})
		}
	}
	if totalWeight == 0 || needed == 0 {
		e.heap = h[:0]
		return
	}
	for i := range h {
		c := &h[i]
		c.quota = int(math.Ceil(float64(needed) * float64(min(c.free, len(ts))) / float64(totalWeight)))
		c.left = math.MaxInt
		if capped {
			c.left = c.quota + 1
		}
		n := min(c.quota, c.free)
		c.w.held = slices.Grow(c.w.held, n)
		c.w.box.ops = slices.Grow(c.w.box.ops, n)
	}
	h.init()
	skipped := e.skipped[:0]
	for round := 1; round <= e.k && len(h) > 0; round++ {
		for _, t := range ts {
			if t.live() >= round || t.live() >= e.k {
				continue
			}
			// The top is the worker with the most share left; one that
			// holds (or must avoid) this task is set aside for it.
			var avoid []*worker
			if len(e.avoid) > 0 {
				avoid = e.avoid[t]
			}
			for len(h) > 0 && (t.heldBy(h[0].w) || slices.Contains(avoid, h[0].w)) {
				skipped = append(skipped, h.pop())
			}
			if len(h) > 0 {
				c := &h[0]
				e.hold(t, c.w)
				e.add(c.w, t)
				c.quota--
				c.free--
				c.left--
				if c.free == 0 || c.left == 0 {
					h.pop()
				} else {
					h.down(0)
				}
			}
			for _, c := range skipped {
				h.push(c)
			}
			skipped = skipped[:0]
		}
	}
	clear(h[:cap(h)])
	e.heap = h[:0]
	e.skipped = skipped
}

type cand struct {
	w                 *worker
	quota, free, left int // left: holdings it may still take in a capped pass
}

// candHeap is a max-heap of candidates by share left, then free capacity,
// then join order; written out (not container/heap) because it runs once
// per holding placed and the interface calls were a sixth of the time.
type candHeap []cand

func (h candHeap) less(i, j int) bool {
	a, b := &h[i], &h[j]
	if a.quota != b.quota {
		return a.quota > b.quota
	}
	if a.free != b.free {
		return a.free > b.free
	}
	return a.w.ord < b.w.ord
}

func (h candHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h candHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (h *candHeap) push(c cand) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candHeap) pop() cand {
	s := *h
	c := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = cand{}
	*h = s[:n]
	h.down(0)
	return c
}

// heal fills the deficit that placement leaves when the only room is on
// workers that already hold the short task: for each missing holding it
// moves one task u from a full worker v that does not hold the task to a
// worker with room that does not hold u, and gives the task to v. One move
// per missing holding, the fewest there can be when no worker that could
// take the task has room.
func (e *Engine) heal(ts []*task) {
	var roomy, full []*worker
	for _, w := range e.sortedWorkers() {
		if w.free() > 0 {
			roomy = append(roomy, w)
		} else {
			full = append(full, w)
		}
	}
	if len(roomy) == 0 {
		return
	}
	avoids := func(t *task, w *worker) bool { return len(e.avoid) > 0 && slices.Contains(e.avoid[t], w) }
	for _, t := range ts {
	next:
		for t.inDef && len(t.holders) < len(e.workers) {
			for _, v := range full {
				if v.free() > 0 || v.draining || t.heldBy(v) || avoids(t, v) {
					continue
				}
				for _, u := range v.held {
					for _, w := range roomy {
						if w.free() <= 0 || u.heldBy(w) || avoids(u, w) {
							continue
						}
						e.release(u, v)
						e.end(v, u.spec.TaskID)
						e.hold(u, w)
						e.add(w, u)
						e.stats.Moved++
						e.hold(t, v)
						e.add(v, t)
						continue next
					}
				}
			}
			break // no swap helps this task
		}
	}
}

// ---- instructions ----

func (e *Engine) queue(w *worker) {
	if !w.queued {
		w.queued = true
		e.outq = append(e.outq, w)
	}
}

func (e *Engine) add(w *worker, t *task) {
	e.queue(w)
	w.box.ops = append(w.box.ops, op{id: t.spec.TaskID, t: t})
}

func (e *Engine) end(w *worker, id string) {
	e.queue(w)
	w.box.ops = append(w.box.ops, op{id: id})
	e.stats.Ended++
}

// Flush returns the instruction sets built since the last Flush, one per
// live worker, sorted by worker id, with tasks sorted by id. Of several
// operations on one task, the last stands, and a task is never in both
// lists, so an instruction set means the same whatever order a worker
// applies it in.
func (e *Engine) Flush() []Outgoing {
	if len(e.outq) == 0 {
		return nil
	}
	nadd, nend := 0, 0
	for _, w := range e.outq {
		for _, o := range w.box.ops {
			if o.t == nil {
				nend++
			} else {
				nadd++
			}
		}
	}
	// One slab for every set's add list and one for the end lists.
	adds := make([]protocol.Task, 0, nadd)
	ends := make([]string, 0, nend)
	outs := make([]Outgoing, 0, len(e.outq))
	for _, w := range e.outq {
		b := &w.box
		w.queued = false
		if w.dead || (!b.reset && len(b.ops) == 0) {
			b.ops, b.reset = b.ops[:0], false
			continue
		}
		// Sort by id, keeping the order of operations on one id, and keep
		// the last of each.
		slices.SortStableFunc(b.ops, func(x, y op) int { return cmp.Compare(x.id, y.id) })
		a0, e0 := len(adds), len(ends)
		for i, o := range b.ops {
			if i+1 < len(b.ops) && b.ops[i+1].id == o.id {
				continue
			}
			if o.t == nil {
				ends = append(ends, o.id)
			} else {
				adds = append(adds, o.t.spec)
			}
		}
		in := protocol.Instruction{Type: protocol.TypeInstruction, Reset: b.reset}
		if len(adds) > a0 {
			in.Add = adds[a0:len(adds):len(adds)]
		}
		if len(ends) > e0 {
			in.End = ends[e0:len(ends):len(ends)]
		}
		if cap(b.ops) > 64 {
			b.ops = nil // a full assignment's log is not kept for the small ones that follow
		} else {
			clear(b.ops)
			b.ops = b.ops[:0]
		}
		b.reset = false
		outs = append(outs, Outgoing{WorkerID: w.id, Instruction: in})
	}
	clear(e.outq)
	e.outq = e.outq[:0]
	slices.SortFunc(outs, func(a, b Outgoing) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	return outs
}

// ---- views ----

// WorkerInfo is one live worker as the admin API shows it.
type WorkerInfo struct {
	ID      string `json:"id"`
	MaxLoad int    `json:"max_load"`
	Load    int    `json:"load"`
	Free    int    `json:"free"`
	// Draining: stopping on purpose (POST /workers/{id}/drain or its
	// report); it takes nothing new.
	Draining bool `json:"draining,omitempty"`
	// Suspect: a task timed out on it while it produced nothing at all;
	// it gets no new tasks until it sends data (or reconnects).
	Suspect bool `json:"suspect,omitempty"`
}

// TaskInfo is one supervised task as the admin API shows it.
type TaskInfo struct {
	ID      string          `json:"id"`
	Spec    json.RawMessage `json:"spec,omitempty"`
	Holders []string        `json:"holders"`
	Missing int             `json:"missing"` // k - holders: the task's deficit
}

// Workers lists the live workers, sorted by id.
func (e *Engine) Workers() []WorkerInfo {
	ws := e.sortedWorkers()
	out := make([]WorkerInfo, len(ws))
	for i, w := range ws {
		out[i] = WorkerInfo{ID: w.id, MaxLoad: w.maxLoad, Load: len(w.held), Free: max(0, w.free()), Draining: w.draining, Suspect: w.suspect}
	}
	return out
}

// Tasks lists the supervised tasks, sorted by id.
func (e *Engine) Tasks() []TaskInfo {
	ts := e.TasksUnsorted(false)
	SortTasks(ts)
	return ts
}

// TasksUnsorted lists the supervised tasks (only those in deficit when
// deficitOnly) in no particular order, holders unsorted: the copy the event
// loop must make, leaving the sorting (SortTasks) to the caller's goroutine.
// deficitOnly walks the deficit, not every task.
func (e *Engine) TasksUnsorted(deficitOnly bool) []TaskInfo {
	src := e.deficit
	if !deficitOnly {
		src = make([]*task, 0, len(e.tasks))
		for _, t := range e.tasks {
			src = append(src, t)
		}
	} else if len(e.suspects) > 0 {
		// A task whose holders include a suspect is short though not in
		// the deficit list (Counts counts it the same way).
		src = slices.Clone(src)
		for w := range e.suspects {
			src = append(src, w.held...)
		}
	}
	n, nh := 0, 0
	// A draining holder still runs the task; a suspect's does not count.
	short := func(t *task) bool { return t.inDef && len(t.holders) < e.k || e.proven(t) < e.k }
	// Only when suspects' tasks were added: they may repeat.
	var listed map[*task]bool
	if deficitOnly && len(e.suspects) > 0 {
		listed = map[*task]bool{}
	}
	take := func(t *task) bool {
		if !deficitOnly {
			return true
		}
		if !short(t) || listed[t] {
			return false
		}
		if listed != nil {
			listed[t] = true
		}
		return true
	}
	for _, t := range src {
		if take(t) {
			n++
			nh += len(t.holders)
		}
	}
	clear(listed)
	out := make([]TaskInfo, 0, n)
	hs := make([]string, 0, nh) // one slab for every task's holders
	for _, t := range src {
		if !take(t) {
			continue
		}
		h0 := len(hs)
		for _, h := range t.holders {
			hs = append(hs, h.w.id)
		}
		out = append(out, TaskInfo{ID: t.spec.TaskID, Spec: t.spec.Spec, Holders: hs[h0:len(hs):len(hs)], Missing: max(0, e.k-e.proven(t))})
	}
	return out
}

// proven is how many of t's holders count: those not on a suspect worker
// (draining ones included, which still run the task).
func (e *Engine) proven(t *task) int {
	n := len(t.holders)
	if len(e.suspects) > 0 {
		for _, h := range t.holders {
			if h.w.suspect {
				n--
			}
		}
	}
	return n
}

// SortTasks sorts a task list by id, and each task's holders.
func SortTasks(ts []TaskInfo) {
	for _, t := range ts {
		slices.Sort(t.Holders)
	}
	slices.SortFunc(ts, func(a, b TaskInfo) int { return cmp.Compare(a.ID, b.ID) })
}

// Holders returns the ids of the workers holding task id, sorted.
func (e *Engine) Holders(id string) []string {
	t := e.tasks[id]
	if t == nil {
		return nil
	}
	hs := make([]string, len(t.holders))
	for i, h := range t.holders {
		hs[i] = h.w.id
	}
	slices.Sort(hs)
	return hs
}

// Holds reports whether worker holds task.
func (e *Engine) Holds(workerID, taskID string) bool {
	w := e.workers[workerID]
	t := e.tasks[taskID]
	return w != nil && t != nil && t.heldBy(w)
}

// HasWorker reports whether a worker is live.
func (e *Engine) HasWorker(id string) bool { return e.workers[id] != nil }

// HasTask reports whether a task is supervised.
func (e *Engine) HasTask(id string) bool { return e.tasks[id] != nil }

// TaskIDs returns the supervised task ids (unsorted).
func (e *Engine) TaskIDs() []string {
	ids := make([]string, 0, len(e.tasks))
	for id := range e.tasks {
		ids = append(ids, id)
	}
	return ids
}

// Counts reports live workers, tasks, tasks in deficit and missing holdings.
//
// A holding on a suspect worker counts as missing: it has produced nothing
// for a task timeout, so the task is not really held there.
func (e *Engine) Counts() (workers, tasks, deficitTasks, missing int) {
	if len(e.suspects) == 0 {
		for _, t := range e.deficit {
			if t.inDef && len(t.holders) < e.k { // a draining holder still runs the task
				deficitTasks++
				missing += e.k - len(t.holders)
			}
		}
		return len(e.workers), len(e.tasks), deficitTasks, missing
	}
	seen := map[*task]bool{}
	count := func(t *task) {
		if seen[t] {
			return
		}
		seen[t] = true
		n := len(t.holders) // a draining holder still runs the task
		for _, h := range t.holders {
			if h.w.suspect {
				n--
			}
		}
		if n < e.k {
			deficitTasks++
			missing += e.k - n
		}
	}
	for _, t := range e.deficit {
		if t.inDef {
			count(t)
		}
	}
	for w := range e.suspects {
		for _, t := range w.held {
			count(t)
		}
	}
	return len(e.workers), len(e.tasks), deficitTasks, missing
}

func (e *Engine) sortedWorkers() []*worker {
	ws := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
	return ws
}
