//go:build linux

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
	"github.com/fulcrum-lb/fulcrum/internal/wheel"
)

// The event loop: the cleartext HTTP/1.1 listener on Linux, one loop per
// core (GOMAXPROCS), each a goroutine with its own epoll fd and its own
// SO_REUSEPORT socket, as nginx's workers are (an idle loop parks in Go's
// netpoller on its epoll fd: loopWait). A request's client
// connection and the target connection serving it live on the same
// loop, and every socket is registered once, edge-triggered, for reading
// and writing: per request one client read, one target write, one
// target read and one client write, plus the epoll_wait calls they
// share, and no goroutine switch.
//
// The loop is the goroutine path's request path driven by events: the
// same parser (internal/h1), routing (route.go), head building
// (parse.go), attempt steps (attempt.go: begin, resolve, judge, retried,
// finish), response head and local answers (relay.go) and access log
// (log.go). What it does not serve it hands over, before answering, to
// the goroutine path with the bytes it has read (handOffLoop): TLS,
// HTTP/2, upgrades, HTTP/1.0, chunked and Expect uploads, bodies over
// retry.buffer_body, refused heads (they need a lingering close), https
// targets. A wait in the capacity queue runs on a goroutine (the
// balancer's queue is shared by every loop and the goroutine path, so a
// freed permit wakes a waiter wherever it is) and posts its pick back.
// Timeouts come from a timer wheel per loop (internal/wheel, the supervisor's).

// Client connection states.
const (
	csHead     = iota // waiting for, or reading, a request head
	csBody            // reading a request body into cc.body
	csWait            // in the capacity queue, on a goroutine
	csDial            // a target connection is being dialed, on a goroutine
	csExchange        // the request is going to a target, its response head is awaited
	csRelay           // the response body is coming from the target
	csFlush           // the target is done; what is left goes to the client
)

// Timer kinds: what a client connection's one timer bounds now.
const (
	tmNone     = iota
	tmIdle     // keep-alive idle, or read_header before a new connection's first byte
	tmHead     // read_header for a head being received
	tmBody     // timeouts.idle between bytes of a request body
	tmRespHead // timeouts.response_header
	tmSend     // timeouts.send: the client takes no byte
)

type evloop struct {
	g      *Gateway
	idx    int // its place in g.loops: the first activeLoops are active (loop_pack_linux.go)
	ep     int
	lfd    int
	efd    int // eventfd: post wakes the loop
	conns  []*lconn
	nextID int32
	events [128]unix.EpollEvent
	now    time.Time            // read once per wake-up
	timers *wheel.Wheel[*lconn] // one timer per connection (internal/wheel, as the supervisor's)
	nowAt  time.Duration        // l.now as an offset from the wheel's start (armIn)
	fireFn func(*lconn)
	idle   map[*pool]*[]*lconn // keep-alive target connections, this loop's own (a pointer: a take or put is one lookup, no map write)
	free   []*lconn
	sweep  time.Time

	accepts int // connections this loop's listener took (a test reads it: steering)

	// leaving: connections done with a request that the packer moves
	// to another loop after this wake-up's events (loop_pack_linux.go).
	leaving []leaving

	// clients counts the client connections this loop serves, or was
	// handed and has not registered yet: place reads it from every loop.
	clients atomic.Int32

	mu    sync.Mutex
	inbox []func(*evloop)
	run   []func(*evloop)

	draining bool
	exit     bool
	pollFile *os.File // the epoll fd's duplicate Go's netpoller watches (netpoll wait)
	done     chan struct{}
}

// lconn is one socket on a loop: a client connection, or a target
// connection (up set).
type lconn struct {
	l      *evloop
	fd     int
	id     int32
	gen    uint32 // bumped when the connection ends or hands off: a posted result for an older one is stale
	closed bool
	in     []byte
	r, w   int
	// scanned: how much of an unfinished head at in[r:] has been searched
	// for its end, so a head arriving in many reads is scanned once in
	// all, not once per read (a client trickling a byte at a time would
	// otherwise cost each read a scan of everything before it).
	scanned int
	// readable: the last read filled the buffer, or an event came since
	// the last short read; a short read means the socket is drained, so
	// a request costs no EAGAIN read (nginx's ready flag).
	readable bool
	writable bool

	// The connection's one timer in its loop's wheel: what it bounds now
	// (tmNone: none), and its handle for a reset without a key lookup.
	tkind uint8
	th    wheel.Handle

	// Packing (loop_pack_linux.go): the loop this connection moves to
	// once it is between requests, and how many goroutines (a queue
	// wait, a dial) will post a result for it to this loop: while any
	// will, it stays.
	moveTo   *evloop
	inflight uint16

	// A client connection.
	cc          *clientConn
	bw          *bufio.Writer // into q: response heads
	q           outq
	state       uint8
	peer        *lconn // the target connection of the exchange in flight
	closeAfter  bool   // close once q is out
	rq          request
	a           attempt
	line        accessLine
	res         result
	up          *upstream
	stream      bool // buffering.stream_paths matched
	clientClose bool
	retrying    bool // the queue wait is a retry's
	redialed    bool // a stale keep-alive connection was replaced once
	reqBytes    []byte
	cancel      context.CancelFunc
	dropFn      func(*target)
	// The response being relayed.
	mode   uint8 // bodyNone, bodyLength, bodyChunked, bodyEOF
	remain int64
	scan   h1.ChunkScan
	upKeep bool

	// A client connection over TLS, adopted after its handshake
	// (loop_tls_linux.go): its reads and writes go through tc.
	tc      *tls.Conn
	tio     *tlsIO
	tlsMore bool // tc may hold plaintext not read yet

	// A target connection.
	pool      *pool
	wrote     bool // a byte of the request reached the kernel
	reused    bool
	idleSince time.Time
	out       []byte // request bytes the socket did not take yet
}

const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyEOF
)

const evMask = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET

// loopServes reports whether the gateway's listener runs on event loops:
// Linux, cleartext, and event_loop not turned off (the config, or
// FULCRUM_GATEWAY_EVENT_LOOP=off for a whole test run).
func (g *Gateway) loopServes() bool {
	return g.tlsConf == nil && g.loopOn()
}

// loopOn reports whether event loops serve at all: over TLS they take
// connections after their handshake (loop_tls_linux.go).
func (g *Gateway) loopOn() bool {
	return g.cfg().EventLoopOn() && os.Getenv("FULCRUM_GATEWAY_EVENT_LOOP") != "off"
}

// startTLSLoops starts one loop per core without a listener, for TLS
// connections to be adopted after their handshake.
func (g *Gateway) startTLSLoops() error {
	if g.tlsConf == nil || !g.loopOn() {
		return nil
	}
	for range max(runtime.GOMAXPROCS(0), 1) {
		l, err := newEvloop(g, 0, nil)
		if err != nil {
			g.closeLoops()
			return err
		}
		l.idx = len(g.loops)
		g.loops = append(g.loops, l)
	}
	return nil
}

// listenLoops binds one SO_REUSEPORT socket per loop on addr and starts
// the loops; it returns the bound address.
func (g *Gateway) listenLoops(addr string) (net.Addr, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	var sa unix.Sockaddr
	family := unix.AF_INET6
	if ip4 := ta.IP.To4(); ip4 != nil {
		family = unix.AF_INET
		s := &unix.SockaddrInet4{Port: ta.Port}
		copy(s.Addr[:], ip4)
		sa = s
	} else {
		s := &unix.SockaddrInet6{Port: ta.Port}
		copy(s.Addr[:], ta.IP.To16()) // nil IP: [::], both families
		sa = s
	}
	if ta.Port != 0 {
		// A plain bind first: with SO_REUSEPORT a second gateway on the
		// same port would share it silently instead of failing.
		probe, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		probe.Close()
	}
	n := max(runtime.GOMAXPROCS(0), 1)
	for i := range n {
		l, err := newEvloop(g, family, sa)
		if err != nil {
			g.closeLoops()
			return nil, err
		}
		if i == 0 {
			got, err := unix.Getsockname(l.lfd)
			if err != nil {
				l.closeFDs()
				return nil, err
			}
			sa = got
		}
		l.idx = len(g.loops)
		g.loops = append(g.loops, l)
	}
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(s.Addr[:]).To4(), Port: s.Port}, nil
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(s.Addr[:]), Port: s.Port}, nil
	}
	return nil, fmt.Errorf("listen: unexpected address %T", sa)
}

func newEvloop(g *Gateway, family int, sa unix.Sockaddr) (*evloop, error) {
	l := &evloop{g: g, lfd: -1, ep: -1, efd: -1, conns: make([]*lconn, 256), idle: map[*pool]*[]*lconn{}, done: make(chan struct{})}
	fail := func(err error) (*evloop, error) {
		l.closeFDs()
		return nil, fmt.Errorf("listen: %w", err)
	}
	var err error
	if sa == nil {
		return l.startPoll() // no listener: connections come by adopt
	}
	if l.lfd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		return fail(err)
	}
	_ = unix.SetsockoptInt(l.lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.SetsockoptInt(l.lfd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return fail(err)
	}
	if family == unix.AF_INET6 {
		_ = unix.SetsockoptInt(l.lfd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err := unix.Bind(l.lfd, sa); err != nil {
		return fail(err)
	}
	if err := unix.Listen(l.lfd, 4096); err != nil {
		return fail(err)
	}
	if _, err := l.startPoll(); err != nil {
		return nil, err
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.lfd)}); err != nil {
		return fail(err)
	}
	return l, nil
}

// startPoll makes the loop's epoll instance, its eventfd and its timers.
func (l *evloop) startPoll() (*evloop, error) {
	fail := func(err error) (*evloop, error) {
		l.closeFDs()
		return nil, fmt.Errorf("listen: %w", err)
	}
	var err error
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail(err)
	}
	if l.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail(err)
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.efd)}); err != nil {
		return fail(err)
	}
	l.now = time.Now()
	if l.timers, err = wheel.New[*lconn](loopTick, 1024, l.now); err != nil {
		return fail(err)
	}
	l.nowAt = l.timers.Since(l.now)
	l.fireFn = func(c *lconn) {
		kind := c.tkind
		c.tkind, c.th = tmNone, wheel.Handle{}
		if kind != tmNone && !c.closed {
			l.fire(c, kind)
		}
	}
	l.sweep = l.now
	return l, nil
}

func (l *evloop) closeFDs() {
	// The eventfd under mu: post writes to it from other goroutines, and
	// must never write to a closed (or reused) descriptor.
	l.mu.Lock()
	efd := l.efd
	l.efd = -1
	l.mu.Unlock()
	for _, fd := range []int{l.lfd, l.ep, efd} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	l.lfd, l.ep = -1, -1
	if l.pollFile != nil {
		l.pollFile.Close()
		l.pollFile = nil
	}
}

// post runs fn on the loop, from any goroutine; false when the loop has
// ended and fn will never run (the caller frees what fn would have).
func (l *evloop) post(fn func(*evloop)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.efd < 0 {
		return false
	}
	l.inbox = append(l.inbox, fn)
	var one = [8]byte{1}
	_, _ = unix.Write(l.efd, one[:])
	return true
}

// loop is the loop's thread: wait for events or the next timer, handle
// them, fire the timers due.
func (l *evloop) loop() {
	defer close(l.done)
	wait := l.blockingWait
	if loopWait != "block" {
		var err error
		if wait, err = l.parkingWait(); err != nil {
			l.g.log.Error("event loop: netpoll wait", "err", err)
			return
		}
	} else {
		runtime.LockOSThread() // the loop is a thread, as nginx's worker is a process
	}
	for !l.exit {
		n, err := wait()
		l.now = time.Now()
		l.nowAt = l.timers.Since(l.now)
		if err != nil && !errors.Is(err, unix.EINTR) {
			l.g.log.Error("event loop: epoll_wait", "err", err)
			return
		}
		for i := range max(n, 0) {
			ev := &l.events[i]
			fd := int(ev.Fd)
			switch fd {
			case l.lfd:
				l.accept()
				continue
			case l.efd:
				l.drainInbox()
				continue
			}
			c := l.conns[fd]
			if c == nil || c.id != ev.Pad {
				continue // an event for a connection closed earlier in this batch
			}
			l.event(c, ev.Events)
		}
		l.timers.Advance(l.now, l.fireFn)
		if len(l.leaving) > 0 {
			l.moveLeaving()
		}
		if l.now.Sub(l.sweep) > time.Second {
			l.sweepIdle()
		}
	}
	l.shutdown()
}

// loopWait is how an idle loop waits (FULCRUM_GATEWAY_LOOP_WAIT). By
// default it parks the loop's goroutine in Go's own netpoller on the
// epoll fd and polls it without blocking when woken: no thread sits in a
// blocking syscall for the runtime to take its P from, and it measured
// 7 % less CPU and a quarter fewer context switches per request than
// "block" (docs/notes/benchmarks-log.md, 21:45 UTC), which blocks a locked
// thread in epoll_wait as C loops do.
var loopWait = os.Getenv("FULCRUM_GATEWAY_LOOP_WAIT")

func (l *evloop) blockingWait() (int, error) {
	return unix.EpollWait(l.ep, l.events[:], l.timeout())
}

// parkingWait returns a wait that polls the epoll fd without blocking
// and, with nothing ready, parks in Go's netpoller until it is readable
// or the next timer is due (the file's read deadline).
func (l *evloop) parkingWait() (func() (int, error), error) {
	if err := unix.SetNonblock(l.ep, true); err != nil {
		return nil, err
	}
	dup, err := unix.FcntlInt(uintptr(l.ep), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "epoll") // a duplicate: closeFDs closes l.ep, this closes f's
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var n int
	var perr error
	poll := func(fd uintptr) bool {
		n, perr = rawPoll(int(fd), l.events[:])
		return n > 0 || (perr != nil && !errors.Is(perr, unix.EINTR))
	}
	l.pollFile = f
	var set time.Time
	return func() (int, error) {
		// rc.Read polls once before it parks: a busy loop takes its
		// events there, with one epoll_wait and no park (a poll of its
		// own first measured 0.72 epoll_waits per request, against
		// 0.42 without).
		ms := l.timeout()
		if ms == 0 {
			return rawPoll(l.ep, l.events[:]) // a timer is due: no park, no deadline
		}
		due := time.Time{}
		if ms > 0 {
			due = l.now.Add(time.Duration(ms) * time.Millisecond)
		}
		if !due.Equal(set) {
			_ = f.SetReadDeadline(due)
			set = due
		}
		if err := rc.Read(poll); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return 0, nil
			}
			return 0, err
		}
		return n, perr
	}, nil
}

func (l *evloop) drainInbox() {
	var b [8]byte
	_, _ = unix.Read(l.efd, b[:])
	l.mu.Lock()
	l.run, l.inbox = l.inbox, l.run[:0]
	l.mu.Unlock()
	for i, fn := range l.run {
		fn(l)
		l.run[i] = nil
	}
}

func (l *evloop) event(c *lconn, ev uint32) {
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.readable = true
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		c.writable = true
	}
	if c.isTarget() {
		if c.writable && len(c.out) > 0 {
			l.sendUp(c)
		}
		if !c.closed && c.readable {
			l.readUp(c)
		}
		return
	}
	if c.writable && (c.outPending() || c.state == csRelay) {
		l.drive(c)
	}
	if c.closed {
		return
	}
	if c.canRead() {
		switch c.state {
		case csHead, csBody:
			l.readClient(c)
		case csWait, csDial, csExchange:
			// The client may have left while its request waits: the
			// queue's wait, the dial or the wait for the target's answer
			// ends with it, as net/http's request context does on the
			// goroutine path (and nginx's check for a broken client
			// connection). Awaiting the answer, the request held a permit
			// of its target until the target answered or
			// timeouts.response_header (30 s) ended it: against a target
			// that accepts and never answers, every client that gave up
			// left a permit taken, and a learned limit grew over them.
			if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				l.closeClient(c)
			}
		}
	}
}

// accept takes every connection the backlog holds, and places each on
// the loop that serves the fewest (place).
func (l *evloop) accept() {
	for {
		fd, sa, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				l.g.log.Warn("accept", "err", err)
			}
			return // EAGAIN: the backlog is empty
		}
		l.accepts++
		t := l.g.place(l)
		if t == l {
			l.accepted(fd, sa)
			continue
		}
		if !t.post(func(t *evloop) { t.accepted(fd, sa) }) {
			t.clients.Add(-1)
			_ = unix.Close(fd) // the loop is gone: so is the gateway
		}
	}
}

// place picks the loop for a new client connection and counts it there:
// of the active loops (loop_pack_linux.go), the one serving the fewest,
// l (the accepting loop) if it is active, unless another serves at
// least two fewer. SO_REUSEPORT spreads connections by a hash of their
// addresses, so 64 keep-alive connections landed 38 and 26 on two
// loops, and the busier loop's requests waited longer (the p99) while
// the other had time to spare; HAProxy likewise hands an accepted
// connection to its least loaded thread. The margin keeps a loop's own
// connections local while the counts are near even, which is the usual
// case under churn: a move costs a post to the other loop. With l nil
// (a TLS connection after its handshake) it is the one serving the
// fewest.
func (g *Gateway) place(l *evloop) *evloop {
	active := g.loops[:min(max(int(g.activeLoops.Load()), 1), len(g.loops))]
	best, bn := active[0], int32(math.MaxInt32)
	if l != nil && l.idx < len(active) {
		best, bn = l, l.clients.Load()-1
	}
	for _, o := range active {
		if m := o.clients.Load(); m < bn {
			best, bn = o, m
		}
	}
	best.clients.Add(1)
	return best
}

// accepted serves a connection accept took, counted in l.clients.
func (l *evloop) accepted(fd int, sa unix.Sockaddr) {
	cfg := l.g.cfg()
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	c := l.newConn(fd, int(cfg.MaxHeaderSize))
	cc := c.cc
	cc.ip = cc.ip[:0]
	cc.ipStr = ""
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		cc.ip = netip.AddrFrom4(a.Addr).AppendTo(cc.ip)
	case *unix.SockaddrInet6:
		cc.ip = netip.AddrFrom16(a.Addr).Unmap().AppendTo(cc.ip)
	}
	c.q.reset(cfg)
	// Counted under connMu, as newClientConn does: Shutdown takes it
	// after it sets draining, so no Add comes after its Wait began.
	l.g.connMu.Lock()
	if l.g.draining.Load() || l.draining {
		l.g.connMu.Unlock()
		_ = unix.Close(fd)
		l.clients.Add(-1)
		l.freeConn(c)
		return
	}
	l.g.connWG.Add(1)
	l.g.connMu.Unlock()
	l.admit(c, true)
}

// admit starts serving a new client connection, counted in l.clients and
// in connWG: registered, waiting for its first head within read_header.
// With ok false, or when it cannot be registered, it is closed and
// uncounted instead; admit reports which.
func (l *evloop) admit(c *lconn, ok bool) bool {
	if !ok || l.register(c) != nil {
		_ = unix.Close(c.fd)
		l.clients.Add(-1)
		l.g.connWG.Done()
		l.freeConn(c)
		return false
	}
	l.g.loopConns.Add(1)
	c.state = csHead
	l.armIn(c, tmIdle, l.g.cfg().Timeouts.ReadHeader.D())
	return true
}

func (l *evloop) newConn(fd, inSize int) *lconn {
	var c *lconn
	if n := len(l.free); n > 0 {
		c = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		c = &lconn{l: l}
		c.cc = &clientConn{g: l.g}
		c.bw = bufio.NewWriterSize(&c.q, 4<<10)
		c.dropFn = func(*target) { c.l.dropResponse(c) } // c.l: a connection may move
	}
	if cap(c.in) < inSize {
		c.in = make([]byte, inSize)
	}
	c.in = c.in[:inSize]
	c.fd, c.r, c.w, c.closed, c.readable, c.writable = fd, 0, 0, false, false, true
	c.scanned = 0
	c.closeAfter, c.peer = false, nil
	c.tc, c.tio, c.tlsMore, c.cc.tls = nil, nil, false, false
	return c
}

// canRead reports whether reading c may bring bytes: the socket had
// some since the last short read, or TLS holds plaintext not read yet.
func (c *lconn) canRead() bool { return c.readable || c.tlsMore }

// outPending reports whether response bytes wait for the client: in
// the queue, or encrypted and not written yet.
func (c *lconn) outPending() bool {
	return c.q.pending() || (c.tio != nil && c.tio.wr < len(c.tio.wire))
}

// isTarget reports whether c is a target connection (it belongs to a
// target's pool) rather than a client's.
func (c *lconn) isTarget() bool { return c.pool != nil }

// freeConn keeps a closed client connection's buffers for the next one.
func (l *evloop) freeConn(c *lconn) {
	c.moveTo = nil
	c.cc.lc, c.cc.rte, c.cc.up = nil, nil, nil
	c.tc, c.tio, c.tlsMore = nil, nil, false // a TLS connection's buffers go with it
	c.up, c.line, c.res, c.a, c.rq = nil, accessLine{}, result{}, attempt{}, request{}
	if cap(c.cc.body) > 1<<20 {
		c.cc.body = nil
	}
	if len(l.free) < 1024 {
		l.free = append(l.free, c)
	}
}

func (l *evloop) register(c *lconn) error {
	l.nextID++
	c.id = l.nextID
	for c.fd >= len(l.conns) {
		l.conns = append(l.conns, make([]*lconn, len(l.conns))...)
	}
	l.conns[c.fd] = c
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: evMask, Fd: int32(c.fd), Pad: c.id}); err != nil {
		// The caller closes the fd and frees c: a slot left pointing at
		// it would be closed again at drain (another connection's fd by
		// then, and connWG counted down twice).
		l.conns[c.fd] = nil
		return err
	}
	return nil
}

func (l *evloop) unregister(c *lconn) {
	l.dropTimer(c)
	if c.fd >= 0 && c.fd < len(l.conns) && l.conns[c.fd] == c {
		l.conns[c.fd] = nil
	}
	c.closed = true
	c.gen++
}

// readClient reads what the client sent while the socket has bytes and
// the connection is reading a request.
func (l *evloop) readClient(c *lconn) {
	if c.tc != nil {
		l.readTLS(c)
		return
	}
	for c.readable && !c.closed && (c.state == csHead || c.state == csBody) {
		if !l.makeRoom(c) {
			if c.w == len(c.in) && c.r == 0 {
				return
			}
			continue
		}
		room := len(c.in) - c.w
		n, err := rawRead(c.fd, c.in[c.w:])
		switch {
		case n > 0:
			c.w += n
			if n < room {
				c.readable = false // drained: the next bytes bring a new event
			}
			l.process(c)
		case n == 0 || (err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)):
			l.closeClient(c) // the client left (between requests, or mid-request)
			return
		case errors.Is(err, unix.EAGAIN):
			c.readable = false
		}
	}
}

// makeRoom readies c.in for a read, moving the unread bytes to its
// start. A buffer full of one unfinished head or body goes to process
// first (a head too large, or a body to take), and makeRoom reports
// false: the reader looks at the connection again.
func (l *evloop) makeRoom(c *lconn) bool {
	if c.w < len(c.in) {
		return true
	}
	if c.r > 0 {
		c.w = copy(c.in, c.in[c.r:c.w])
		c.r = 0
		return true
	}
	l.process(c)
	return false
}

// process moves the connection on with the bytes in c.in.
func (l *evloop) process(c *lconn) {
	cfg := l.g.cfg()
	for !c.closed {
		switch c.state {
		case csBody:
			l.takeBody(c)
			return
		case csHead:
		default:
			return
		}
		b := c.in[c.r:c.w]
		if len(b) == 0 {
			c.r, c.w = 0, 0
			return
		}
		// A complete, well-formed head that came in one read is cut and
		// parsed in one scan; else it is cut first (h1.HeadLen, going on
		// from where the last read's search stopped: the three bytes
		// before it again, as a blank line's end may straddle two reads),
		// and parsed once complete.
		if c.scanned == 0 {
			if n, _ := h1.ParseRequestIn(b, &c.cc.req); n > 0 {
				if !l.startParsed(c, b[:n]) {
					return
				}
				continue
			}
		}
		from := max(c.scanned-3, 0)
		hl := h1.HeadLen(b[from:])
		if hl == 0 {
			c.scanned = len(b)
			if len(b) >= int(cfg.MaxHeaderSize) || len(b) == len(c.in) {
				l.handOff(c) // the goroutine path answers 431
				return
			}
			if c.tkind != tmHead {
				l.armIn(c, tmHead, cfg.Timeouts.ReadHeader.D())
			}
			return
		}
		c.scanned = 0
		if !l.startRequest(c, b[:from+hl]) {
			return
		}
	}
}

// startRequest parses and routes the head at c.in[c.r:], and serves it
// as serveOne does; it reports whether process should go on with the
// next head (a local answer written without waiting).
func (l *evloop) startRequest(c *lconn, head []byte) bool {
	if err := h1.ParseRequest(head, &c.cc.req); err != nil {
		l.handOff(c) // the goroutine path refuses it, and closes lingering
		return false
	}
	return l.startParsed(c, head)
}

// startParsed is startRequest once the head is parsed into c.cc.req.
func (l *evloop) startParsed(c *lconn, head []byte) bool {
	g, cc := l.g, c.cc
	r := &cc.req
	if !fastPathServes(r) {
		l.handOff(c)
		return false
	}
	lc := g.rt.Load()
	rte := lc.route(r)
	up := rte.upstream((*h1View)(r), cc.clientIP)
	cfg := lc.cfg
	n := max(r.ContentLength, 0)
	if (up != nil && up.tls != nil) || (n > 0 && (up == nil || rte.redirect != nil || rte.limit != nil || n > int64(up.cfg.Retry.BufferBody) || n > int64(cfg.MaxBodySize))) {
		l.handOff(c) // https targets, and bodies the goroutine path reads or refuses
		return false
	}
	start := l.now
	line := accessLine{start: start}
	if g.access != nil {
		line.method, line.path = string(r.Method), string(r.URI)
	}
	c.clientClose = r.Close
	if code, body, extra := cc.localAnswer(rte, up, &line); code != 0 {
		c.r += len(head)
		return l.answer(c, &line, code, body, extra)
	}
	c.rq = request{up: up, start: start, tried: cc.tried[:0]}
	if up.usesKey {
		c.rq.key = requestKey((*h1View)(r), up.cfg.Key, up.keyLower, cc.clientIP)
	}
	idem := isIdempotent(r.Method)
	c.stream = streamPath(cfg.Buffering.StreamPaths, r.URI)
	cc.isHead = string(r.Method) == "HEAD"
	cc.buildHead(r, rte)
	cc.lc, cc.rte = lc, rte
	c.up, c.line = up, line
	c.rq.replayable = idem || cc.idemKey // the body, if any, is buffered: condition (b) holds
	c.r += len(head)                     // r's slices are invalid from here on
	c.reqBytes = append(c.reqBytes[:0], cc.out...)
	cc.n = n
	if n > 0 {
		c.state = csBody
		l.armIn(c, tmBody, cfg.Timeouts.Idle.D())
		l.takeBody(c)
		return false
	}
	l.pick(c)
	return false
}

// takeBody moves body bytes from c.in to the request, and picks once it
// is whole.
func (l *evloop) takeBody(c *lconn) {
	want := c.cc.n - int64(len(c.reqBytes)-len(c.cc.out))
	k := int(min(want, int64(c.w-c.r)))
	c.reqBytes = append(c.reqBytes, c.in[c.r:c.r+k]...)
	c.r += k
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
	if int64(k) < want {
		return
	}
	l.pick(c)
}

// pick takes the request's first permit, waiting in the queue on a
// goroutine when every target is at its limit.
func (l *evloop) pick(c *lconn) {
	up := c.up
	c.state = csWait
	l.disarm(c)
	up.budget.request(c.rq.start.Unix())
	p, err := up.pickNow(&c.rq)
	if errors.Is(err, balance.ErrAtCapacity) && up.cfg.Queue.MaxWait.D() > 0 {
		l.queue(c, up.cfg.Queue.MaxWait.D(), false)
		return
	}
	if err != nil {
		l.gatewayAnswer(c, pickFailure(err))
		return
	}
	up.begin(&c.rq, &c.a, p)
	l.attempt(c)
}

// queue waits for a permit on a goroutine: the balancer's queue is
// shared by every loop, so a permit freed anywhere wakes it.
func (l *evloop) queue(c *lconn, wait time.Duration, retry bool) {
	c.state, c.retrying = csWait, retry
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	up, info, gen := c.up, c.rq.info(), c.gen
	c.inflight++
	go func() {
		p, err := up.wait(ctx, l.g, info, wait)
		if !l.post(func(l *evloop) { l.waited(c, gen, p, err) }) && err == nil {
			p.Cancel() // the loop is gone: nobody takes the permit
		}
	}()
}

func (l *evloop) waited(c *lconn, gen uint32, p balance.Pick, err error) {
	c.inflight--
	if c.gen != gen {
		if err == nil {
			p.Cancel() // the client left while the permit came
		}
		return
	}
	c.cancel()
	c.cancel = nil
	up := c.up
	up.picked(&c.rq, p, err, true)
	if c.retrying {
		l.retried(c, p, err)
		return
	}
	if err != nil {
		l.gatewayAnswer(c, pickFailure(err))
		return
	}
	up.begin(&c.rq, &c.a, p)
	l.attempt(c)
}

// attempt sends the request to the picked target: on a keep-alive
// connection of this loop's, or a new one.
func (l *evloop) attempt(c *lconn) {
	up := c.up
	if err := up.resolve(&c.rq, &c.a); err != nil {
		l.gatewayAnswer(c, pickFailure(err))
		return
	}
	c.redialed = false
	p := c.a.t.pool
	if u := l.idleConn(p, c.rq.replayable); u != nil {
		l.exchangeOn(c, u)
		return
	}
	l.dial(c, p)
}

// idleConn takes this loop's most recently used idle connection to p.
// A request that must not run twice goes only on one known open.
func (l *evloop) idleConn(p *pool, replayable bool) *lconn {
	lst := l.idle[p]
	if lst == nil {
		return nil
	}
	idleTO := time.Duration(p.idleTO.Load())
	for n := len(*lst); n > 0; n = len(*lst) {
		u := (*lst)[n-1]
		(*lst)[n-1] = nil
		*lst = (*lst)[:n-1]
		if u.closed {
			continue
		}
		if l.now.Sub(u.idleSince) >= idleTO || (!replayable && !fdOpen(u.fd)) {
			l.closeUp(u)
			continue
		}
		return u
	}
	return nil
}

// fdOpen: nothing to read and no EOF on an idle connection.
func fdOpen(fd int) bool {
	var b [1]byte
	_, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return errors.Is(err, unix.EAGAIN)
}

// dial connects on a goroutine (net.Dialer: names resolved, the dial
// timeout kept) and hands the socket to the loop: dials are rare next to
// requests on kept-alive connections.
func (l *evloop) dial(c *lconn, p *pool) {
	c.state = csDial
	gen := c.gen
	dialTO := time.Duration(p.dialTO.Load())
	addr := p.addr
	c.inflight++
	go func() {
		d := net.Dialer{Timeout: dialTO, KeepAlive: 30 * time.Second}
		fd := -1
		nc, err := d.Dial("tcp", addr)
		if err == nil {
			fd, err = dupFD(nc)
			nc.Close()
		}
		if err != nil {
			err = &connectError{addr: addr, err: err}
		}
		if !l.post(func(l *evloop) { l.dialed(c, gen, p, fd, err) }) && fd >= 0 {
			_ = unix.Close(fd) // the loop is gone
		}
	}()
}

// dupFD duplicates a connection's socket for the loop (non-blocking,
// close-on-exec); the connection itself is then closed.
func dupFD(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (l *evloop) dialed(c *lconn, gen uint32, p *pool, fd int, err error) {
	c.inflight--
	if c.gen != gen {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return
	}
	if err != nil {
		l.exchanged(c, 0, false, err)
		return
	}
	u := &lconn{l: l, fd: fd, pool: p, in: make([]byte, upReadBuf), writable: true}
	if err := l.register(u); err != nil {
		_ = unix.Close(fd)
		l.exchanged(c, 0, false, &connectError{addr: p.addr, err: err})
		return
	}
	l.exchangeOn(c, u)
}

// exchangeOn sends the request on u and awaits the response head under
// timeouts.response_header (or retry.try_timeout: headTimeout).
func (l *evloop) exchangeOn(c *lconn, u *lconn) {
	c.state, c.peer, u.peer = csExchange, u, c
	u.wrote, u.r, u.w = false, 0, 0
	u.reused = !u.idleSince.IsZero()
	l.armIn(c, tmRespHead, c.up.headTimeout(l.g, &c.a))
	u.out = append(u.out[:0], c.reqBytes...)
	l.sendUp(u)
	if !u.closed && u.readable {
		l.readUp(u) // a response, or an EOF, that came while the connection was idle
	}
}

// sendUp writes the request bytes the target socket has not taken.
func (l *evloop) sendUp(u *lconn) {
	for len(u.out) > 0 && u.writable {
		n, err := rawWrite(u.fd, u.out)
		if n > 0 {
			u.wrote = true
			u.out = u.out[:copy(u.out, u.out[n:])]
		}
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				u.writable = false
				return
			}
			if !errors.Is(err, unix.EINTR) {
				l.upFailed(u, err)
				return
			}
		}
	}
}

// readUp reads from a target connection: a response head awaited, a
// body being relayed, or bytes (or an EOF) on an idle one.
func (l *evloop) readUp(u *lconn) {
	c := u.peer
	if c == nil {
		l.closeUp(u) // an idle connection spoke or closed: not reusable
		return
	}
	if c.state == csRelay {
		l.drive(c)
		return
	}
	for u.readable && !u.closed {
		if u.w == len(u.in) {
			l.upFailed(u, h1.ErrHeadTooLarge)
			return
		}
		room := len(u.in) - u.w
		n, err := rawRead(u.fd, u.in[u.w:])
		switch {
		case n > 0:
			u.w += n
			if n < room {
				u.readable = false
			}
		case n == 0:
			l.upFailed(u, errors.New("target closed the connection"))
			return
		case errors.Is(err, unix.EAGAIN):
			u.readable = false
		case errors.Is(err, unix.EINTR):
		default:
			l.upFailed(u, err)
			return
		}
		if l.headIn(c, u) {
			return
		}
	}
}

// headIn parses a complete response head in u, skipping interim 1xx
// responses; it reports whether the exchange moved on.
func (l *evloop) headIn(c *lconn, u *lconn) bool {
	res := &c.cc.res
	for {
		// One scan for a complete, well-formed head, as process's.
		hl, _ := h1.ParseResponseIn(u.in[u.r:u.w], res)
		if hl == 0 {
			if hl = h1.HeadLen(u.in[u.r:u.w]); hl == 0 {
				return false
			}
			if err := h1.ParseResponse(u.in[u.r:u.r+hl], res); err != nil {
				l.upFailed(u, err)
				return true
			}
		}
		if res.Status >= 200 {
			if c.up.readsLoad {
				c.up.reportLoad(&c.a, responseLoad(res))
			}
			l.exchanged(c, res.Status, true, nil)
			return true
		}
		if res.Status == 101 {
			l.upFailed(u, errSwitched)
			return true
		}
		u.r += hl
	}
}

// upFailed ends an exchange whose target connection broke before its
// response head. A stale keep-alive connection (nothing came back) is
// replaced once for a replayable request, as the goroutine path does.
func (l *evloop) upFailed(u *lconn, err error) {
	c := u.peer
	got := u.w > 0
	wrote := u.wrote
	reused := u.reused
	l.closeUp(u)
	if c == nil {
		return
	}
	c.peer = nil
	if reused && !c.redialed && c.rq.replayable && !got && !errors.Is(err, h1.ErrMalformed) && err != errSwitched {
		c.redialed = true
		l.dial(c, c.a.t.pool)
		return
	}
	l.exchanged(c, 0, wrote, err)
}

// exchanged runs the attempt loop's decision after an exchange.
func (l *evloop) exchanged(c *lconn, status int, written bool, err error) {
	up := c.up
	res, done, wait := up.judge(l.g, &c.rq, &c.a, status, written, err)
	if done {
		l.decided(c, res)
		return
	}
	p, perr := up.pickNow(&c.rq)
	if errors.Is(perr, balance.ErrAtCapacity) && wait > 0 {
		l.queue(c, wait, true)
		return
	}
	l.retried(c, p, perr)
}

func (l *evloop) retried(c *lconn, p balance.Pick, perr error) {
	res, done := c.up.retried(l.g, &c.rq, &c.a, p, perr, c.dropFn)
	if done {
		l.decided(c, res)
		return
	}
	l.attempt(c)
}

// dropResponse discards a retried status's response: its connection goes
// back to the pool only when the whole response is already read.
func (l *evloop) dropResponse(c *lconn) {
	u := c.peer
	if u == nil {
		return
	}
	c.peer, u.peer = nil, nil
	res := &c.cc.res
	n := int64(res.Size)
	if !h1.NoBody(res.Status, c.cc.isHead) {
		n += res.ContentLength
	}
	if !res.Close && n >= int64(res.Size) && int64(u.w-u.r) == n {
		u.r, u.w = 0, 0
		l.putIdle(u)
		return
	}
	l.closeUp(u)
}

// decided relays the target's response (res.t set) or answers for the
// gateway.
func (l *evloop) decided(c *lconn, res result) {
	if res.t == nil {
		if u := c.peer; u != nil {
			c.peer, u.peer = nil, nil
			l.closeUp(u)
		}
		l.gatewayAnswer(c, res)
		return
	}
	c.res = res
	u := c.peer
	cc := c.cc
	hr := &cc.res
	noBody := h1.NoBody(hr.Status, cc.isHead)
	untilEOF := !noBody && hr.ContentLength < 0 && !hr.Chunked
	c.closeAfter = c.clientClose || untilEOF || l.g.draining.Load()
	stream := c.stream || (!noBody && streams(hr))
	cc.scr2 = writeResponseHead(c.bw, hr, cc.rte.respHdr, cc.rid, c.closeAfter, cc.scr2)
	_ = c.bw.Flush()
	u.r += hr.Size
	c.upKeep = !hr.Close
	switch {
	case noBody:
		c.mode = bodyNone
	case hr.Chunked:
		c.mode = bodyChunked
		c.scan.Reset()
	case hr.ContentLength >= 0:
		c.mode, c.remain = bodyLength, hr.ContentLength
	default:
		c.mode, c.upKeep = bodyEOF, false
	}
	c.q.stream = stream
	c.state = csRelay
	l.disarm(c) // a body read has no deadline; the send timeout bounds the client
	l.drive(c)
}

// pump moves the response body from the target to the client's queue
// while the queue has room (memory, then a temporary file; a stream:
// memory only), so a target is read at the client's pace only past both
// limits. It reports whether anything moved.
func (l *evloop) pump(c *lconn) bool {
	u := c.peer
	moved := false
	for c.state == csRelay {
		if c.mode == bodyNone || (c.mode == bodyLength && c.remain == 0) {
			l.targetDone(c, nil)
			return true
		}
		if b := u.in[u.r:u.w]; len(b) > 0 {
			room := c.q.room()
			if room == 0 {
				return moved // backpressure: the client's pace
			}
			take := min(len(b), room)
			done := false
			switch c.mode {
			case bodyLength:
				take = int(min(int64(take), c.remain))
				c.remain -= int64(take)
				done = c.remain == 0
			case bodyChunked:
				k, end, err := c.scan.Scan(b[:take])
				if err != nil {
					l.targetDone(c, err)
					return true
				}
				take, done = k, end
			}
			if err := c.q.add(b[:take]); err != nil {
				l.targetDone(c, err)
				return true
			}
			u.r += take
			moved = true
			if done {
				l.targetDone(c, nil)
				return true
			}
			continue
		}
		u.r, u.w = 0, 0
		if !u.readable {
			return moved
		}
		n, err := rawRead(u.fd, u.in)
		switch {
		case n > 0:
			u.w = n
			if n < len(u.in) {
				u.readable = false
			}
		case n == 0:
			if c.mode == bodyEOF {
				l.targetDone(c, nil)
			} else {
				l.targetDone(c, errors.New("target closed the connection mid-body"))
			}
			return true
		case errors.Is(err, unix.EAGAIN):
			u.readable = false
		case errors.Is(err, unix.EINTR):
		default:
			l.targetDone(c, err)
			return true
		}
	}
	return moved
}

// targetDone ends the pick as soon as the target is done, before the
// client has the response (a slow client holds no permit): the target
// connection goes back to this loop's pool, the balancer hears the
// outcome, the access line is written.
func (l *evloop) targetDone(c *lconn, relayErr error) {
	u := c.peer
	c.peer = nil
	if u != nil {
		u.peer = nil
		if relayErr == nil && c.upKeep && u.r == u.w {
			u.r, u.w = 0, 0
			l.putIdle(u)
		} else {
			l.closeUp(u)
		}
	}
	if relayErr != nil {
		c.closeAfter = true
	}
	end := l.now
	res := &c.res
	c.up.finish(l.g, res, end, relayErr)
	res.t.m.dur.Observe(end.Sub(c.rq.start).Seconds())
	c.line.target = res.t.addr
	c.line.retries = c.rq.retries
	c.cc.tried = c.rq.tried
	c.cc.logLine(&c.line, res.status)
	c.state = csFlush
}

// gatewayAnswer writes the gateway's own answer for a failed attempt
// loop (502, 503, 504 with its reason).
func (l *evloop) gatewayAnswer(c *lconn, res result) {
	var hdr []byte
	if res.reason == reasonAtCapacity {
		hdr = retryAfter(c.up.cfg.Queue.MaxWait.D())
	}
	c.line.reason = res.reason
	c.line.retries = c.rq.retries
	c.cc.tried = c.rq.tried
	if l.answer(c, &c.line, res.code, failureBody(res.code, res.reason), hdr) {
		l.process(c)
		if !c.closed && c.state == csHead && c.canRead() {
			l.readClient(c)
		}
	}
}

// answer queues a local answer and logs it; it reports whether the
// answer went out at once and the connection is ready for its next head.
func (l *evloop) answer(c *lconn, line *accessLine, code int, body string, extra []byte) bool {
	cc := c.cc
	cc.scr = appendLocal(cc.scr[:0], code, body, c.clientClose, cc.rid, extra)
	_ = c.q.add(cc.scr)
	c.closeAfter = c.clientClose
	cc.logLine(line, code)
	c.state = csFlush
	l.flushQ(c)
	if c.closed {
		return false
	}
	if c.outPending() {
		l.armIn(c, tmSend, l.g.cfg().Timeouts.Send.D())
		return false // the rest goes as the client takes it (drive)
	}
	return l.ready(c)
}

// drive moves a response along, from the target into the queue and
// from the queue to the client, until neither moves. A client that
// takes nothing for timeouts.send loses its connection; once the queue
// is out after the target is done, the connection reads its next
// request.
func (l *evloop) drive(c *lconn) {
	progressed := false
	for !c.closed {
		moved := false
		if c.state == csRelay && c.peer != nil {
			moved = l.pump(c)
		}
		if c.closed {
			return
		}
		if l.flushQ(c) {
			moved, progressed = true, true
		}
		if !moved {
			break
		}
	}
	if c.closed {
		return
	}
	if c.outPending() {
		// The send timeout bounds a client that holds something up: the
		// end of its exchange, or a target read at its pace past the
		// buffers. While the queue takes the target's bytes, the target
		// goes on and the client's pace does not matter yet.
		if c.state == csRelay && c.q.room() > 0 {
			if c.tkind == tmSend {
				l.disarm(c)
			}
		} else if progressed || c.tkind != tmSend {
			l.armIn(c, tmSend, l.g.cfg().Timeouts.Send.D())
		}
		return
	}
	if c.tkind == tmSend {
		l.disarm(c)
	}
	if c.state == csFlush {
		l.requestDone(c)
	}
}

// flushQ writes the queue while the client takes it; it reports whether
// any byte went.
func (l *evloop) flushQ(c *lconn) bool {
	if c.tc != nil {
		return l.flushTLS(c)
	}
	progressed := false
	for c.q.pending() && c.writable {
		n, err := c.q.writeTo(c.fd)
		if n > 0 {
			progressed = true
		}
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				c.writable = false
				break
			}
			if !errors.Is(err, unix.EINTR) {
				l.closeClient(c)
				return progressed
			}
		}
	}
	return progressed
}

// requestDone readies the connection for its next request and goes on
// with what the client already sent.
func (l *evloop) requestDone(c *lconn) {
	if !l.ready(c) {
		return
	}
	if c.moveTo != nil && c.r == c.w {
		// The packer moves it to another loop (loop_pack_linux.go),
		// once this wake-up's events are handled: the callers up the
		// stack still hold it.
		l.leaving = append(l.leaving, leaving{c, c.gen})
		return
	}
	if c.r < c.w {
		l.process(c)
	}
	if !c.closed && c.state == csHead && c.canRead() {
		l.readClient(c)
	}
}

// ready ends a request whose response is out: the connection closes, or
// waits for its next head under timeouts.idle.
func (l *evloop) ready(c *lconn) bool {
	c.q.release()
	if c.closeAfter || l.draining || l.g.draining.Load() {
		l.closeClient(c)
		return false
	}
	cc := c.cc
	cc.lc, cc.rte = nil, nil
	c.up = nil
	c.state = csHead
	l.armIn(c, tmIdle, l.g.cfg().Timeouts.Idle.D())
	return true
}

// loopTick is the timer wheel's tick: a timeout fires up to a tick late.
const loopTick = 10 * time.Millisecond

// arm sets c's one timer to kind at due, replacing the one it had.
// armIn is arm for now+d, reckoned on the offset clock (l.nowAt): no
// time.Time arithmetic per request.
func (l *evloop) armIn(c *lconn, kind uint8, d time.Duration) {
	if d >= 1<<60 || !l.timers.ResetAt(c.th, l.nowAt+d) {
		l.arm(c, kind, l.now.Add(d)) // a new timer, or an offset too large to add
		return
	}
	c.tkind = kind
}

func (l *evloop) arm(c *lconn, kind uint8, due time.Time) {
	c.tkind = kind
	if !l.timers.Reset(c.th, due) {
		c.th = l.timers.Set(c, due)
	}
}

// disarm ends what c's timer bounds. The wheel's entry stays: the next
// arm moves it by its handle (no key lookup, no map insert or delete,
// twice a request), and if it fires first it fires as tmNone, which
// does nothing.
func (l *evloop) disarm(c *lconn) {
	c.tkind = tmNone
}

// dropTimer takes c's entry out of the wheel, for a connection that ends:
// its lconn is reused, and a stale entry would fire on the next one.
func (l *evloop) dropTimer(c *lconn) {
	l.timers.CancelHandle(c.th)
	c.tkind, c.th = tmNone, wheel.Handle{}
}

// timeout is epoll_wait's timeout in milliseconds: until the earliest
// timer may be due, or -1 with none armed.
func (l *evloop) timeout() int {
	next, ok := l.timers.Next()
	if !ok {
		return -1
	}
	d := next.Sub(l.now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// fire handles a connection's timer.
func (l *evloop) fire(c *lconn, kind uint8) {
	switch kind {
	case tmRespHead:
		if u := c.peer; u != nil && c.state == csExchange {
			wrote := u.wrote
			c.peer, u.peer = nil, nil
			l.closeUp(u)
			l.exchanged(c, 0, wrote, errTimeout)
		}
	default:
		// read_header, idle, a body's idle, send: the connection ends.
		l.closeClient(c)
	}
}

// closeClient ends a client connection and whatever its request holds:
// a queue wait is cancelled, a target connection mid-response is closed
// and the pick ended as the client's side (not the target's).
func (l *evloop) closeClient(c *lconn) {
	if c.closed {
		return
	}
	state := c.state
	u := c.peer
	c.peer = nil
	l.unregister(c)
	if c.tc != nil && c.writable && !c.outPending() {
		// A TLS connection ends with close_notify, best effort: a client
		// reading a body delimited by the close then knows it is whole.
		_ = c.tc.CloseWrite()
		_, _ = writeFD(c.fd, c.tio.wire)
	}
	_ = unix.Close(c.fd)
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	switch state {
	case csDial, csExchange:
		// The pick ends as the client's side, not the target's (judge
		// answers errClientGone without a retry).
		wrote := false
		if u != nil {
			u.peer = nil
			wrote = u.wrote
			l.closeUp(u)
		}
		if res, done, _ := c.up.judge(l.g, &c.rq, &c.a, 0, wrote, errClientGone); done && res.t == nil {
			c.line.reason = res.reason
			c.cc.logLine(&c.line, res.code) // 499, as nginx logs it
		}
	case csRelay:
		if u != nil {
			u.peer = nil
			l.closeUp(u)
		}
		c.up.finish(l.g, &c.res, l.now, nil) // the client left: not the target's failure
		c.line.target = c.res.t.addr
		c.cc.logLine(&c.line, c.res.status)
	}
	c.q.release()
	l.clients.Add(-1)
	l.g.loopConns.Add(-1)
	l.g.connWG.Done()
	l.freeConn(c)
}

func (l *evloop) closeUp(u *lconn) {
	if u.closed {
		return
	}
	l.unregister(u)
	_ = unix.Close(u.fd)
}

func (l *evloop) putIdle(u *lconn) {
	if l.draining || u.closed {
		l.closeUp(u)
		return
	}
	u.idleSince = l.now
	lst := l.idle[u.pool]
	if lst == nil {
		lst = new([]*lconn)
		l.idle[u.pool] = lst
	}
	if len(*lst) >= u.pool.max {
		l.closeUp(u)
		return
	}
	*lst = append(*lst, u)
}

// sweepIdle closes target connections idle past timeouts.upstream_idle.
func (l *evloop) sweepIdle() {
	l.sweep = l.now
	for p, lst := range l.idle {
		idle := *lst
		idleTO := time.Duration(p.idleTO.Load())
		keep := idle[:0]
		for _, u := range idle {
			if !u.closed && l.now.Sub(u.idleSince) < idleTO {
				keep = append(keep, u)
			} else {
				l.closeUp(u)
			}
		}
		clear(idle[len(keep):])
		if len(keep) == 0 {
			delete(l.idle, p)
		} else {
			*lst = keep
		}
	}
}

// handOff gives the connection, with the bytes read and not yet served,
// to the goroutine path (accept.go's serveConn), before anything of the
// request was answered: it serves what the loop does not.
func (l *evloop) handOff(c *lconn) {
	if c.outPending() {
		// Only crypto/tls's own answers (a KeyUpdate) can wait here, the
		// response before being out: a client that does not take them
		// is not handed a goroutine, and the loop never blocks on it.
		l.closeClient(c)
		return
	}
	pending := append([]byte(nil), c.in[c.r:c.w]...)
	fd, tc, t := c.fd, c.tc, c.tio
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, fd, nil)
	l.unregister(c)
	c.q.release()
	l.clients.Add(-1)
	l.g.loopConns.Add(-1)
	l.g.connWG.Done()
	l.freeConn(c)
	f := os.NewFile(uintptr(fd), "client")
	nc, err := net.FileConn(f) // a duplicate, on Go's netpoller
	f.Close()
	if err != nil {
		return
	}
	tcp, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return
	}
	var conn net.Conn = &prefixConn{TCPConn: tcp, pending: pending}
	if tc != nil {
		// TLS: the session goes on over the same *tls.Conn, on Go's
		// netpoller now (loop_tls_linux.go).
		t.TCPConn, t.fd, t.c = tcp, -1, nil
		t.wire, t.wr = nil, 0
		conn = &tlsPrefixConn{Conn: tc, pending: pending}
	}
	cc := l.g.newClientConn(conn)
	if cc == nil {
		tcp.Close() // not conn: a *tls.Conn's Close would block on close_notify
		return
	}
	if tc != nil {
		cc.tls, cc.raw = true, t
	}
	go l.g.serveConn(cc)
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	*net.TCPConn
	pending []byte
}

func (c *prefixConn) Read(p []byte) (int, error) { return readPending(&c.pending, p, c.TCPConn) }

// readPending reads what *pending holds first, then from r.
func readPending(pending *[]byte, p []byte, r io.Reader) (int, error) {
	if len(*pending) > 0 {
		n := copy(p, *pending)
		*pending = (*pending)[n:]
		return n, nil
	}
	return r.Read(p)
}

// drain stops accepting and closes idle connections; busy ones close
// after their response.
func (l *evloop) drain() {
	l.draining = true
	if l.lfd >= 0 {
		_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.lfd, nil)
		_ = unix.Close(l.lfd)
		l.lfd = -1
	}
	for _, c := range l.conns {
		if c != nil && !c.isTarget() && c.state == csHead && c.r == c.w {
			l.closeClient(c)
		}
	}
}

// kill closes every connection: the drain's grace ran out.
func (l *evloop) kill() {
	l.drain()
	for _, c := range l.conns {
		if c != nil && !c.isTarget() {
			l.closeClient(c)
		}
	}
}

func (l *evloop) shutdown() {
	for _, c := range l.conns {
		if c != nil {
			if c.isTarget() {
				l.closeUp(c)
			} else {
				l.closeClient(c)
			}
		}
	}
	l.closeFDs()
	// What another goroutine posted after the last drainInbox and before
	// closeFDs (a connection another loop handed over, a permit, a dial)
	// runs now, so it is closed and uncounted: a handed-over connection's
	// register fails on the closed epoll fd, and the rest find their
	// connection gone.
	l.mu.Lock()
	late := l.inbox
	l.inbox = nil
	l.mu.Unlock()
	for _, fn := range late {
		fn(l)
	}
}

// closeLoops closes loops that never ran.
func (g *Gateway) closeLoops() {
	for _, l := range g.loops {
		l.closeFDs()
	}
	g.loops = nil
}

// runLoops starts the loops listenLoops made, once everything they hand
// over to (the goroutine path, net/http) is ready.
func (g *Gateway) runLoops() {
	for _, l := range g.loops {
		go l.loop()
	}
	if len(g.loops) > 1 {
		a := len(g.loops)
		if g.cfg().EventLoopPackOn() {
			a = 1
		}
		g.setActive(a)
		g.packStop = make(chan struct{})
		g.packDone = make(chan struct{})
		go func() {
			defer close(g.packDone)
			g.packLoop(g.packStop)
		}()
	}
}

// drainLoops drains the loops (kill: closing every connection), or ends
// them (exit).
func (g *Gateway) drainLoops(kill bool) {
	for _, l := range g.loops {
		if kill {
			l.post((*evloop).kill)
		} else {
			l.post((*evloop).drain)
		}
	}
}

// stopLoops ends the loops, closing whatever they still hold.
func (g *Gateway) stopLoops(wait bool) {
	if g.packStop != nil {
		close(g.packStop)
		<-g.packDone
		g.packStop = nil
	}
	for _, l := range g.loops {
		l.post(func(l *evloop) { l.exit = true })
	}
	if wait {
		for _, l := range g.loops {
			<-l.done
		}
	}
}
