package supervisor

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var defaultTimings = Timings{
	Warmup: 30 * time.Second, WorkerTimeout: 30 * time.Second, TaskTimeout: 30 * time.Second,
	Tick: time.Second, QueryInterval: 30 * time.Minute, QueryRetry: 10 * time.Second,
}

// sim drives a Core with a fake clock and a fleet that applies every
// instruction set and reports every reportEvery, staggered.
type sim struct {
	t           *testing.T
	core        *Core
	fleet       fleet
	now         time.Time
	maxLoad     map[string]int
	alive       map[string]bool // still reporting
	silentTask  map[[2]string]bool
	allSilent   bool // every room stopped sending
	lastMsg     map[string]time.Time
	source      []protocol.Task
	sourceErr   error
	reportEvery time.Duration
	offset      map[string]time.Duration
	waiting     map[string]bool // a message from it is read, not yet handled
}

func newSim(t *testing.T, start time.Time, k int, source []protocol.Task) *sim {
	t.Helper()
	c, err := NewCore(defaultTimings, k, start)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, core: c, fleet: fleet{}, now: start, maxLoad: map[string]int{}, alive: map[string]bool{},
		silentTask: map[[2]string]bool{}, lastMsg: map[string]time.Time{}, source: source,
		reportEvery: 10 * time.Second, offset: map[string]time.Duration{}, waiting: map[string]bool{}}
}

func (s *sim) join(id string, maxLoad int) {
	s.maxLoad[id] = maxLoad
	s.alive[id] = true
	s.offset[id] = time.Duration(len(s.offset)%10) * time.Second
	s.report(id, true)
}

func (s *sim) report(id string, first bool) {
	r := &protocol.Report{Type: protocol.TypeReport, WorkerID: id, MaxLoad: s.maxLoad[id]}
	for _, tid := range keys(s.fleet[id]) {
		seen := s.now
		if s.allSilent || s.silentTask[[2]string{id, tid}] {
			seen = t0 // never moves
		}
		r.Tasks = append(r.Tasks, protocol.TaskStatus{TaskID: tid, LastSeen: seen})
	}
	s.core.Report(s.now, r, first)
	s.lastMsg[id] = s.now
	s.settle()
}

func (s *sim) settle() {
	if s.core.TakeQuery() {
		s.core.QueryResult(s.now, slices.Clone(s.source), s.sourceErr)
	}
	send, drop := s.core.Flush(s.now)
	s.fleet.apply(send)
	for _, id := range drop {
		delete(s.fleet, id)
	}
}

// step advances one tick: due reports, then the wheel.
func (s *sim) step() {
	s.now = s.now.Add(defaultTimings.Tick)
	for _, id := range keys(s.alive) {
		if s.alive[id] && s.now.Sub(t0.Add(s.offset[id]))%s.reportEvery == 0 {
			s.report(id, false)
		}
	}
	s.core.Tick(s.now, func(id string) bool { return s.waiting[id] })
	s.settle()
}

func (s *sim) run(d time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.step()
	}
}

func (s *sim) check(full bool) {
	s.t.Helper()
	check(s.t, s.core.Engine(), s.fleet, full)
}

func TestCoreWarmupAssignsNothingThenResets(t *testing.T) {
	s := newSim(t, t0, 2, tasks(0, 40))
	for i := range 4 {
		s.join(fmt.Sprintf("w%d", i), 50)
	}
	s.run(29 * time.Second)
	if s.core.Phase() != Warming || len(s.fleet["w0"]) != 0 {
		t.Fatalf("during warm-up: phase %v, w0 runs %v", s.core.Phase(), s.fleet["w0"])
	}
	// Admin changes during warm-up wait for its end.
	s.core.AdminTasks(tasks(100, 2), []string{"room-00000"})
	s.settle()
	if _, tasks, _, _ := s.core.Engine().Counts(); tasks != 0 {
		t.Fatalf("%d tasks assigned during warm-up", tasks)
	}
	s.run(time.Second)
	if s.core.Phase() != Running {
		t.Fatalf("phase %v after warm-up", s.core.Phase())
	}
	s.check(true)
	if _, n, _, _ := s.core.Engine().Counts(); n != 41 || s.core.Engine().HasTask("room-00000") {
		t.Fatalf("%d tasks after warm-up, want 40 - 1 + 2", n)
	}
}

func TestCoreFailedFirstQueryKeepsWarmingAndRetries(t *testing.T) {
	s := newSim(t, t0, 2, tasks(0, 10))
	s.sourceErr = errors.New("spider down")
	s.join("w0", 10)
	s.join("w1", 10)
	s.run(35 * time.Second)
	if s.core.Phase() != Warming || s.core.QueryErrors != 1 {
		t.Fatalf("phase %v, query errors %d", s.core.Phase(), s.core.QueryErrors)
	}
	s.sourceErr = nil
	s.run(defaultTimings.QueryRetry)
	if s.core.Phase() != Running {
		t.Fatalf("not running after the retry succeeded")
	}
	s.check(true)
}

// The scenario: 100 workers, 10,000 tasks, k=3; workers die and
// their tasks are on others within worker_timeout + one tick; nothing else
// moves.
func TestCoreDeadWorkersReassignedWithinTimeoutPlusTick(t *testing.T) {
	s := newSim(t, t0, 3, tasks(0, 10_000))
	for i := range 100 {
		s.join(fmt.Sprintf("w%03d", i), 400)
	}
	s.run(40 * time.Second)
	s.check(true)
	before := snap(s.core.Engine())
	dead := []string{"w007", "w042", "w099"}
	for _, id := range dead {
		s.alive[id] = false
	}
	gone := map[string]time.Time{}
	for len(gone) < len(dead) && s.now.Before(t0.Add(5*time.Minute)) {
		s.step()
		for _, id := range dead {
			if _, ok := gone[id]; !ok && !s.core.Engine().HasWorker(id) {
				gone[id] = s.now
			}
		}
		s.check(true) // every task on k live workers after every event
	}
	for _, id := range dead {
		limit := s.lastMsg[id].Add(defaultTimings.WorkerTimeout + defaultTimings.Tick)
		if at, ok := gone[id]; !ok || at.After(limit) || at.Before(s.lastMsg[id].Add(defaultTimings.WorkerTimeout)) {
			t.Errorf("%s: last message %v, removed at %v (ok=%v), want within (timeout, timeout+tick]", id,
				s.lastMsg[id].Sub(t0), at.Sub(t0), ok)
		}
	}
	after := snap(s.core.Engine())
	sticky(t, before, after, dead...)
	moved := 0
	for id, hs := range before {
		if !slices.Equal(hs, after[id]) {
			moved++
		}
	}
	if moved == 0 || s.core.WorkerDeaths != 3 {
		t.Fatalf("moved %d tasks, deaths %d", moved, s.core.WorkerDeaths)
	}
}

// A worker whose message waits to be handled is not silent, however long
// it waits: neither it nor its holdings expire. Handling the message
// re-arms its timeouts; if the wait ends with nothing handled (a message
// the server dropped), the timeout, long past, expires at the next tick.
func TestCoreWaitingWorkerIsNotSilent(t *testing.T) {
	s := newSim(t, t0, 2, tasks(0, 40))
	for i := range 4 {
		s.join(fmt.Sprintf("w%d", i), 40)
	}
	s.run(40 * time.Second)
	s.check(true)
	before := snap(s.core.Engine())
	s.alive["w1"], s.waiting["w1"] = false, true
	s.run(3 * defaultTimings.WorkerTimeout)
	if !s.core.Engine().HasWorker("w1") || s.core.WorkerDeaths != 0 || s.core.TaskTimeouts != 0 {
		t.Fatalf("w1 waiting: present %v, deaths %d, task timeouts %d", s.core.Engine().HasWorker("w1"),
			s.core.WorkerDeaths, s.core.TaskTimeouts)
	}
	sticky(t, before, snap(s.core.Engine()))
	s.waiting["w1"] = false
	s.step()
	if s.core.Engine().HasWorker("w1") || s.core.WorkerDeaths != 1 {
		t.Fatalf("w1 present %v, deaths %d a tick after its wait", s.core.Engine().HasWorker("w1"), s.core.WorkerDeaths)
	}
	s.check(true)
}

// A task silent on one worker moves off it within task_timeout + one tick.
func TestCoreSilentTaskMoves(t *testing.T) {
	s := newSim(t, t0, 2, tasks(0, 30))
	for i := range 4 {
		s.join(fmt.Sprintf("w%d", i), 30)
	}
	s.run(40 * time.Second)
	s.check(true)
	hs := s.core.Engine().Holders("room-00003")
	victim := hs[0]
	s.silentTask[[2]string{victim, "room-00003"}] = true
	silentSince := s.now
	before := snap(s.core.Engine())
	for s.core.Engine().Holds(victim, "room-00003") {
		if s.now.After(silentSince.Add(2 * time.Minute)) {
			t.Fatal("silent task never moved")
		}
		s.step()
	}
	// Its last sign of life was the last report before silentSince.
	if d := s.now.Sub(silentSince); d > defaultTimings.TaskTimeout+s.reportEvery+defaultTimings.Tick {
		t.Fatalf("moved %v after going silent", d)
	}
	s.check(true)
	if s.fleet[victim]["room-00003"] {
		t.Fatalf("%s still runs the silent task", victim)
	}
	sticky(t, before, snap(s.core.Engine()), victim)
	if s.core.TaskTimeouts != 1 {
		t.Fatalf("task timeouts %d", s.core.TaskTimeouts)
	}
}

// A restarted supervisor: workers report what they run during warm-up and
// keep it all after the reset.
func TestCoreRestartKeepsSessions(t *testing.T) {
	list := tasks(0, 2_000)
	s := newSim(t, t0, 3, list)
	for i := range 20 {
		s.join(fmt.Sprintf("w%02d", i), 400)
	}
	s.run(40 * time.Second)
	s.check(true)
	before := snap(s.core.Engine())
	running := map[string]map[string]bool{}
	for w, run := range s.fleet {
		running[w] = maps.Clone(run)
	}

	// New supervisor, same fleet; a task was removed from the source meanwhile.
	s2 := newSim(t, s.now, 3, list[1:])
	s2.fleet = s.fleet
	for i := range 20 {
		s2.join(fmt.Sprintf("w%02d", i), 400)
	}
	s2.run(35 * time.Second)
	s2.check(true)
	after := snap(s2.core.Engine())
	delete(before, list[0].TaskID)
	if !maps.EqualFunc(before, after, slices.Equal) {
		t.Fatal("the restart moved tasks")
	}
	for w, run := range s2.fleet {
		delete(running[w], list[0].TaskID)
		if !maps.Equal(run, running[w]) {
			t.Fatalf("%s runs %d tasks after the restart, %d before", w, len(run), len(running[w]))
		}
	}
}

// Later queries diff against the source's previous list; admin changes stand.
func TestCoreQueryDiff(t *testing.T) {
	s := newSim(t, t0, 1, tasks(0, 5))
	s.join("w0", 100)
	s.run(31 * time.Second)
	s.core.AdminTasks(tasks(50, 1), []string{"room-00001"})
	s.settle()
	s.source = append(tasks(2, 3), tasks(10, 1)...) // 0 and 1 gone, 10 new
	s.run(defaultTimings.QueryInterval)
	got := slices.Sorted(slices.Values(s.core.Engine().TaskIDs()))
	want := []string{"room-00002", "room-00003", "room-00004", "room-00010", "room-00050"}
	if !slices.Equal(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	s.check(true)
}

// Every room goes silent at once (the rooms' server is down): holdings
// time out by the hundreds per tick (reports are staggered over 10 s), each
// tick's batch handled as one placement (away from the workers it was silent
// on in that tick), and invariants hold throughout.
func TestCoreAllRoomsSilentAtOnce(t *testing.T) {
	s := newSim(t, t0, 3, tasks(0, 2_000))
	for i := range 100 {
		s.join(fmt.Sprintf("w%03d", i), 200)
	}
	s.run(40 * time.Second)
	s.check(true)
	before := snap(s.core.Engine())
	s.allSilent = true
	for end := s.now.Add(defaultTimings.TaskTimeout + s.reportEvery + defaultTimings.Tick); s.now.Before(end); {
		s.step()
		s.check(true)
	}
	if s.core.TaskTimeouts != 6_000 {
		t.Fatalf("%d holdings timed out, want all 6,000 once", s.core.TaskTimeouts)
	}
	// Each of the 6,000 original holdings timed out once (new holdings have
	// a full task_timeout from their add, past this window), and every task
	// is held by k workers again.
	after := snap(s.core.Engine())
	for id := range before {
		if len(after[id]) != 3 {
			t.Fatalf("%s has holders %v", id, after[id])
		}
	}
}

// Admin calls during warm-up are queued as their net effect in call order:
// the later call on an id wins, as it would after warm-up.
func TestCoreWarmupAdminCallsNetInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls func(c *Core)
		want  map[string]bool // task -> supervised after warm-up
	}{
		{"remove then add keeps", func(c *Core) {
			c.AdminTasks(nil, []string{"room-00001", "extra"})
			c.AdminTasks([]protocol.Task{{TaskID: "room-00001"}, {TaskID: "extra"}}, nil)
		}, map[string]bool{"room-00001": true, "extra": true}},
		{"add then remove drops", func(c *Core) {
			c.AdminTasks([]protocol.Task{{TaskID: "extra"}}, nil)
			c.AdminTasks(nil, []string{"extra", "room-00002"})
		}, map[string]bool{"extra": false, "room-00002": false, "room-00001": true}},
		{"add, remove, add again", func(c *Core) {
			c.AdminTasks([]protocol.Task{{TaskID: "extra"}}, nil)
			c.AdminTasks(nil, []string{"extra"})
			c.AdminTasks([]protocol.Task{{TaskID: "extra", Spec: []byte(`{"v":2}`)}}, nil)
		}, map[string]bool{"extra": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, t0, 2, tasks(0, 5))
			for i := range 3 {
				s.join(fmt.Sprintf("w%d", i), 50)
			}
			tc.calls(s.core)
			s.run(31 * time.Second)
			if s.core.Phase() != Running {
				t.Fatalf("phase %v", s.core.Phase())
			}
			s.check(true)
			for id, want := range tc.want {
				if got := s.core.Engine().HasTask(id); got != want {
					t.Errorf("%s supervised: %v, want %v", id, got, want)
				}
			}
		})
	}
}
