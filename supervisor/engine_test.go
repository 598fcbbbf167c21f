package supervisor

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"pgregory.net/rapid"
)

// fleet is the workers' side of a test: what each worker runs after
// applying every instruction set the engine sent it.
type fleet map[string]map[string]bool

func (f fleet) apply(outs []Outgoing) {
	for _, o := range outs {
		run := f[o.WorkerID]
		if run == nil || o.Instruction.Reset {
			run = map[string]bool{} // a reset ends everything not in add
		}
		for _, t := range o.Instruction.Add {
			run[t.TaskID] = true
		}
		for _, id := range o.Instruction.End {
			delete(run, id)
		}
		f[o.WorkerID] = run
	}
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

type snapshot map[string][]string // task -> sorted holders

func snap(e *Engine) snapshot {
	s := snapshot{}
	for id := range e.tasks {
		s[id] = e.Holders(id)
	}
	return s
}

// check asserts the engine's invariants and that the fleet runs exactly what
// the engine says it holds. full: capacity is ample, so every task must have
// min(k, live workers) holders.
func check(t fataler, e *Engine, f fleet, full bool, silent ...[2]string) {
	t.Helper()
	f.apply(e.Flush())
	live := len(e.workers)
	sets := make(map[*worker]map[string]*task, live)
	for _, w := range e.workers {
		sets[w] = w.taskSet()
	}
	for id, w := range e.workers {
		if len(w.held) > w.maxLoad {
			t.Fatalf("worker %s holds %d > max load %d", id, len(w.held), w.maxLoad)
		}
		for pos, tk := range w.held {
			tid := tk.spec.TaskID
			if !tk.heldBy(w) || e.tasks[tid] != tk {
				t.Fatalf("worker %s holds %s but the task does not list it", id, tid)
			}
			for _, h := range tk.holders {
				if h.w == w && h.pos != pos {
					t.Fatalf("task %s: holding on %s says index %d, it is at %d", tid, id, h.pos, pos)
				}
			}
		}
		if held := sets[w]; len(held) != len(w.held) {
			t.Fatalf("worker %s holds a task twice: %d tasks, %d distinct", id, len(w.held), len(held))
		}
		if run := f[id]; !maps.Equal(run, setOf(sets[w])) {
			t.Fatalf("worker %s runs %v, engine says it holds %v", id, keys(run), keys(sets[w]))
		}
	}
	listed := make(map[*task]bool, len(e.deficit))
	for _, tk := range e.deficit {
		if listed[tk] {
			t.Fatalf("task %s listed twice in the deficit list", tk.spec.TaskID)
		}
		listed[tk] = true
	}
	for id, tk := range e.tasks {
		seen := map[*worker]bool{}
		for _, h := range tk.holders {
			w := h.w
			if seen[w] {
				t.Fatalf("task %s held twice by %s", id, w.id)
			}
			seen[w] = true
			if e.workers[w.id] != w || sets[w][id] != tk {
				t.Fatalf("task %s lists holder %s that does not hold it", id, w.id)
			}
		}
		want := min(e.k, live)
		inDeficit := tk.inDef && listed[tk]
		if inDeficit != (len(tk.holders) < e.k) {
			t.Fatalf("task %s: %d holders, in deficit set: %v", id, len(tk.holders), inDeficit)
		}
		if len(tk.holders) < want {
			if full {
				t.Fatalf("task %s has %d holders, want %d", id, len(tk.holders), want)
			}
			// Filled as soon as capacity appears: nobody who could take it
			// has room (but a worker it went silent on is not tried again).
			for _, w := range e.workers {
				if !seen[w] && w.free() > 0 && !slices.Contains(silent, [2]string{w.id, id}) {
					t.Fatalf("task %s short of holders while %s has %d free", id, w.id, w.free())
				}
			}
		}
	}
}

// taskSet is what w holds, by task id.
func (w *worker) taskSet() map[string]*task {
	m := make(map[string]*task, len(w.held))
	for _, t := range w.held {
		m[t.spec.TaskID] = t
	}
	return m
}

func setOf(m map[string]*task) map[string]bool {
	s := make(map[string]bool, len(m))
	for k := range m {
		s[k] = true
	}
	return s
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// sticky asserts that no task moved except off the given workers (gone):
// every holder a task had before, other than those, still holds it.
func sticky(t fataler, before, after snapshot, gone ...string) {
	t.Helper()
	for id, hs := range before {
		now, ok := after[id]
		if !ok {
			continue // removed
		}
		for _, h := range hs {
			if !slices.Contains(gone, h) && !slices.Contains(now, h) && !(len(now) >= len(hs) && healed(before, after, h)) {
				t.Fatalf("task %s moved off %s (holders %v -> %v)", id, h, hs, now)
			}
		}
	}
}

// healed reports whether worker w took a task in exchange: the swap by which
// the engine fills a deficit that only a worker already holding the task had
// room for (the moved task keeps its holder count, checked by the caller).
func healed(before, after snapshot, w string) bool {
	for id, now := range after {
		if hs := before[id]; slices.Contains(now, w) && !slices.Contains(hs, w) { // hs is nil for a new task
			return true
		}
	}
	return false
}

func tasks(from, n int) []protocol.Task {
	ts := make([]protocol.Task, n)
	for i := range ts {
		ts[i] = protocol.Task{TaskID: fmt.Sprintf("room-%05d", from+i)}
	}
	return ts
}

func newEngine(t testing.TB, k int) *Engine {
	t.Helper()
	e, err := NewEngine(k)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The fleet: 100 workers, 10,000 tasks, k=3, invariants after every event.
func TestFleetInvariants(t *testing.T) {
	const k, nw, nt = 3, 100, 10_000
	e := newEngine(t, k)
	f := fleet{}
	for i := range nw {
		e.Claim(fmt.Sprintf("w%03d", i), 450, nil) // capacity 45,000 for 30,000 holdings
	}
	e.Assign(tasks(0, nt), nil, true)
	check(t, e, f, true)
	if _, _, d, _ := e.Counts(); d != 0 {
		t.Fatalf("deficit %d after the first assignment", d)
	}

	// Kill ten workers one at a time: only their tasks move.
	for i := range 10 {
		before := snap(e)
		dead := fmt.Sprintf("w%03d", i*7)
		e.RemoveWorker(dead)
		delete(f, dead)
		check(t, e, f, true)
		after := snap(e)
		sticky(t, before, after, dead)
		for id, hs := range before {
			if slices.Contains(hs, dead) == slices.Equal(hs, after[id]) {
				t.Fatalf("task %s: holders %v -> %v after %s died", id, hs, after[id], dead)
			}
		}
	}
	// New tasks and removed tasks: nothing else moves.
	before := snap(e)
	e.Assign(tasks(nt, 500), []string{"room-00001", "room-00002", "room-09999"}, false)
	check(t, e, f, true)
	sticky(t, before, snap(e))
	// A worker lowers its max load: it sheds, others take the excess.
	before = snap(e)
	e.Report("w001", 100, keys(f["w001"]), false)
	check(t, e, f, true)
	sticky(t, before, snap(e), "w001")
	if n := len(e.workers["w001"].held); n != 100 {
		t.Fatalf("w001 holds %d after lowering max load to 100", n)
	}
	// A task goes silent on one worker: it moves to another.
	before = snap(e)
	hs := e.Holders("room-00500")
	e.Vacate(hs[0], "room-00500")
	check(t, e, f, true)
	sticky(t, before, snap(e), hs[0])
	if now := e.Holders("room-00500"); slices.Contains(now, hs[0]) || len(now) != k {
		t.Fatalf("room-00500 holders %v after vacating %s", now, hs[0])
	}
	// New workers join: no deficit, so nothing moves until a rebalance.
	before = snap(e)
	for i := range 10 {
		e.Report(fmt.Sprintf("new%02d", i), 450, nil, true)
	}
	check(t, e, f, true)
	sticky(t, before, snap(e))
	e.Rebalance(0.1)
	check(t, e, f, true)
	assertBalanced(t, e, 0.1)
	// A reset keeps everything that is valid.
	before = snap(e)
	e.Assign(nil, nil, true)
	check(t, e, f, true)
	if !maps.EqualFunc(before, snap(e), slices.Equal) {
		t.Fatal("a reset moved tasks")
	}
}

func assertBalanced(t testing.TB, e *Engine, th float64) {
	t.Helper()
	total, capacity := 0, 0
	for _, w := range e.workers {
		total += len(w.held)
		capacity += w.maxLoad
	}
	for _, w := range e.workers {
		fair := float64(total) * float64(w.maxLoad) / float64(capacity)
		if l := float64(len(w.held)); l > fair*(1+th)+1 || l < fair*(1-th)-1 {
			t.Fatalf("worker %s load %v outside %v of fair share %.1f", w.id, l, th, fair)
		}
	}
}

// Random events on a small fleet, invariants after each.
func TestEngineProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(1, 4).Draw(rt, "k")
		e := newEngine(t, k)
		f := fleet{}
		nextTask, nextWorker := 0, 0
		var silent [][2]string // (worker, task) vacated for silence
		join := func() {
			id := fmt.Sprintf("w%d", nextWorker)
			nextWorker++
			e.Report(id, rapid.IntRange(0, 40).Draw(rt, "max load"), nil, true)
		}
		for range 3 {
			join()
		}
		for range 60 {
			before := snap(e)
			var gone []string
			switch rapid.IntRange(0, 7).Draw(rt, "event") {
			case 0:
				join()
			case 1: // a worker dies
				if ws := keys(e.workers); len(ws) > 0 {
					w := rapid.SampledFrom(ws).Draw(rt, "dead")
					e.RemoveWorker(w)
					delete(f, w)
					gone = append(gone, w)
				}
			case 2:
				n := rapid.IntRange(1, 30).Draw(rt, "add")
				e.Assign(tasks(nextTask, n), nil, false)
				nextTask += n
			case 3:
				if ids := keys(e.tasks); len(ids) > 0 {
					e.Assign(nil, rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 1, 5, rapid.ID).Draw(rt, "remove"), false)
				}
			case 4: // max load changes
				if ws := keys(e.workers); len(ws) > 0 {
					w := rapid.SampledFrom(ws).Draw(rt, "worker")
					e.Report(w, rapid.IntRange(0, 40).Draw(rt, "new max load"), keys(f[w]), false)
					gone = append(gone, w)
				}
			case 5: // a task goes silent on a worker
				if ws := keys(e.workers); len(ws) > 0 {
					w := rapid.SampledFrom(ws).Draw(rt, "worker")
					if ts := keys(e.workers[w].taskSet()); len(ts) > 0 {
						id := rapid.SampledFrom(ts).Draw(rt, "task")
						e.Vacate(w, id)
						gone = append(gone, w)
						silent = append(silent, [2]string{w, id})
					}
				}
			case 6:
				e.Rebalance(0.2)
				gone = keys(e.workers)
			case 7:
				e.Assign(nil, nil, true)
			}
			check(rt, e, f, false, silent...)
			sticky(rt, before, snap(e), gone...)
		}
	})
}

// Short capacity: the deficit is reported and filled when capacity appears.
func TestDeficitFilledWhenCapacityAppears(t *testing.T) {
	e := newEngine(t, 2)
	f := fleet{}
	e.Report("a", 10, nil, true)
	e.Assign(tasks(0, 10), nil, false)
	check(t, e, f, false)
	if _, _, d, missing := e.Counts(); d != 10 || missing != 10 {
		t.Fatalf("one worker, k=2: deficit %d tasks / %d holdings, want 10/10", d, missing)
	}
	assertDeficitListing(t, e)
	e.Report("b", 4, nil, true) // room for 4 second holders
	check(t, e, f, false)
	assertDeficitListing(t, e)
	if _, _, _, missing := e.Counts(); missing != 6 {
		t.Fatalf("missing %d holdings, want 6", missing)
	}
	e.Report("b", 10, keys(f["b"]), false) // more room
	check(t, e, f, true)
	if _, _, d, _ := e.Counts(); d != 0 {
		t.Fatalf("deficit %d after capacity grew", d)
	}
	// Removing tasks frees load, which fills the deficit of the others.
	e.Assign(tasks(10, 5), nil, false)
	check(t, e, f, false)
	e.Assign(nil, []string{"room-00000", "room-00001", "room-00002", "room-00003", "room-00004"}, false)
	check(t, e, f, true)
}

// Placement follows free capacity: each worker's count is about
// total x k x its share of free capacity (when no worker has more free
// capacity than there are tasks to place).
func TestPlacementProportionalToFreeCapacity(t *testing.T) {
	e := newEngine(t, 2)
	f := fleet{}
	loads := map[string]int{"a": 100, "b": 200, "c": 300, "d": 400}
	for id, l := range loads {
		e.Report(id, l, nil, true)
	}
	e.Assign(tasks(0, 450), nil, false) // 900 holdings over 1000 free
	check(t, e, f, true)
	for id, l := range loads {
		want := 900 * l / 1000
		if got := len(e.workers[id].held); got < want-2 || got > want+1 {
			t.Errorf("worker %s (max %d) got %d holdings, want about %d", id, l, got, want)
		}
	}
}

// A restarted supervisor's reset keeps the sessions workers report.
func TestResetKeepsClaims(t *testing.T) {
	e := newEngine(t, 2)
	f := fleet{}
	for _, w := range []string{"a", "b", "c"} {
		e.Claim(w, 10, nil)
	}
	e.Assign(tasks(0, 12), nil, true)
	check(t, e, f, true)
	before := snap(e)

	e2 := newEngine(t, 2) // restarted
	for w, run := range f {
		var claims []protocol.Task
		for _, id := range append(keys(run), "gone-task") {
			claims = append(claims, protocol.Task{TaskID: id})
		}
		e2.Claim(w, 10, claims)
	}
	e2.Assign(tasks(0, 12), nil, true)
	f2 := fleet{}
	for w, run := range f {
		f2[w] = maps.Clone(run)
		f2[w]["gone-task"] = true
	}
	check(t, e2, f2, true) // the reset ended gone-task everywhere
	if !maps.EqualFunc(before, snap(e2), slices.Equal) {
		t.Fatalf("restart moved tasks:\n%v\n%v", before, snap(e2))
	}
}

// Rebalance moves the fewest holdings.
func TestRebalanceMovesFewest(t *testing.T) {
	e := newEngine(t, 1)
	f := fleet{}
	e.Report("a", 1000, nil, true)
	e.Report("b", 1000, nil, true)
	e.Assign(tasks(0, 600), nil, false)
	check(t, e, f, true)
	e.Report("c", 1000, nil, true)
	check(t, e, f, true)
	// 600 over 3: fair 200, band [180, 220] at 10 %: a and b hold 300 each,
	// 80 must leave each (to 220) and c needs 180: max(160, 180) = 180
	// moves is the least that does it.
	if got := e.Rebalance(0.1); got != 180 {
		t.Fatalf("rebalance moved %d, want 180", got)
	}
	check(t, e, f, true)
	assertBalanced(t, e, 0.1)
	if got := e.Rebalance(0.1); got != 0 {
		t.Fatalf("second rebalance moved %d, want 0", got)
	}
}

// assertDeficitListing: the deficit-only listing (GET /tasks?deficit=true)
// is exactly the tasks of the full listing that miss holders.
func assertDeficitListing(t *testing.T, e *Engine) {
	t.Helper()
	var want []TaskInfo
	for _, ti := range e.Tasks() {
		if ti.Missing > 0 {
			want = append(want, ti)
		}
	}
	got := e.TasksUnsorted(true)
	SortTasks(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deficit listing %v, want %v", got, want)
	}
}

// Capacity exactly equal to demand, with the only free slots on a worker that
// already holds the new task: one holding moves (to that worker) and the task
// takes the freed slot. Deficit 0, with one move.
func TestDeficitHealedBySwap(t *testing.T) {
	e := newEngine(t, 2)
	f := fleet{}
	for _, w := range []string{"a", "b", "c"} {
		e.Report(w, 10, nil, true)
	}
	e.Report("d", 8, nil, true)
	e.Assign(tasks(0, 19), nil, false) // 38 holdings: everyone full
	check(t, e, f, true)
	e.Report("d", 10, keys(f["d"]), false) // two free slots, both on d
	e.Assign(tasks(19, 1), nil, false)     // the 20th room: 4 x 10 for 20 x 2
	check(t, e, f, true)
	if _, _, d, _ := e.Counts(); d != 0 {
		t.Fatalf("deficit %d, want 0", d)
	}
	if m := e.Stats().Moved; m != 1 {
		t.Fatalf("%d holdings moved, want 1", m)
	}
	for _, w := range e.Workers() {
		if w.Load != 10 {
			t.Fatalf("worker %s holds %d, want 10", w.ID, w.Load)
		}
	}
}

// A worker that claims a huge max load takes no more than its share plus one
// of a batch of new tasks while the others have room.
func TestGreedyWorkerTakesItsShare(t *testing.T) {
	e := newEngine(t, 2)
	f := fleet{}
	for _, w := range []string{"a", "b", "c", "d"} {
		e.Report(w, 10, nil, true)
	}
	e.Report("greedy", maxMaxLoad, nil, true)
	e.Assign(tasks(0, 10), nil, false) // 20 holdings over 5 workers: share 4
	check(t, e, f, true)
	if n := len(f["greedy"]); n > 5 {
		t.Fatalf("greedy worker took %d of 10 tasks, want at most its share plus one (5)", n)
	}
}

// A worker whose holding goes silent while it has shown no life for any
// task is suspect: its other holdings count as missing, it takes nothing
// new, and a sign of life (or a new connection) ends that.
func TestSuspectWorker(t *testing.T) {
	e := newEngine(t, 1)
	e.Report("a", 5, nil, true)
	e.Report("s", 5, nil, true)
	e.Assign(tasks(0, 4), nil, false)
	e.Flush()
	var onS []string
	for _, ti := range e.Tasks() {
		if ti.Holders[0] == "s" {
			onS = append(onS, ti.ID)
		} else {
			e.Alive("a", ti.ID)
		}
	}
	if len(onS) != 2 {
		t.Fatalf("s holds %v, want 2 of the 4 tasks", onS)
	}
	e.Vacate("s", onS[0]) // silent, and s never showed life: suspect
	if _, _, d, missing := e.Counts(); d != 1 || missing != 1 {
		t.Fatalf("deficit %d tasks / %d holdings, want 1/1: s's other holding counts as missing", d, missing)
	}
	if got := e.Holders(onS[0]); len(got) != 1 || got[0] != "a" {
		t.Fatalf("the silent task went to %v, want a", got)
	}
	e.Assign(tasks(4, 3), nil, false) // a has room for 2 of 3; s for all, but is suspect
	if ws := e.Workers(); !ws[1].Suspect || ws[1].Load != 1 || ws[1].Free != 0 {
		t.Fatalf("s: %+v, want suspect, holding 1, no room offered", ws[1])
	}
	e.Alive("s", onS[1]) // it produces after all
	if ws := e.Workers(); ws[1].Suspect || ws[1].Load != 2 {
		t.Fatalf("s after a sign of life: %+v, want trusted and given the task a had no room for", ws[1])
	}
	if _, _, d, _ := e.Counts(); d != 0 {
		t.Fatalf("deficit %d once s is trusted", d)
	}
}
