//go:build linux

package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// fourLoopGateway starts a gateway with four event loops, on any
// machine, config head followed by one upstream at addr; it skips when
// the loops are off.
func fourLoopGateway(t *testing.T, head, addr string) *Gateway {
	t.Helper()
	prev := runtime.GOMAXPROCS(4)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	g := startTestGateway(t, head+"upstreams:\n  api:\n    targets: [{url: \"http://"+addr+"\"}]\n")
	if len(g.loops) < 2 {
		t.Skip("the event loop is off (FULCRUM_GATEWAY_EVENT_LOOP=off or not configured)")
	}
	return g
}

// fixActive makes the first n loops the active ones, as the packer
// would, and keeps it so.
func fixActive(g *Gateway, n int) {
	g.packFixed.Store(int32(n))
	g.setActive(n)
}

// syncLoops returns once every loop has run what was posted to it
// before: posts run in order.
func syncLoops(t *testing.T, g *Gateway) {
	t.Helper()
	for _, l := range g.loops {
		done := make(chan struct{})
		if !l.post(func(*evloop) { close(done) }) {
			t.Fatal("a loop has ended")
		}
		<-done
	}
}

// loopCounts is how many client connections each loop serves.
func loopCounts(g *Gateway) []int32 {
	var out []int32
	for _, l := range g.loops {
		out = append(out, l.clients.Load())
	}
	return out
}

// keepAliveGet sends a GET on c and reads the whole response.
func keepAliveGet(t *testing.T, c net.Conn, br *bufio.Reader, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
	}
}

// With every loop active, keep-alive connections are spread evenly over
// them, however the kernel's SO_REUSEPORT hash lands them (it put 38
// and 26 of 64 on two loops), and a loop's count falls back to zero as
// they close.
func TestLoopsShareConnectionsEvenly(t *testing.T) {
	up, _ := bigServer(t)
	g := fourLoopGateway(t, "", up)
	fixActive(g, len(g.loops))
	spread := func() (lo, hi int32) {
		lo, hi = 1<<30, -1
		for _, n := range loopCounts(g) {
			lo, hi = min(lo, n), max(hi, n)
		}
		return lo, hi
	}
	var conns []net.Conn
	for i := range 40 {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		keepAliveGet(t, c, bufio.NewReader(c), "/")
		// Each answered connection is counted on its loop before the
		// next one is made, so the spread is checked at every size.
		if lo, hi := spread(); hi-lo > 2 {
			t.Fatalf("after %d connections the loops serve %d to %d: want at most 2 apart", i+1, lo, hi)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	testenv.Eventually(t, "every loop's count back to zero", func() bool { lo, hi := spread(); return lo == 0 && hi == 0 })
}

// Packing: when fewer loops are active, connections move to them
// between requests, idle ones at once and busy ones once their response
// is out, and keep serving; with more active, they spread out again.
// No request fails and no byte is lost across a move.
func TestLoopsPackMovesConnections(t *testing.T) {
	gate := make(chan struct{})
	var held atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			held.Add(1)
			<-gate
		}
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	g := fourLoopGateway(t, "", ln.Addr().String())
	n := len(g.loops)
	fixActive(g, n)
	const conns = 24
	cs := make([]net.Conn, conns)
	brs := make([]*bufio.Reader, conns)
	for i := range cs {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		cs[i], brs[i] = c, bufio.NewReader(c)
		keepAliveGet(t, c, brs[i], "/")
	}
	onFirst := func() bool {
		got := loopCounts(g)
		if got[0] != conns {
			return false
		}
		for _, k := range got[1:] {
			if k != 0 {
				return false
			}
		}
		return true
	}
	// Idle connections move at once.
	fixActive(g, 1)
	testenv.Eventually(t, "every connection on the first loop", onFirst)
	for i, c := range cs {
		keepAliveGet(t, c, brs[i], "/")
	}
	// Spread again, then pack while every connection waits for its
	// response: none moves until its response is out.
	fixActive(g, n)
	testenv.Eventually(t, "connections spread over every loop", func() bool {
		for _, k := range loopCounts(g) {
			if k < conns/int32(n)-1 {
				return false
			}
		}
		return true
	})
	for _, c := range cs {
		if _, err := io.WriteString(c, "GET /held HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "every request at the target", func() bool { return held.Load() == conns })
	moved := g.loopMoves.Load()
	fixActive(g, 1)
	syncLoops(t, g) // the loops have taken their move plans
	if onFirst() {
		t.Fatal("busy connections moved before their responses were out")
	}
	close(gate)
	for i := range cs {
		res, err := http.ReadResponse(brs[i], nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("connection %d: %d %q", i, res.StatusCode, body)
		}
	}
	testenv.Eventually(t, "every connection on the first loop after its response", onFirst)
	if g.loopMoves.Load() == moved {
		t.Error("no connection counted as moved")
	}
	for i, c := range cs {
		keepAliveGet(t, c, brs[i], "/")
	}
}

// Packed on one loop, new connections are steered by the kernel to that
// loop's listening socket: none lands on an inactive loop to be handed
// over.
func TestPackedListenersSteerNewConnections(t *testing.T) {
	up, _ := bigServer(t)
	g := fourLoopGateway(t, "", up)
	fixActive(g, 1)
	syncLoops(t, g) // the steering program is attached
	accepts := func() []int {
		out := make([]int, len(g.loops))
		for i, l := range g.loops {
			done := make(chan struct{})
			l.post(func(l *evloop) { out[i] = l.accepts; close(done) })
			<-done
		}
		return out
	}
	before := accepts()
	for range 40 {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		keepAliveGet(t, c, bufio.NewReader(c), "/")
		c.Close()
	}
	after := accepts()
	if got := after[0] - before[0]; got != 40 {
		t.Errorf("the active loop's listener took %d of 40 connections (every loop: %v then %v)", got, before, after)
	}
}

// event_loop_pack: false, applied by a reload, makes every loop active:
// only the packer reads it (on two CPUs the gateway's own CPU cannot
// activate all four loops).
func TestPackerFollowsConfig(t *testing.T) {
	up, _ := bigServer(t)
	g := fourLoopGateway(t, "", up)
	off := "event_loop_pack: false\nupstreams:\n  api:\n    targets: [{url: \"http://" + up + "\"}]\n"
	if err := g.ApplyConfig(testConfig(t, off)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "every loop active with event_loop_pack: false", func() bool { return g.loopsActive() == len(g.loops) })
}

// The packer's decision: more loops as soon as the active ones are busy
// (several at once: a saturated loop hides how much is needed), fewer
// only after the load has fit in fewer for packCalm ticks.
func TestNextActive(t *testing.T) {
	for _, tc := range []struct {
		a, n  int
		cores float64
		calm  int
		wantA int
		wantC int
	}{
		{1, 2, 0.64, 0, 1, 0},            // a shared 2-core box: one loop at 0.64 of a core stays one
		{1, 2, 0.9, 0, 2, 0},             // busy: spread
		{1, 16, 1.0, 0, 2, 0},            // one saturated loop: at least one more
		{2, 16, 2.0, 0, 4, 0},            // two saturated: aim at half a core each
		{4, 16, 3.9, 0, 8, 0},            // doubling until the load shows
		{16, 16, 15, 0, 16, 0},           // all active: nothing more to add
		{8, 16, 1.0, 0, 8, 1},            // fits in two: wait
		{8, 16, 1.0, packCalm - 1, 2, 0}, // calm long enough: pack to what fits at packFit each
		{2, 2, 0.2, packCalm - 1, 1, 0},
		{2, 2, 1.3, 5, 2, 0}, // does not fit in one: calm resets
		{0, 4, 0, 0, 1, 0},   // never below one
	} {
		a, c := nextActive(tc.a, tc.n, tc.cores, tc.calm)
		if a != tc.wantA || c != tc.wantC {
			t.Errorf("nextActive(%d, %d, %.2f, %d) = %d, %d; want %d, %d", tc.a, tc.n, tc.cores, tc.calm, a, c, tc.wantA, tc.wantC)
		}
	}
}

// A connection the loop cannot register in epoll (here: the fd is there
// already, EEXIST) is closed and uncounted, and leaves no slot behind:
// a stale slot was closed again at Shutdown, another connection's fd by
// then, and counted connWG down twice (a panic).
func TestRegisterFailureLeavesNoSlot(t *testing.T) {
	g := startTestGateway(t, "upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\n")
	if len(g.loops) == 0 {
		t.Skip("the event loop is off (FULCRUM_GATEWAY_EVENT_LOOP=off or not configured)")
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[1])
	got := make(chan string, 1)
	l := g.loops[0]
	before := l.clients.Load()
	posted := l.post(func(l *evloop) {
		fd := pair[0]
		if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			got <- "setup: " + err.Error()
			return
		}
		l.clients.Add(1)
		l.g.connWG.Add(1)
		switch {
		case l.admit(l.newConn(fd, 4096), true):
			got <- "admitted a connection epoll refused"
		case fd < len(l.conns) && l.conns[fd] != nil:
			got <- "a slot still points at the freed connection"
		default:
			got <- ""
		}
	})
	if !posted {
		t.Fatal("the loop has ended")
	}
	if msg := <-got; msg != "" {
		t.Fatal(msg)
	}
	if n := l.clients.Load(); n != before {
		t.Errorf("the loop counts %d clients, want %d", n, before)
	}
	// The fd was closed: the socket's peer reads EOF.
	var b [1]byte
	_ = unix.SetNonblock(pair[1], false)
	if n, err := unix.Read(pair[1], b[:]); n != 0 || err != nil {
		t.Errorf("peer read %d, %v: want EOF (the refused fd closed)", n, err)
	}
}
