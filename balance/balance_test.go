package balance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func TestNamesListsEveryBuiltin(t *testing.T) {
	want := []string{"bounded_hash", "hash", "least_active", "least_loaded", "p2c", "random", "round_robin", "shortest_response"}
	got := NewRegistry().Names()
	if !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		if !Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
}

func TestUnknownStrategyAndBadOptions(t *testing.T) {
	if _, err := New("fastest", Options{}); !errors.Is(err, ErrUnknownStrategy) || !strings.Contains(err.Error(), "fastest") {
		t.Fatalf("New(fastest) = %v, want ErrUnknownStrategy naming it", err)
	}
	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{Warmup: "cubic"}, "warmup"},
		{Options{Passive: Passive{MaxFailures: -1}}, "passive.max_failures"},
		{Options{Passive: Passive{MaxEjectedPercent: 101}}, "passive.max_ejected_percent"},
	} {
		if _, err := New("random", tc.o); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("options %+v: err = %v, want one naming %q", tc.o, err, tc.field)
		}
	}
}

// Each strategy decodes and checks its own settings: a bad one fails New
// with a *FieldError naming the key, and settings of the wrong type (or
// any settings for a strategy without knobs) are refused.
func TestStrategySettings(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		s        Settings
		field    string // "" = valid; "-" = an error that is not a field's
	}{
		{"hash", SettingsFrom(HashSettings{Function: "md5", VirtualNodes: 5}), ""},
		{"hash", SettingsFrom(HashSettings{Function: "crc"}), "function"},
		{"hash", SettingsFrom(&HashSettings{VirtualNodes: -3}), "virtual_nodes"},
		{"bounded_hash", SettingsFrom(BoundedHashSettings{LoadBound: 1.5, HashSettings: HashSettings{VirtualNodes: 64}}), ""},
		{"bounded_hash", SettingsFrom(BoundedHashSettings{LoadBound: 0.9}), "load_bound"},
		{"bounded_hash", SettingsFrom(BoundedHashSettings{LoadBound: math.NaN()}), "load_bound"},
		{"bounded_hash", SettingsFrom(HashSettings{}), "-"},
		{"p2c", SettingsFrom(P2CSettings{Decay: time.Second}), ""},
		{"p2c", SettingsFrom(P2CSettings{Decay: -time.Second}), "decay"},
		{"shortest_response", SettingsFrom(ShortestResponseSettings{Window: time.Minute}), ""},
		{"shortest_response", SettingsFrom(ShortestResponseSettings{Window: -1}), "window"},
		{"round_robin", nil, ""},
		{"round_robin", SettingsFrom(P2CSettings{}), "-"},
	} {
		_, err := New(tc.strategy, Options{Settings: tc.s})
		if cerr := Check(tc.strategy, tc.s); (cerr == nil) != (err == nil) {
			t.Errorf("%s %+v: Check says %v, New says %v", tc.strategy, tc.s, cerr, err)
		}
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s %+v: %v", tc.strategy, tc.s, err)
		case tc.field == "-" && (err == nil || errors.As(err, &fe)):
			t.Errorf("%s %+v: err = %v, want a non-field error", tc.strategy, tc.s, err)
		case tc.field != "" && tc.field != "-" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%s %+v: err = %v, want a *FieldError for %q", tc.strategy, tc.s, err, tc.field)
		}
	}
}

type firstStrategy struct{}

func (firstStrategy) Build(eps []*Endpoint) Picker { return firstPicker(eps) }

type firstPicker []*Endpoint

func (p firstPicker) Pick(info PickInfo) *Endpoint {
	for _, e := range p {
		if info.Usable(e) {
			return e
		}
	}
	return nil
}

func TestRegisterCustomStrategy(t *testing.T) {
	r := NewRegistry()
	if err := r.Register("first", func(Settings) (Strategy, error) { return firstStrategy{}, nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("first", func(Settings) (Strategy, error) { return firstStrategy{}, nil }); err == nil {
		t.Fatal("registering a name twice succeeded")
	}
	if err := r.Register("round_robin", func(Settings) (Strategy, error) { return firstStrategy{}, nil }); err == nil {
		t.Fatal("a plug-in replaced a built-in")
	}
	if !slices.Contains(r.Names(), "first") {
		t.Fatalf("Names() = %v lacks first", r.Names())
	}
	b := mustNew(t, "first", Options{Registry: r}, Target{Addr: "a", Weight: 1}, Target{Addr: "b", Weight: 1})
	for range 5 {
		p := mustPick(t, b, "")
		if p.Addr() != "a" {
			t.Fatalf("custom strategy picked %s", p.Addr())
		}
		p.Done(nil)
	}
	if _, err := New("first", Options{}); !errors.Is(err, ErrUnknownStrategy) {
		t.Fatal("a registry's strategy leaked into the default registry")
	}
}

func TestTypedErrors(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name, Options{})
			if _, err := b.Pick("k"); !errors.Is(err, ErrNoTargets) {
				t.Fatalf("no targets: %v", err)
			}
			_ = b.Update([]Target{{Addr: "zero", Weight: 0}, {Addr: "off", Weight: 3, Disabled: true}})
			if _, err := b.Pick("k"); !errors.Is(err, ErrNoneAvailable) {
				t.Fatalf("only weight 0 and disabled: %v", err)
			}
			_ = b.Update([]Target{{Addr: "a", Weight: 1, MaxConcurrency: 1}})
			p := mustPick(t, b, "k")
			if _, err := b.Pick("k"); !errors.Is(err, ErrAtCapacity) {
				t.Fatalf("full: %v", err)
			}
			p.Done(nil)
			if _, err := b.PickWith(PickInfo{Key: "k", Exclude: []*Endpoint{p.Endpoint()}}); !errors.Is(err, ErrNoneAvailable) {
				t.Fatalf("all excluded: %v", err)
			}
			if err := b.SetHealthy("a", false); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Pick("k"); !errors.Is(err, ErrNoneAvailable) {
				t.Fatalf("all unhealthy: %v", err)
			}
		})
	}
}

func TestUpdateRejectsBadSetsWhole(t *testing.T) {
	b := mustNew(t, "round_robin", Options{}, Target{Addr: "a", Weight: 1})
	for _, tc := range []struct {
		ts   []Target
		want string
	}{
		{[]Target{{Addr: "x", Weight: 1}, {Addr: "", Weight: 1}}, "targets[1].addr"},
		{[]Target{{Addr: "x", Weight: 1}, {Addr: "x", Weight: 1}}, "twice"},
		{[]Target{{Addr: "x", Weight: -1}}, "targets[0].weight"},
		{[]Target{{Addr: "x", Weight: 1, Warmup: -time.Second}}, "targets[0].warmup"},
		{[]Target{{Addr: "x", Weight: 1, MaxConcurrency: -2}}, "targets[0].max_concurrency"},
	} {
		if err := b.Update(tc.ts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Update(%v) = %v, want error naming %q", tc.ts, err, tc.want)
		}
	}
	if got := b.Targets(); len(got) != 1 || got[0].Addr != "a" {
		t.Fatalf("a refused update changed the set: %v", got)
	}
}

// Zero weight and disabled targets are never picked, by any strategy (a
// known Apache ShenYu bug picked them).
func TestZeroWeightAndDisabledNeverPicked(t *testing.T) {
	for _, name := range Names() {
		b := mustNew(t, name, Options{},
			Target{Addr: "zero", Weight: 0}, Target{Addr: "a", Weight: 2},
			Target{Addr: "off", Weight: 9, Disabled: true}, Target{Addr: "b", Weight: 1})
		for i := range 2000 {
			p := mustPick(t, b, fmt.Sprint(i))
			if a := p.Addr(); a == "zero" || a == "off" {
				t.Fatalf("%s picked %s", name, a)
			}
			p.Done(nil)
		}
	}
}

func TestUpdateKeepsStateOfTargetsThatStay(t *testing.T) {
	clk := newFakeClock()
	b := mustNew(t, "least_active", Options{Clock: clk.Now},
		Target{Addr: "a", Weight: 1, Warmup: time.Minute}, Target{Addr: "b", Weight: 1})
	var held []Pick
	for range 4 {
		held = append(held, mustPick(t, b, ""))
	}
	wantFailures := map[string]uint64{held[0].Addr(): 1}
	held[0].Report(10*time.Millisecond, errors.New("boom"))
	held = held[1:]
	clk.Advance(30 * time.Second)
	if err := b.Update([]Target{{Addr: "a", Weight: 1, Warmup: time.Minute}, {Addr: "c", Weight: 1, Warmup: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	stats := map[string]EndpointStats{}
	for _, s := range b.Endpoints() {
		stats[s.Target.Addr] = s
	}
	a, c := stats["a"], stats["c"]
	if a.Failures != wantFailures["a"] || a.Requests != wantFailures["a"] {
		t.Fatalf("a lost its counters: %+v, want %d failures", a, wantFailures["a"])
	}
	var aInflight int64
	for _, p := range held {
		if p.Addr() == "a" {
			aInflight++
		}
	}
	if a.InFlight != aInflight {
		t.Fatalf("a in-flight = %d after update, want %d", a.InFlight, aInflight)
	}
	if !a.Warming || !c.Warming {
		t.Fatalf("warming: a=%v c=%v", a.Warming, c.Warming)
	}
	if _, ok := stats["b"]; ok {
		t.Fatal("b still listed after removal")
	}
	// a has been up 30s of 60s; c just arrived: a's effective weight is
	// clamped to 1 here (weight 1), so check the clock instead: in 30s a
	// is warm and c is not.
	clk.Advance(30 * time.Second)
	for _, s := range b.Endpoints() {
		if s.Target.Addr == "a" && s.Warming {
			t.Fatal("a still warming 60s after it came up: warm-up restarted on update")
		}
		if s.Target.Addr == "c" && !s.Warming {
			t.Fatal("c warm 30s into its 60s window")
		}
	}
	// Removed targets are never picked; their outstanding picks finish.
	for range 100 {
		p := mustPick(t, b, "")
		if p.Addr() == "b" {
			t.Fatal("removed target picked")
		}
		p.Done(nil)
	}
	for _, p := range held {
		p.Done(nil)
	}
	for _, s := range b.Endpoints() {
		if s.InFlight != 0 {
			t.Fatalf("%s in-flight %d after every pick ended", s.Target.Addr, s.InFlight)
		}
	}
}

func TestWaitBlocksUntilAPermitReturns(t *testing.T) {
	b := mustNew(t, "round_robin", Options{}, Target{Addr: "a", Weight: 1, MaxConcurrency: 2})
	p1, p2 := mustPick(t, b, ""), mustPick(t, b, "")
	got := make(chan Pick)
	go func() {
		p, err := b.Wait(context.Background(), PickInfo{})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	// The waiter cannot finish while both permits are out.
	select {
	case <-got:
		t.Fatal("Wait returned while every permit was taken")
	default:
	}
	p1.Done(nil)
	p3 := <-got
	if p3.Addr() != "a" {
		t.Fatalf("waited pick = %q", p3.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Wait(ctx, PickInfo{}); !errors.Is(err, ErrAtCapacity) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with cancelled ctx on a full target = %v", err)
	}
	p2.Done(nil)
	p3.Done(nil)
}

// Many waiters, few permits: every waiter is served, in-flight never passes
// the permits, and nobody is left behind (no lost wake-up).
func TestWaitStressNeverExceedsPermits(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name, Options{},
				Target{Addr: "a", Weight: 3, MaxConcurrency: 3},
				Target{Addr: "b", Weight: 1, MaxConcurrency: 2})
			limits := map[string]int64{"a": 3, "b": 2}
			var cur [2]atomic.Int64
			var served atomic.Int64
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 200 {
						p, err := b.Wait(context.Background(), PickInfo{Key: fmt.Sprint(g, i)})
						if err != nil {
							t.Error(err)
							return
						}
						idx := 0
						if p.Addr() == "b" {
							idx = 1
						}
						if n := cur[idx].Add(1); n > limits[p.Addr()] {
							t.Errorf("%s: %d concurrent picks on %s, permits %d", name, n, p.Addr(), limits[p.Addr()])
						}
						cur[idx].Add(-1)
						served.Add(1)
						p.Done(nil)
					}
				}()
			}
			wg.Wait()
			if served.Load() != 16*200 {
				t.Fatalf("served %d of %d", served.Load(), 16*200)
			}
		})
	}
}

func TestPassiveEjectionBacksOffAndCaps(t *testing.T) {
	clk := newFakeClock()
	b := mustNew(t, "round_robin", Options{Clock: clk.Now, Passive: Passive{MaxFailures: 3, Window: 10 * time.Second, EjectFor: 10 * time.Second, MaxEjectFor: 40 * time.Second, MaxEjectedPercent: 50}},
		Target{Addr: "bad", Weight: 1}, Target{Addr: "ok1", Weight: 1}, Target{Addr: "ok2", Weight: 1}, Target{Addr: "ok3", Weight: 1})
	fail := errors.New("502")
	failUntilEjected := func() {
		t.Helper()
		for i := 0; !b.Ejected("bad"); i++ {
			if i > 1000 {
				t.Fatal("bad never ejected")
			}
			p := mustPick(t, b, "")
			if p.Addr() == "bad" {
				p.Done(fail)
			} else {
				p.Done(nil)
			}
		}
	}
	noPickOfBad := func() {
		t.Helper()
		for range 50 {
			p := mustPick(t, b, "")
			if p.Addr() == "bad" {
				t.Fatal("ejected target picked")
			}
			p.Done(nil)
		}
	}
	// Ejection lengths double: 10s, 20s, 40s, then stay at the 40s cap.
	for _, d := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second} {
		failUntilEjected()
		noPickOfBad()
		clk.Advance(d - time.Second)
		if !b.Ejected("bad") {
			t.Fatalf("back before its %v ejection ended", d)
		}
		clk.Advance(time.Second)
		if b.Ejected("bad") {
			t.Fatalf("still ejected after %v", d)
		}
	}
	// Failures spread wider than the window do not eject.
	for range 10 {
		for {
			p := mustPick(t, b, "")
			if p.Addr() == "bad" {
				p.Done(fail)
				break
			}
			p.Done(nil)
		}
		clk.Advance(6 * time.Second)
	}
	if b.Ejected("bad") {
		t.Fatal("ejected for failures spread past the window")
	}
	// At most 50%: with two targets ejected, a third failing one stays.
	all := map[string]bool{}
	for i := 0; i < 400; i++ {
		p := mustPick(t, b, "")
		all[p.Addr()] = true
		p.Done(fail)
	}
	ejected := 0
	for _, s := range b.Endpoints() {
		if s.Ejected {
			ejected++
		}
	}
	if ejected != 2 {
		t.Fatalf("%d of 4 ejected, want the 50%% cap of 2", ejected)
	}
}

func TestHealthyAgainRestartsWarmup(t *testing.T) {
	clk := newFakeClock()
	b := mustNew(t, "random", Options{Clock: clk.Now}, Target{Addr: "a", Weight: 10, Warmup: 10 * time.Second}, Target{Addr: "b", Weight: 10})
	clk.Advance(time.Minute)
	if err := b.SetHealthy("a", false); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		p := mustPick(t, b, "")
		if p.Addr() == "a" {
			t.Fatal("unhealthy target picked")
		}
		p.Done(nil)
	}
	clk.Advance(time.Minute)
	_ = b.SetHealthy("a", true)
	clk.Advance(5 * time.Second)
	for _, s := range b.Endpoints() {
		if s.Target.Addr == "a" && (!s.Warming || s.EffectiveWeight != 5) {
			t.Fatalf("5s after recovery a = %+v, want warming at weight 5", s)
		}
	}
	if err := b.SetHealthy("nope", true); err == nil {
		t.Fatal("SetHealthy of an unknown target succeeded")
	}
}

// Picks allocate nothing on the hot path.
func TestPickDoesNotAllocate(t *testing.T) {
	for _, name := range Names() {
		b := mustNew(t, name, Options{}, Target{Addr: "a", Weight: 5}, Target{Addr: "b", Weight: 1}, Target{Addr: "c", Weight: 1})
		allocs := testing.AllocsPerRun(1000, func() {
			p, err := b.Pick("user-42")
			if err != nil {
				t.Fatal(err)
			}
			p.Done(nil)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per pick", name, allocs)
		}
	}
}

// A permit freed on a target that the first waiter excludes (a retry that
// skips the target which refused it) goes to a waiter that can use it,
// instead of idling until the next release.
func TestWaitPassesOnAPermitTheWokenWaiterCannotUse(t *testing.T) {
	b := mustNew(t, "least_active", Options{}, Target{Addr: "a", Weight: 1, MaxConcurrency: 1}, Target{Addr: "b", Weight: 1, MaxConcurrency: 1})
	pa, pb := mustPick(t, b, ""), mustPick(t, b, "")
	if pa.Addr() == "b" {
		pa, pb = pb, pa
	}
	type result struct {
		p   Pick
		err error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan result, 1)
	go func() {
		p, err := b.Wait(ctx, PickInfo{Exclude: []*Endpoint{pa.Endpoint()}})
		first <- result{p, err}
	}()
	testenv.Eventually(t, "the first waiter to queue", func() bool { return b.wq.n.Load() == 1 })
	second := make(chan result, 1)
	go func() {
		p, err := b.Wait(ctx, PickInfo{})
		second <- result{p, err}
	}()
	testenv.Eventually(t, "the second waiter to queue", func() bool { return b.wq.n.Load() == 2 })

	pa.Done(nil) // a's permit: the first waiter excludes a, the second can take it
	select {
	case r := <-second:
		if r.err != nil || r.p.Addr() != "a" {
			t.Fatalf("second waiter got %q, %v; want a", r.p.Addr(), r.err)
		}
		r.p.Done(nil)
	case r := <-first:
		t.Fatalf("the waiter excluding a got %q, %v", r.p.Addr(), r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("a's freed permit idled: the wake-up was not passed on")
	}
	pb.Done(nil) // b's permit: now the first waiter's
	r := <-first
	if r.err != nil || r.p.Addr() != "b" {
		t.Fatalf("first waiter got %q, %v; want b", r.p.Addr(), r.err)
	}
	r.p.Done(nil)
}

// TestWaitAdaptiveLIFO: with LIFOAfter set, a returned permit wakes the
// oldest waiter while the queue is young and the newest once the oldest
// has waited LIFOAfter; without it the queue stays first come, first
// served.
func TestWaitAdaptiveLIFO(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lifo    time.Duration
		advance time.Duration // clock moved after both waiters queued
		want    int           // which waiter is woken
	}{
		{"fifo by default", 0, time.Hour, 0},
		{"young queue stays fifo", 100 * time.Millisecond, 99 * time.Millisecond, 0},
		{"standing queue goes lifo", 100 * time.Millisecond, 100 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now int64 = 1
			wq := &waitQueue{now: func() int64 { return now }}
			wq.after.Store(int64(tc.lifo))
			ws := []*waiter{wq.enqueue(), wq.enqueue()}
			now += int64(tc.advance)
			wq.wakeOne()
			for i, w := range ws {
				if w.signaled != (i == tc.want) {
					t.Fatalf("waiter %d signaled=%v, want waiter %d woken", i, w.signaled, tc.want)
				}
			}
			// The woken one finds no permit and goes back where it was:
			// the next wake-up picks it again.
			<-ws[tc.want].ch
			wq.requeue(ws[tc.want])
			wq.wakeOne()
			if !ws[tc.want].signaled {
				t.Fatalf("waiter %d lost its place after a wake-up without a permit", tc.want)
			}
		})
	}
}

// TestLIFOPatience: with LIFOAfter LIFOPatience the queue stays first
// come, first served, however long its oldest has waited, until a waiter
// gives up; then it serves the newest first once its oldest has waited
// half of what the waiters that gave up had waited.
func TestLIFOPatience(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := mustNew(t, "round_robin", Options{LIFOAfter: LIFOPatience, Clock: clk.Now}, Target{Addr: "a", Weight: 1, MaxConcurrency: 1})
	held := mustPick(t, b, "") // the impatient waiter below waits for its permit
	woken := func(ws ...*waiter) []bool {
		b.wq.mu.Lock()
		defer b.wq.mu.Unlock()
		var got []bool
		for _, w := range ws {
			got = append(got, w.signaled)
		}
		return got
	}
	wq := &b.wq
	// Nobody has given up: an hour-old queue is still served in order.
	old, young := wq.enqueue(), wq.enqueue()
	clk.ns.Add(int64(time.Hour))
	wq.wakeOne()
	if got := woken(old, young); !got[0] || got[1] {
		t.Fatalf("woken (oldest, newest) %v before anyone gave up, want the oldest", got)
	}
	wq.leave(young)

	// A waiter whose client leaves after 2 s: patience 2 s, the switch at 1 s.
	ctxGone, gone := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Wait(ctxGone, PickInfo{})
		errc <- err
	}()
	testenv.Eventually(t, "the impatient waiter to queue", func() bool { return wq.n.Load() == 1 })
	clk.ns.Add(int64(2 * time.Second))
	gone()
	if err := <-errc; !errors.Is(err, ErrAtCapacity) {
		t.Fatalf("the impatient waiter: %v, want ErrAtCapacity", err)
	}
	if got := wq.patience.Load(); got != int64(2*time.Second) {
		t.Fatalf("patience %v, want 2s", time.Duration(got))
	}
	first, second := wq.enqueue(), wq.enqueue()
	clk.ns.Add(int64(999 * time.Millisecond))
	wq.wakeOne()
	if got := woken(first, second); !got[0] || got[1] {
		t.Fatalf("woken (oldest, newest) %v at 999ms of 1s, want the oldest", got)
	}
	third := wq.enqueue()
	clk.ns.Add(int64(time.Millisecond)) // second has waited 1s
	wq.wakeOne()
	if got := woken(second, third); got[0] || !got[1] {
		t.Fatalf("woken (oldest, newest) %v at half the patience, want the newest", got)
	}
	held.Done(nil)
}

// TestWaitLostRaceKeepsPlace: a waiter woken for a permit that another
// pick took first goes back where it was, still counted from when it
// queued, and wakes nobody else. Before, it passed the wake-up on and
// queued again at the end as a new waiter, and so did each one it woke:
// a queue of 300 was served in no order, and adaptive LIFO never saw a
// waiter older than the last lost race.
func TestWaitLostRaceKeepsPlace(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := mustNew(t, "round_robin", Options{LIFOAfter: time.Hour, Clock: clk.Now}, Target{Addr: "a", Weight: 1, MaxConcurrency: 1})
	held := mustPick(t, b, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 3
	for i := range n {
		go func() {
			if p, err := b.Wait(ctx, PickInfo{}); err == nil {
				p.Done(nil)
			}
		}()
		testenv.Eventually(t, "the waiter to queue", func() bool { return b.wq.n.Load() == int32(i+1) })
		clk.ns.Add(int64(time.Millisecond))
	}
	queued := func() []*waiter {
		b.wq.mu.Lock()
		defer b.wq.mu.Unlock()
		return slices.Clone(b.wq.q)
	}
	before := queued()
	// Wake the oldest as a returned permit would, but keep the permit
	// taken: its pick fails, as when another pick got there first.
	b.wq.wakeOne()
	var after []*waiter
	testenv.Eventually(t, "the woken waiter to queue again", func() bool {
		after = queued()
		return len(after) == n
	})
	for i := range after {
		if after[i] != before[i] || after[i].signaled {
			t.Fatalf("queue after a lost race: waiter %d changed or woken (was %p queued at %d, now %p queued at %d)",
				i, before[i], before[i].at, after[i], after[i].at)
		}
	}
	held.Done(nil)
}

// twoFullTargets is a balancer over a and b, one permit each, both
// taken: pa holds a's, pb b's.
func twoFullTargets(t *testing.T) (b *Balancer, pa, pb Pick) {
	t.Helper()
	b = mustNew(t, "least_active", Options{}, Target{Addr: "a", Weight: 1, MaxConcurrency: 1}, Target{Addr: "b", Weight: 1, MaxConcurrency: 1})
	pa, pb = mustPick(t, b, ""), mustPick(t, b, "")
	if pa.Addr() == "b" {
		pa, pb = pb, pa
	}
	return b, pa, pb
}

// waited is a waiter's pick: "waiter I got ADDR", and the pick to end.
type waited struct {
	what string
	p    Pick
}

// waitInTurn queues a waiter per exclusion list, one after the other, and
// sends each one's pick when it gets one.
func waitInTurn(t *testing.T, ctx context.Context, b *Balancer, excludes ...[]*Endpoint) <-chan waited {
	t.Helper()
	got := make(chan waited, len(excludes))
	for i, ex := range excludes {
		go func() {
			p, err := b.Wait(ctx, PickInfo{Exclude: ex})
			if err == nil {
				got <- waited{fmt.Sprintf("waiter %d got %s", i, p.Addr()), p}
			}
		}()
		testenv.Eventually(t, "the waiter to queue", func() bool { return b.wq.n.Load() == int32(i+1) })
	}
	return got
}

// TestWaitPassesOnPastSeveralExcludingWaiters: a permit freed on a target
// that the first two waiters exclude reaches the third, which can use it.
// Passing the wake-up on and then queueing at the head again would bounce
// it between the first two.
func TestWaitPassesOnPastSeveralExcludingWaiters(t *testing.T) {
	b, pa, pb := twoFullTargets(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := waitInTurn(t, ctx, b, []*Endpoint{pa.Endpoint()}, []*Endpoint{pa.Endpoint()}, nil)
	pa.Done(nil) // a's permit: only the third waiter may take it
	select {
	case g := <-got:
		if g.what != "waiter 2 got a" {
			t.Fatalf("%s, want waiter 2 got a", g.what)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a's freed permit idled: the wake-up did not reach the waiter that could use it")
	}
	pb.Done(nil) // b's permit: one of the excluding waiters; then the other
	(<-got).p.Done(nil)
	<-got
}

// TestRetryKeepsItsPlaceAfterAPermitItCannotTake: a retry queued first,
// excluding a, is passed by when a's permit comes back, and takes the
// next permit it can use ahead of the waiters that came after it. It used
// to go to the back of the queue then: a refused request waited the whole
// queue again, the learner's tail on a standing queue.
func TestRetryKeepsItsPlaceAfterAPermitItCannotTake(t *testing.T) {
	b, pa, pb := twoFullTargets(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := waitInTurn(t, ctx, b, []*Endpoint{pa.Endpoint()}, nil, nil)
	pa.Done(nil) // a's permit: the retry may not take it, the next waiter does
	if g := <-got; g.what != "waiter 1 got a" {
		t.Fatalf("%s, want waiter 1 got a", g.what)
	}
	pb.Done(nil) // b's permit: the retry's, queued before waiter 2
	if g := <-got; g.what != "waiter 0 got b" {
		t.Fatalf("%s, want waiter 0 got b (the retry lost its place)", g.what)
	}
}

// TestSetLIFOAfterOnARunningBalancer: a reload that turns adaptive LIFO on
// keeps the balancer, so the queue must switch on the waiters it has,
// counting from when they queued.
func TestSetLIFOAfterOnARunningBalancer(t *testing.T) {
	clk := &capClock{}
	clk.ns.Store(1)
	b := mustNew(t, "round_robin", Options{Clock: clk.Now}, Target{Addr: "a", Weight: 1, MaxConcurrency: 1})
	ws := []*waiter{b.wq.enqueue(), b.wq.enqueue()}
	clk.ns.Add(int64(time.Second))
	b.SetLIFOAfter(100 * time.Millisecond)
	b.wq.wakeOne()
	if ws[0].signaled || !ws[1].signaled {
		t.Fatalf("woken: oldest %v, newest %v; want the newest once LIFO is set on a queue a second old", ws[0].signaled, ws[1].signaled)
	}
}

// TestWaitingRetryTakesATargetWhoseLimitRose: a retry queued with the
// target that refused it excluded may pick that target again once its
// configured limit rises (Update reopens it). Otherwise a target whose
// permits came back refills only from new requests while the retries
// wait for the others.
func TestWaitingRetryTakesATargetWhoseLimitRose(t *testing.T) {
	targets := []Target{{Addr: "a", Weight: 1, MaxConcurrency: 1}, {Addr: "s", Weight: 1, MaxConcurrency: 1}}
	b, err := New("least_active", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(targets); err != nil {
		t.Fatal(err)
	}
	var held []Pick
	var aEp *Endpoint
	for range 2 {
		p, err := b.Pick("")
		if err != nil {
			t.Fatal(err)
		}
		if p.Addr() == "a" {
			aEp = p.Endpoint()
		}
		held = append(held, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan Pick, 1)
	errc := make(chan error, 1)
	go func() {
		p, err := b.Wait(ctx, PickInfo{Exclude: []*Endpoint{aEp}})
		if err != nil {
			errc <- err
			return
		}
		got <- p
	}()
	testenv.Eventually(t, "the retry to queue", func() bool { return b.wq.n.Load() == 1 })
	targets[0].MaxConcurrency = 2
	if err := b.Update(targets); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p.Addr() != "a" {
			t.Fatalf("the retry got %s, want a (its limit rose)", p.Addr())
		}
		held = append(held, p)
	case err := <-errc:
		t.Fatalf("the retry excluding a was not served when a's limit rose: %v", err)
	}
	for _, p := range held {
		p.Done(nil)
	}
}

// TestFreedPermitReachesTheOneWaiterThatCanUseIt: many waiters exclude
// the target whose permit comes back and one does not; the wake-up must
// go round until it reaches that one, however the passing waiters
// interleave (a waiter woken while the one before it was still on its way
// back into the queue used to find itself alone and drop the wake-up).
func TestFreedPermitReachesTheOneWaiterThatCanUseIt(t *testing.T) {
	for round := 0; round < 100; round++ {
		b := mustNew(t, "least_active", Options{}, Target{Addr: "a", Weight: 1, MaxConcurrency: 1}, Target{Addr: "b", Weight: 1, MaxConcurrency: 1})
		pa, pb := mustPick(t, b, ""), mustPick(t, b, "")
		if pa.Addr() == "b" {
			pa, pb = pb, pa
		}
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan string, 16)
		const excluding = 8
		for i := 0; i <= excluding; i++ {
			var ex []*Endpoint
			if i < excluding {
				ex = []*Endpoint{pa.Endpoint()}
			}
			go func() {
				p, err := b.Wait(ctx, PickInfo{Exclude: ex})
				if err != nil {
					return
				}
				got <- fmt.Sprintf("waiter %d got %s", i, p.Addr())
			}()
			testenv.Eventually(t, "the waiter to queue", func() bool { return b.wq.n.Load() == int32(i+1) })
		}
		pa.Done(nil)
		select {
		case g := <-got:
			if g != fmt.Sprintf("waiter %d got a", excluding) {
				t.Fatalf("round %d: %s, want waiter %d got a", round, g, excluding)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a's freed permit idled while a waiter that could use it slept", round)
		}
		cancel()
		pb.Done(nil)
	}
}

// A waiter that came earlier than those queued (a retry: PickInfo.Arrived)
// goes where it would have been had it queued then, and a wake-up that
// finds no permit puts it back there: first come, first served by
// arrival, not by the last time a request joined the queue.
func TestWaitQueuePlacesByArrival(t *testing.T) {
	var now int64 = 100
	wq := &waitQueue{now: func() int64 { return now }}
	a := wq.enqueueAt(10, nil)
	b := wq.enqueueAt(30, nil)
	c := wq.enqueueAt(20, nil) // a retry whose request arrived between a and b
	d := wq.enqueue()          // now: last
	for i, want := range []*waiter{a, c, b, d} {
		wq.wakeOne()
		if !want.signaled {
			t.Fatalf("wake-up %d did not go to the waiter that arrived %d-th", i, i+1)
		}
		<-want.ch
		if want == c {
			// No permit after all: back to its place, ahead of b.
			wq.requeue(c)
			wq.wakeOne()
			if !c.signaled || b.signaled {
				t.Fatal("a requeued waiter lost its place by arrival")
			}
			<-c.ch
		}
	}
}
