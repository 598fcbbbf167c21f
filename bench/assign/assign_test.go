package assign

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"

	"github.com/fulcrum-lb/fulcrum/supervisor"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

//	cd bench && go test -run XXX -bench . -benchmem -count 3 ./assign
//	cd bench && go test -run Moves -v ./assign

const (
	nTasks   = 100_000
	nMembers = 1_000
	k        = 3
	maxLoad  = 400 // ours: 400,000 capacity for 300,000 holdings
	// The ring: about ten partitions per member, a prime (as the library's
	// docs advise), 20 virtual nodes per member, load bound 1.25 x average.
	partitions = 10_007
)

func taskList() []protocol.Task {
	ts := make([]protocol.Task, nTasks)
	for i := range ts {
		ts[i] = protocol.Task{TaskID: fmt.Sprintf("room-%06d", i)}
	}
	return ts
}

func memberID(i int) string { return fmt.Sprintf("w%04d", i) }

// ---- ours ----

func ours(b testing.TB) *supervisor.Engine {
	e, err := supervisor.NewEngine(k)
	if err != nil {
		b.Fatal(err)
	}
	for i := range nMembers {
		e.Claim(memberID(i), maxLoad, nil)
	}
	return e
}

// ---- peer: consistent hashing with bounded loads ----

type member string

func (m member) String() string { return string(m) }

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// ring is what a team builds on the library: the ring, each partition's k
// members (owner, then the next around the ring), and each member's task
// list (to send it its instructions).
type ring struct {
	c       *consistent.Consistent
	owners  [][]string          // partition -> k members
	byOwner map[string][]string // member -> task ids
}

func newRing(b testing.TB, tasks []protocol.Task) *ring {
	ms := make([]consistent.Member, nMembers)
	for i := range ms {
		ms[i] = member(memberID(i))
	}
	r := &ring{c: consistent.New(ms, consistent.Config{
		PartitionCount: partitions, ReplicationFactor: 20, Load: 1.25, Hasher: hasher{},
	})}
	r.place(b, tasks)
	return r
}

// place fills the partition table and the per-member lists. The replicas
// are what the library's GetClosestNForPartition returns (the owner, then
// the next members in the order of their name hashes), but computed from
// one sorted list per membership change: the library call hashes and sorts
// every member on each call, which over 10,007 partitions took 7-12 s.
func (r *ring) place(b testing.TB, tasks []protocol.Task) {
	ms := r.c.GetMembers()
	type mh struct {
		h  uint64
		id string
	}
	order := make([]mh, len(ms))
	for i, m := range ms {
		order[i] = mh{xxhash.Sum64String(m.String()), m.String()}
	}
	slices.SortFunc(order, func(a, b mh) int { return cmp.Compare(a.h, b.h) })
	at := make(map[string]int, len(order))
	for i, m := range order {
		at[m.id] = i
	}
	r.owners = make([][]string, partitions)
	for p := range partitions {
		i, ok := at[r.c.GetPartitionOwner(p).String()]
		if !ok {
			b.Fatalf("partition %d has no owner", p)
		}
		ids := make([]string, k)
		for j := range k {
			ids[j] = order[(i+j)%len(order)].id
		}
		r.owners[p] = ids
	}
	r.byOwner = make(map[string][]string, nMembers)
	for _, t := range tasks {
		for _, m := range r.owners[r.c.FindPartitionID([]byte(t.TaskID))] {
			r.byOwner[m] = append(r.byOwner[m], t.TaskID)
		}
	}
}

// BenchmarkAssign: the full assignment of 100,000 tasks x k=3 over 1,000
// members, per-member task lists (instruction sets) included.
func BenchmarkAssign(b *testing.B) {
	tasks := taskList()
	b.Run("ours", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			e := ours(b)
			b.StartTimer()
			e.Assign(tasks, nil, true)
			if n := len(e.Flush()); n != nMembers {
				b.Fatalf("%d instruction sets", n)
			}
		}
	})
	b.Run("consistent-bounded", func(b *testing.B) {
		for b.Loop() {
			newRing(b, tasks)
		}
	})
}

// BenchmarkReassignOneDies: one member dies; what it held is placed on the
// others and the instructions to send are known.
func BenchmarkReassignOneDies(b *testing.B) {
	tasks := taskList()
	b.Run("ours", func(b *testing.B) {
		e := ours(b)
		e.Assign(tasks, nil, true)
		e.Flush()
		i := 0
		for b.Loop() {
			id := memberID(i % nMembers)
			e.RemoveWorker(id)
			e.Flush()
			b.StopTimer()
			e.Report(id, maxLoad, nil, true) // back, empty, ready to die again
			e.Flush()
			i++
			b.StartTimer()
		}
	})
	b.Run("consistent-bounded", func(b *testing.B) {
		r := newRing(b, tasks)
		i := 0
		for b.Loop() {
			id := memberID(i % nMembers)
			r.c.Remove(id)
			r.place(b, tasks) // recompute and diff: the instructions to send
			b.StopTimer()
			r.c.Add(member(id))
			r.place(b, tasks)
			i++
			b.StartTimer()
		}
	})
}

type holdings map[string][]string // task -> sorted members

func oursHoldings(e *supervisor.Engine, tasks []protocol.Task) holdings {
	h := make(holdings, len(tasks))
	for _, t := range tasks {
		h[t.TaskID] = e.Holders(t.TaskID)
	}
	return h
}

func ringHoldings(r *ring, tasks []protocol.Task) holdings {
	h := make(holdings, len(tasks))
	for _, t := range tasks {
		h[t.TaskID] = slices.Sorted(slices.Values(r.owners[r.c.FindPartitionID([]byte(t.TaskID))]))
	}
	return h
}

// moves counts holdings that changed, split into those of the dead member
// (which must move) and the others (which need not).
func moves(before, after holdings, dead string) (vacated, collateral int) {
	for id, hs := range before {
		for _, m := range hs {
			if m == dead {
				vacated++
			} else if !slices.Contains(after[id], m) {
				collateral++
			}
		}
	}
	return vacated, collateral
}

func loads(h holdings) (minL, maxL int) {
	per := map[string]int{}
	for _, hs := range h {
		for _, m := range hs {
			per[m]++
		}
	}
	minL = 1 << 30
	for _, n := range per {
		minL, maxL = min(minL, n), max(maxL, n)
	}
	return minL, maxL
}

// TestMovesWhenOneDies: ours moves only the dead member's holdings; the
// ring's figures are reported. It also reports the spread of loads and the
// heap each assignment keeps.
func TestMovesWhenOneDies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two 300,000-holding assignments")
	}
	tasks := taskList()
	const dead = "w0500"

	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	e := ours(t)
	e.Assign(tasks, nil, true)
	e.Flush()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	oursHeap := m1.HeapAlloc - m0.HeapAlloc
	before := oursHoldings(e, tasks)
	e.RemoveWorker(dead)
	e.Flush()
	after := oursHoldings(e, tasks)
	ov, oc := moves(before, after, dead)
	if oc != 0 {
		t.Errorf("ours: %d holdings of live workers moved, want 0", oc)
	}
	for id, hs := range after {
		if len(hs) != k {
			t.Fatalf("ours: %s has %d holders after the death, want %d", id, len(hs), k)
		}
	}
	omin, omax := loads(before)
	runtime.KeepAlive(e)

	runtime.GC()
	runtime.ReadMemStats(&m0)
	r := newRing(t, tasks)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	ringHeap := m1.HeapAlloc - m0.HeapAlloc
	for p := range 50 { // the cached replicas are the library's own
		got, err := r.c.GetClosestNForPartition(p, k)
		if err != nil {
			t.Fatal(err)
		}
		for j, m := range got {
			if m.String() != r.owners[p][j] {
				t.Fatalf("partition %d: replicas %v, library says %v", p, r.owners[p], got)
			}
		}
	}
	before = ringHoldings(r, tasks)
	r.c.Remove(dead)
	r.place(t, tasks)
	after = ringHoldings(r, tasks)
	rv, rc := moves(before, after, dead)
	rmin, rmax := loads(before)

	t.Logf("ours:               dead member's holdings %d, other holdings moved %d, load min/max %d/%d (mean %d), heap %.1f MB",
		ov, oc, omin, omax, nTasks*k/nMembers, float64(oursHeap)/1e6)
	t.Logf("consistent-bounded: dead member's holdings %d, other holdings moved %d, load min/max %d/%d (mean %d), heap %.1f MB",
		rv, rc, rmin, rmax, nTasks*k/nMembers, float64(ringHeap)/1e6)
	if omax > maxLoad {
		t.Errorf("ours: a worker holds %d, over max load %d", omax, maxLoad)
	}
}
