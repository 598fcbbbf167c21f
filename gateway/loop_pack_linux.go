//go:build linux

package gateway

import (
	"math"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Packing: client connections live on as few event loops as the load
// needs. nginx's workers end up this way by accident of wake-ups (64
// connections opened at once land 59/5 on two workers); here it is a
// decision. Every loop a connection is spread onto is one more thread
// to wake, and on a machine the gateway shares (with its load
// generator, its targets, other services) each woken thread competes
// for the same cores: on two vCPUs shared with wrk and the upstreams,
// one active loop of two had a lower saturated p99 than both spread
// 32/32 (4 rounds of 5) and nginx (4 runs of 5), at 1.06-1.33x nginx's
// requests (docs/benchmarks.md, "What closed the p99"); spread, it
// served more requests with a longer tail. On cores of its own, one loop
// that is busy all the time makes its requests wait for each other, so
// the packer spreads as soon as the loops in use are busy.
//
// The packer samples the process's CPU time (getrusage) every
// packTick: the cores the gateway uses, smoothed. Above packGrow of a
// core per active loop it activates more loops at once (to packSpread
// each, and at least one more: a saturated loop hides how much more is
// needed, so a surge takes a few ticks of doubling); once the load would
// fit in fewer loops at packFit each, for packCalm ticks in a row, it
// deactivates the extra ones. New connections go to the active loop
// serving the fewest (place). Connections already open move, between
// two requests, from an inactive loop or from an active one serving
// more than its share: the source loop takes the socket out of its
// epoll set and the destination adds it (an edge-triggered add reports
// bytes that came in between), with its timer's deadline.
const (
	packTick   = 100 * time.Millisecond
	packGrow   = 0.75 // cores per active loop above which more loops are activated
	packSpread = 0.5  // cores per loop the growth aims at
	packFit    = 0.6  // cores per loop the load must fit in to deactivate loops
	packCalm   = 10   // ticks the smaller count must fit before deactivating
)

// nextActive is the packer's decision: from a active loops of n, the
// cores the gateway uses, and how many ticks in a row the load has fit
// in fewer loops (calm), the new active count and calm.
func nextActive(a, n int, cores float64, calm int) (int, int) {
	a = min(max(a, 1), n)
	if cores > packGrow*float64(a) {
		if a == n {
			return a, 0
		}
		want := int(math.Ceil(cores / packSpread))
		return min(n, max(a+1, want)), 0
	}
	fit := max(1, int(math.Ceil(cores/packFit)))
	if fit >= a {
		return a, 0
	}
	if calm+1 < packCalm {
		return a, calm + 1
	}
	return fit, 0
}

// packLoop runs the packer until stop is closed.
func (g *Gateway) packLoop(stop <-chan struct{}) {
	t := time.NewTicker(packTick)
	defer t.Stop()
	var (
		last   time.Duration
		lastAt time.Time
		cores  float64
		calm   int
	)
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			used, ok := processCPU()
			if !ok {
				continue
			}
			if !lastAt.IsZero() {
				// Smoothed over about two ticks: one collection or one
				// burst of handshakes is not a load.
				sample := float64(used-last) / float64(now.Sub(lastAt))
				cores = 0.5*cores + 0.5*sample
			}
			last, lastAt = used, now
			n := len(g.loops)
			a := int(g.activeLoops.Load())
			switch {
			case g.packFixed.Load() > 0:
				a = int(g.packFixed.Load())
			case !g.cfg().EventLoopPackOn():
				a, calm = n, 0
			default:
				a, calm = nextActive(a, n, cores, calm)
			}
			g.setActive(a)
		}
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// setActive makes the first a loops the active ones and moves
// connections so that each active loop serves its share: all of an
// inactive loop's, and what an active one serves beyond its share plus
// place's margin.
func (g *Gateway) setActive(a int) {
	n := len(g.loops)
	a = min(max(a, 1), n)
	g.activeLoops.Store(int32(a))
	if g.steered.Swap(int32(a)) != int32(a) {
		g.loops[0].post(func(l *evloop) { l.steer(a) })
	}
	counts := make([]int, n)
	total := 0
	for i, l := range g.loops {
		counts[i] = int(l.clients.Load())
		total += counts[i]
	}
	share := (total + a - 1) / a
	// Surpluses and deficits, paired greedily: a plan per source loop.
	need := make([]int, a)
	for i := range a {
		need[i] = max(0, share-counts[i])
	}
	for i, l := range g.loops {
		extra := counts[i]
		if i < a {
			if extra <= share+1 { // place's margin: no move for one or two
				continue
			}
			extra -= share
		}
		var plan []shed
		for j := 0; j < a && extra > 0; j++ {
			if j == i || need[j] == 0 {
				continue
			}
			k := min(extra, need[j])
			plan = append(plan, shed{to: g.loops[j], n: k})
			need[j] -= k
			extra -= k
		}
		if len(plan) > 0 {
			l.post(func(l *evloop) { l.shed(plan) })
		}
	}
}

// shed is part of a loop's move plan: n client connections to loop to.
type shed struct {
	to *evloop
	n  int
}

// shed marks client connections to move as plan says, replacing the
// marks of an earlier plan: a connection between requests moves now,
// one in the middle of a request when it is done (requestDone).
func (l *evloop) shed(plan []shed) {
	if l.draining {
		return
	}
	for _, c := range l.conns {
		if c != nil && !c.isTarget() {
			c.moveTo = nil
		}
	}
	p := 0
	for _, c := range l.conns {
		for p < len(plan) && plan[p].n == 0 {
			p++
		}
		if p == len(plan) {
			break
		}
		if c == nil || c.isTarget() || c.closed {
			continue
		}
		c.moveTo = plan[p].to
		plan[p].n--
		if c.state == csHead && c.r == c.w {
			l.move(c)
		}
	}
}

// leaving is a connection requestDone set aside for a move, as it was
// then (a gen moves on when it closes or moves).
type leaving struct {
	c   *lconn
	gen uint32
}

// moveLeaving moves the connections requestDone set aside. One that
// cannot go (its next request came in this wake-up, or its loop is no
// longer active) goes on where it is, as requestDone would have.
func (l *evloop) moveLeaving() {
	for i, lv := range l.leaving {
		l.leaving[i] = leaving{}
		c := lv.c
		if c.gen != lv.gen || c.closed || l.move(c) {
			continue
		}
		if c.state == csHead && c.canRead() {
			l.readClient(c)
		}
	}
	l.leaving = l.leaving[:0]
}

// movable reports whether c is between requests with nothing of its
// own in flight: no bytes read and unserved, none to write, no
// plaintext crypto/tls holds, and no goroutine (a queue wait, a dial)
// that will post a result for it to this loop.
func (c *lconn) movable() bool {
	return !c.closed && c.state == csHead && c.r == c.w && c.peer == nil &&
		!c.outPending() && !c.tlsMore && c.inflight == 0
}

// move gives c to the loop it is marked for, if it can go now and that
// loop is still active; true if it went. The mark is used up either
// way: a connection that stays is marked again by the next plan.
func (l *evloop) move(c *lconn) bool {
	t := c.moveTo
	c.moveTo = nil
	if t == nil || t == l || l.draining || !c.movable() || t.idx >= int(l.g.activeLoops.Load()) {
		return false
	}
	kind := c.tkind
	due, armed := l.timers.Deadline(c)
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil); err != nil {
		return false
	}
	l.dropTimer(c)
	l.conns[c.fd] = nil
	c.gen++
	l.clients.Add(-1)
	t.clients.Add(1)
	l.g.loopMoves.Add(1)
	if !armed {
		kind = tmNone
	}
	if !t.post(func(t *evloop) { t.arrive(c, kind, due) }) {
		// t has ended: so has the gateway.
		t.clients.Add(-1)
		_ = unix.Close(c.fd)
		l.g.loopConns.Add(-1)
		l.g.connWG.Done()
	}
	return true
}

// arrive serves a connection another loop moved here, under the timer
// it had there.
func (l *evloop) arrive(c *lconn, kind uint8, due time.Time) {
	c.l = l
	if l.draining || l.g.draining.Load() || l.register(c) != nil {
		l.closeClient(c) // counted here since move: uncounted here
		return
	}
	if kind != tmNone {
		l.arm(c, kind, due)
	}
}

// steer has the kernel give each new connection to the listening socket
// of one of the first a loops, at random: a classic BPF program on the
// SO_REUSEPORT group, whose sockets are numbered in the order they
// listened, the loops' order. Without it a connection hashed to an
// inactive loop's socket costs a hand-over to an active one (a post and
// a wake-up of both loops): with Connection: close, a gateway packed on
// one loop of two served 10-20 % fewer requests than spread. A kernel
// that refuses the program leaves the hash, and place still hands
// connections over.
func (l *evloop) steer(a int) {
	if l.lfd < 0 {
		return // TLS: the loops have no listener
	}
	raw, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtRand},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(a)},
		bpf.RetA{},
	})
	if err != nil {
		return
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	if err := unix.SetsockoptSockFprog(l.lfd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		l.g.log.Debug("event loop: steering new connections", "err", err)
	}
}
