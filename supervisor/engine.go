package supervisor

import (
	"cmp"
	"container/heap"
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
type Engine struct {
	k       int
	seq     uint64
	workers map[string]*worker
	tasks   map[string]*task
	deficit map[*task]struct{} // tasks with fewer than k holders
	out     map[*worker]*outbox
	stats   EngineStats
	// scratch, reused between events
	heap candHeap
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
}

type worker struct {
	id      string
	maxLoad int
	tasks   map[string]*task
	claims  []string // tasks reported while warming up, kept by a reset
}

func (w *worker) free() int { return w.maxLoad - len(w.tasks) }

type task struct {
	seq     uint64
	spec    protocol.Task
	holders []*worker
	avoid   []*worker // not to be placed on during the current placement
}

func (t *task) heldBy(w *worker) bool {
	for _, h := range t.holders {
		if h == w {
			return true
		}
	}
	return false
}

func (t *task) drop(w *worker) {
	for i, h := range t.holders {
		if h == w {
			t.holders = slices.Delete(t.holders, i, i+1)
			return
		}
	}
}

type outbox struct {
	reset bool
	add   map[string]protocol.Task
	end   map[string]struct{}
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
		k:       k,
		workers: map[string]*worker{},
		tasks:   map[string]*task{},
		deficit: map[*task]struct{}{},
		out:     map[*worker]*outbox{},
	}, nil
}

// K reports the redundancy.
func (e *Engine) K() int { return e.k }

// Stats reports the counters.
func (e *Engine) Stats() EngineStats { return e.stats }

// ---- events ----

// Claim records, while warming up, what a worker reports it runs and its max
// load, without assigning anything: the reset at the end of warm-up keeps
// these sessions where it can.
func (e *Engine) Claim(workerID string, maxLoad int, running []string) {
	w := e.workers[workerID]
	if w == nil {
		w = &worker{id: workerID, tasks: map[string]*task{}}
		e.workers[workerID] = w
	}
	w.maxLoad = maxLoad
	w.claims = append(w.claims[:0], running...)
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
		w = &worker{id: workerID, tasks: map[string]*task{}}
		e.workers[workerID] = w
		grew = true
	}
	w.claims = nil
	old := w.maxLoad
	w.maxLoad = maxLoad
	switch {
	case maxLoad > old:
		grew = true
	case len(w.tasks) > maxLoad:
		e.shed(w, len(w.tasks)-maxLoad)
		grew = true // what it shed must be placed elsewhere
	}
	for _, id := range running {
		if _, ok := w.tasks[id]; ok {
			continue
		}
		t := e.tasks[id]
		if t != nil && len(t.holders) < e.k && w.free() > 0 {
			e.hold(t, w)
			e.stats.Adopted++
			e.box(w).addTask(t.spec)
			continue
		}
		e.stats.Rejected++
		e.end(w, id)
	}
	if resync {
		b := e.box(w)
		b.reset = true
		for _, t := range w.tasks {
			b.addTask(t.spec)
		}
		clear(b.end)
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
		delete(e.out, w)
		e.stats.Deaths++
		dead++
		for _, t := range w.tasks {
			t.drop(w)
			e.stats.Vacated++
			e.deficit[t] = struct{}{}
		}
		w.tasks = nil
	}
	var avoided []*task
	for _, h := range silent {
		w := e.workers[h[0]]
		if w == nil {
			continue
		}
		t := w.tasks[h[1]]
		if t == nil {
			continue
		}
		e.release(t, w)
		e.end(w, h[1])
		e.stats.Vacated++
		vacated++
		t.avoid = append(t.avoid, w) // elsewhere this time, though w has room now
		avoided = append(avoided, t)
	}
	if dead > 0 || vacated > 0 {
		e.fill()
	}
	for _, t := range avoided {
		t.avoid = nil
	}
	return dead, vacated
}

// Assign is the seed's assignment event. remove: tasks to end (unknown ids
// are ignored); add: tasks to supervise (known ids keep their holders and
// take the new spec); reset: every worker gets a reset instruction carrying
// everything it should hold, and the whole assignment is rebuilt keeping
// each worker's current and claimed sessions where that fits (at most k
// holders, within max load) before placing the rest.
func (e *Engine) Assign(add []protocol.Task, remove []string, reset bool) {
	for _, id := range remove {
		e.removeTask(id)
	}
	for _, spec := range add {
		if t := e.tasks[spec.TaskID]; t != nil {
			t.spec = spec
			continue
		}
		e.seq++
		t := &task{seq: e.seq, spec: spec}
		e.tasks[spec.TaskID] = t
		e.deficit[t] = struct{}{}
	}
	if reset {
		e.reset()
	}
	e.fill()
}

// RemoveTasks removes tasks by id; it reports how many existed.
func (e *Engine) removeTask(id string) bool {
	t := e.tasks[id]
	if t == nil {
		return false
	}
	for _, w := range t.holders {
		delete(w.tasks, id)
		e.end(w, id)
	}
	t.holders = nil
	delete(e.tasks, id)
	delete(e.deficit, t)
	e.stats.Removed++
	return true
}

func (e *Engine) reset() {
	e.stats.Resets++
	keep := map[*task][]*worker{}
	ws := e.sortedWorkers()
	for _, w := range ws {
		for id, t := range w.tasks {
			keep[t] = append(keep[t], w)
			delete(w.tasks, id)
		}
		for _, id := range w.claims {
			if t := e.tasks[id]; t != nil && !slices.Contains(keep[t], w) {
				keep[t] = append(keep[t], w)
			}
		}
		w.claims = nil
		b := e.box(w)
		b.reset = true
		clear(b.add)
		clear(b.end)
	}
	for _, t := range e.sortedTasks() {
		t.holders = t.holders[:0]
		for _, w := range keep[t] {
			if len(t.holders) < e.k && w.free() > 0 {
				e.hold(t, w)
				e.box(w).addTask(t.spec)
			}
		}
		if len(t.holders) < e.k {
			e.deficit[t] = struct{}{}
		} else {
			delete(e.deficit, t)
		}
	}
}

// Rebalance moves the fewest holdings that bring every worker's load within
// threshold (a fraction, 0.1 = 10 %) of its fair share, the total load split
// in proportion to max load. It returns how many holdings moved.
func (e *Engine) Rebalance(threshold float64) int {
	ws := e.sortedWorkers()
	total, capacity := 0, 0
	for _, w := range ws {
		total += len(w.tasks)
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
			if d := len(b.w.tasks) - b.upper; d > over {
				donor, over = b, d
			}
			if d := b.lower - len(b.w.tasks); d > under {
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
					if d := len(b.w.tasks) - b.lower; d > slack {
						donor, slack = b, d
					}
				}
			}
		}
		if recv == nil {
			room := 0
			for i := range bands {
				if b := &bands[i]; b != donor {
					if d := b.upper - len(b.w.tasks); d > room {
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

// moveOne moves one task from a to b that b does not hold.
func (e *Engine) moveOne(a, b *worker) bool {
	var pick *task
	for _, t := range a.tasks {
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
	e.box(b).addTask(pick.spec)
	e.stats.Moved++
	return true
}

// shed vacates n of w's tasks, newest first, because its max load dropped.
func (e *Engine) shed(w *worker, n int) {
	ts := make([]*task, 0, len(w.tasks))
	for _, t := range w.tasks {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(b.seq, a.seq) })
	for _, t := range ts[:n] {
		e.release(t, w)
		e.end(w, t.spec.TaskID)
		e.stats.Vacated++
	}
}

// ---- placement ----

func (e *Engine) hold(t *task, w *worker) {
	t.holders = append(t.holders, w)
	w.tasks[t.spec.TaskID] = t
	e.stats.Placed++
	if len(t.holders) >= e.k {
		delete(e.deficit, t)
	}
}

func (e *Engine) release(t *task, w *worker) {
	t.drop(w)
	delete(w.tasks, t.spec.TaskID)
	e.deficit[t] = struct{}{}
}

// fill places every task in deficit, oldest first.
func (e *Engine) fill() {
	if len(e.deficit) == 0 {
		return
	}
	ts := make([]*task, 0, len(e.deficit))
	for t := range e.deficit {
		if len(t.holders) < len(e.workers) {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(a.seq, b.seq) })
	e.place(ts)
}

// place gives each task up to k holders, following the seed: a worker's
// share of the holdings to hand out is ceil(needed x free/total free), free
// = max load - running. The worker with the most share left takes the next
// holding it can (not holding the task, below max load); share steers,
// max load is the hard limit. Holdings are handed out in rounds (every task
// its first holder, then its second...) so that when capacity is short, the
// deficit is spread thin rather than leaving some tasks with no holder.
func (e *Engine) place(ts []*task) {
	if len(ts) == 0 {
		return
	}
	needed, totalFree := 0, 0
	for _, t := range ts {
		needed += e.k - len(t.holders)
	}
	h := e.heap[:0]
	for _, w := range e.workers {
		if f := w.free(); f > 0 {
			totalFree += f
			h = append(h, &cand{w: w, free: f})
		}
	}
	if totalFree == 0 || needed == 0 {
		e.heap = h
		return
	}
	for _, c := range h {
		c.quota = int(math.Ceil(float64(needed) * float64(c.free) / float64(totalFree)))
	}
	heap.Init(&h)
	var skipped []*cand
	for round := 1; round <= e.k && len(h) > 0; round++ {
		for _, t := range ts {
			if len(t.holders) >= round || len(t.holders) >= e.k {
				continue
			}
			var got *cand
			for len(h) > 0 {
				c := heap.Pop(&h).(*cand)
				if t.heldBy(c.w) || slices.Contains(t.avoid, c.w) {
					skipped = append(skipped, c)
					continue
				}
				got = c
				break
			}
			for _, c := range skipped {
				heap.Push(&h, c)
			}
			skipped = skipped[:0]
			if got == nil {
				continue
			}
			e.hold(t, got.w)
			e.box(got.w).addTask(t.spec)
			got.quota--
			got.free--
			if got.free > 0 {
				heap.Push(&h, got)
			}
		}
	}
	e.heap = h[:0]
}

type cand struct {
	w           *worker
	quota, free int
}

type candHeap []*cand

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].quota != h[j].quota {
		return h[i].quota > h[j].quota
	}
	if h[i].free != h[j].free {
		return h[i].free > h[j].free
	}
	return h[i].w.id < h[j].w.id
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(*cand)) }
func (h *candHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// ---- instructions ----

func (e *Engine) box(w *worker) *outbox {
	b := e.out[w]
	if b == nil {
		b = &outbox{add: map[string]protocol.Task{}, end: map[string]struct{}{}}
		e.out[w] = b
	}
	return b
}

// addTask and end keep a task out of both lists at once, so an instruction
// set means the same whatever order a worker applies it in.
func (b *outbox) addTask(t protocol.Task) {
	delete(b.end, t.TaskID)
	b.add[t.TaskID] = t
}

func (e *Engine) end(w *worker, id string) {
	b := e.box(w)
	delete(b.add, id)
	b.end[id] = struct{}{}
	e.stats.Ended++
}

// Flush returns the instruction sets built since the last Flush, one per
// worker, sorted by worker id, with tasks sorted by id.
func (e *Engine) Flush() []Outgoing {
	if len(e.out) == 0 {
		return nil
	}
	outs := make([]Outgoing, 0, len(e.out))
	for w, b := range e.out {
		if !b.reset && len(b.add) == 0 && len(b.end) == 0 {
			continue
		}
		in := protocol.Instruction{Type: protocol.TypeInstruction, Reset: b.reset}
		if len(b.add) > 0 {
			in.Add = make([]protocol.Task, 0, len(b.add))
			for _, t := range b.add {
				in.Add = append(in.Add, t)
			}
			slices.SortFunc(in.Add, func(a, b protocol.Task) int { return cmp.Compare(a.TaskID, b.TaskID) })
		}
		if len(b.end) > 0 {
			in.End = make([]string, 0, len(b.end))
			for id := range b.end {
				in.End = append(in.End, id)
			}
			slices.Sort(in.End)
		}
		outs = append(outs, Outgoing{WorkerID: w.id, Instruction: in})
	}
	clear(e.out)
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
		out[i] = WorkerInfo{ID: w.id, MaxLoad: w.maxLoad, Load: len(w.tasks), Free: max(0, w.free())}
	}
	return out
}

// Tasks lists the supervised tasks, sorted by id.
func (e *Engine) Tasks() []TaskInfo {
	ts := e.sortedTasks()
	out := make([]TaskInfo, len(ts))
	for i, t := range ts {
		hs := make([]string, len(t.holders))
		for j, w := range t.holders {
			hs[j] = w.id
		}
		slices.Sort(hs)
		out[i] = TaskInfo{ID: t.spec.TaskID, Spec: t.spec.Spec, Holders: hs, Missing: e.k - len(t.holders)}
	}
	return out
}

// Holders returns the ids of the workers holding task id, sorted.
func (e *Engine) Holders(id string) []string {
	t := e.tasks[id]
	if t == nil {
		return nil
	}
	hs := make([]string, len(t.holders))
	for i, w := range t.holders {
		hs[i] = w.id
	}
	slices.Sort(hs)
	return hs
}

// Holds reports whether worker holds task.
func (e *Engine) Holds(workerID, taskID string) bool {
	w := e.workers[workerID]
	return w != nil && w.tasks[taskID] != nil
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
func (e *Engine) Counts() (workers, tasks, deficitTasks, missing int) {
	for t := range e.deficit {
		missing += e.k - len(t.holders)
	}
	return len(e.workers), len(e.tasks), len(e.deficit), missing
}

func (e *Engine) sortedWorkers() []*worker {
	ws := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
	return ws
}

func (e *Engine) sortedTasks() []*task {
	ts := make([]*task, 0, len(e.tasks))
	for _, t := range e.tasks {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(a.seq, b.seq) })
	return ts
}
