// Command epoll is the hand-written event-loop prototype of the gateway's
// cleartext HTTP/1.1 fast path (docs/notes/benchmarks-log.md, "Event-loop
// evaluation"): one epoll loop per core, each on its own locked OS thread
// with its own SO_REUSEPORT listener, and each keeping its own keep-alive
// pool per target, so a client connection and the upstream connection
// serving its request are always on the same loop and a request crosses
// no thread.
//
// Sockets are non-blocking and registered once, edge-triggered, for
// reading and writing (no epoll_ctl per request). A read that returns
// less than the buffer's room means the socket is drained (as nginx
// does), so a request costs no EAGAIN read: per request a client read,
// an upstream write, an upstream read and a client write, plus the
// epoll_wait calls they share.
//
// How a loop waits is the one choice left to the flag -wait: "block"
// calls epoll_wait(-1) on a locked OS thread, as C loops do, and pays the
// Go runtime's price for a blocking syscall (sysmon retakes the thread's P
// after 20 µs and wakes another thread for it: nanosleep and futex calls,
// context switches); "netpoll" makes the loop's epoll fd non-blocking and
// parks the goroutine in Go's own netpoller while it has nothing ready, so
// a loop with work polls with epoll_wait(0) and an idle one costs one
// empty epoll_wait and a park, not a thread.
//
// A prototype for measurement: round robin, Content-Length bodies only,
// no pipelining, no timeouts, no retries.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fulcrum-lb/fulcrum/bench/proxy/evloop/relay"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18085", "address")
	targets := flag.String("targets", "127.0.0.1:19001,127.0.0.1:19002,127.0.0.1:19003", "comma-separated host:port")
	loops := flag.Int("loops", runtime.GOMAXPROCS(0), "event loops (one per core)")
	wait := flag.String("wait", "block", `how an idle loop waits: "block" (epoll_wait on a locked thread) or "netpoll" (parked in Go's netpoller)`)
	flag.Parse()
	if *wait != "block" && *wait != "netpoll" {
		log.Fatalf("-wait %q: want block or netpoll", *wait)
	}
	if _, err := Start(*listen, strings.Split(*targets, ","), *loops, *wait == "netpoll"); err != nil {
		log.Fatal(err)
	}
	select {}
}

// Start binds listen once per loop (SO_REUSEPORT) and runs the loops; it
// returns the bound address. With netpoll, idle loops park in Go's
// netpoller instead of blocking a thread in epoll_wait.
func Start(listen string, targets []string, loops int, netpoll bool) (string, error) {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil || !ap.Addr().Is4() {
		return "", fmt.Errorf("listen %q: want an IPv4 host:port", listen)
	}
	var tsa []unix.Sockaddr
	for _, t := range targets {
		tp, err := netip.ParseAddrPort(t)
		if err != nil || !tp.Addr().Is4() {
			return "", fmt.Errorf("target %q: want an IPv4 host:port", t)
		}
		tsa = append(tsa, &unix.SockaddrInet4{Port: int(tp.Port()), Addr: tp.Addr().As4()})
	}
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	for range max(loops, 1) {
		l, err := newLoop(sa, tsa)
		if err != nil {
			return "", err
		}
		if sa.Port == 0 { // the other loops bind the port the first got
			got, err := unix.Getsockname(l.lfd)
			if err != nil {
				return "", err
			}
			sa.Port = got.(*unix.SockaddrInet4).Port
		}
		if netpoll {
			if err := unix.SetNonblock(l.ep, true); err != nil {
				return "", err
			}
			rc, err := os.NewFile(uintptr(l.ep), "epoll").SyscallConn()
			if err != nil {
				return "", err
			}
			go l.runParked(rc)
		} else {
			go l.run()
		}
	}
	return netip.AddrPortFrom(ap.Addr(), uint16(sa.Port)).String(), nil
}

const (
	bufSize = 16 << 10
	connEv  = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
)

type loop struct {
	ep, lfd int
	conns   []*conn // by fd
	nextID  int32   // tells a closed conn's stale event from a new one's on a reused fd
	targets []unix.Sockaddr
	idle    [][]*conn // keep-alive pool per target
	next    int       // round robin
	events  [256]unix.EpollEvent
	scratch []byte // a head and the body bytes sent with it, in one write
	req     relay.Request
	res     relay.Response
}

type conn struct {
	fd, target int
	id         int32
	upstream   bool
	in         []byte
	r, w       int    // unread bytes are in[r:w]
	out        []byte // bytes the socket did not take yet
	peer       *conn  // the other side of the exchange in flight
	remain     int64  // body bytes still to forward (request on a client, response on an upstream)
	headSent   bool   // upstream: the response head went to the client
	headReq    bool   // upstream: the request is a HEAD
	closeAfter bool   // client: close once the response is out; upstream: do not reuse
	connecting bool
	stalled    bool // client: stopped reading with a full buffer
	closing    bool // close once out is flushed
	closed     bool
	xff        []byte
}

func newLoop(sa *unix.SockaddrInet4, targets []unix.Sockaddr) (*loop, error) {
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	_ = unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return nil, err
	}
	if err := unix.Bind(lfd, sa); err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(lfd, 4096); err != nil {
		return nil, err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lfd)}); err != nil {
		return nil, err
	}
	return &loop{ep: ep, lfd: lfd, conns: make([]*conn, 1024), targets: targets,
		idle: make([][]*conn, len(targets)), scratch: make([]byte, 0, bufSize)}, nil
}

func (l *loop) run() {
	runtime.LockOSThread() // the loop is a thread, as nginx's worker is a process
	for {
		n, err := unix.EpollWait(l.ep, l.events[:], -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			log.Fatalf("epoll_wait: %v", err)
		}
		l.dispatch(n)
	}
}

// runParked polls without blocking and parks in Go's netpoller, which
// watches the loop's epoll fd, when nothing is ready. RawConn.Read resets
// the fd's readiness before calling the poll, so an event that comes
// between an empty poll and the park still wakes the loop.
func (l *loop) runParked(rc syscall.RawConn) {
	var n int
	var err error
	poll := func(fd uintptr) bool { // made once: a closure per wait would allocate
		n, err = unix.EpollWait(int(fd), l.events[:], 0)
		return n > 0 || (err != nil && !errors.Is(err, unix.EINTR))
	}
	for {
		if rerr := rc.Read(poll); rerr != nil {
			log.Fatalf("epoll fd: %v", rerr)
		}
		if err != nil {
			log.Fatalf("epoll_wait: %v", err)
		}
		l.dispatch(n)
	}
}

func (l *loop) dispatch(n int) {
	for i := range n {
		ev := &l.events[i]
		fd := int(ev.Fd)
		if fd == l.lfd {
			l.accept()
			continue
		}
		c := l.conns[fd]
		if c == nil || c.id != ev.Pad {
			continue
		}
		if ev.Events&(unix.EPOLLOUT|unix.EPOLLERR) != 0 {
			l.writable(c)
		}
		if !c.closed && ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.readable(c)
		}
	}
}

func (l *loop) accept() {
	for {
		fd, sa, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: the backlog is empty; anything else, try on the next event
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &conn{fd: fd, in: make([]byte, bufSize)}
		if a, ok := sa.(*unix.SockaddrInet4); ok {
			c.xff = []byte(netip.AddrFrom4(a.Addr).String())
		}
		if l.register(c) != nil {
			_ = unix.Close(fd)
		}
	}
}

func (l *loop) register(c *conn) error {
	l.nextID++
	c.id = l.nextID
	for c.fd >= len(l.conns) {
		l.conns = append(l.conns, make([]*conn, len(l.conns))...)
	}
	l.conns[c.fd] = c
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: connEv, Fd: int32(c.fd), Pad: c.id})
}

// dial starts a non-blocking connect to target t; the first EPOLLOUT
// says how it went, and until then writes queue in out.
func (l *loop) dial(t int) *conn {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if err := unix.Connect(fd, l.targets[t]); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		_ = unix.Close(fd)
		return nil
	}
	u := &conn{fd: fd, target: t, upstream: true, connecting: true, in: make([]byte, bufSize)}
	if l.register(u) != nil {
		_ = unix.Close(fd)
		return nil
	}
	return u
}

// pick takes the next target's idle connection, or dials one.
func (l *loop) pick() *conn {
	t := l.next
	l.next = (l.next + 1) % len(l.targets)
	idle := l.idle[t]
	for len(idle) > 0 {
		u := idle[len(idle)-1]
		idle = idle[:len(idle)-1]
		if !u.closed {
			l.idle[t] = idle
			return u
		}
	}
	l.idle[t] = idle
	return l.dial(t)
}

func (l *loop) readable(c *conn) {
	for !c.closed {
		if c.w == len(c.in) {
			if c.r == 0 {
				c.stalled = true // a client holding its next request: read on once the response is out
				return
			}
			c.w = copy(c.in, c.in[c.r:c.w])
			c.r = 0
		}
		room := len(c.in) - c.w
		n, err := unix.Read(c.fd, c.in[c.w:])
		switch {
		case n > 0:
			c.w += n
			if c.upstream {
				l.upstreamData(c)
			} else {
				l.clientData(c)
			}
			if n < room {
				return // drained: edge-triggered, the next data brings a new event
			}
		case n == 0:
			l.close(c)
			return
		case errors.Is(err, unix.EAGAIN):
			return
		case errors.Is(err, unix.EINTR):
		default:
			l.close(c)
			return
		}
	}
}

func (l *loop) writable(c *conn) {
	if c.connecting {
		if e, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
			l.close(c)
			return
		}
		c.connecting = false
	}
	if len(c.out) > 0 {
		n, err := unix.Write(c.fd, c.out)
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			l.close(c)
			return
		}
		c.out = c.out[:copy(c.out, c.out[max(n, 0):])]
	}
	if c.closing && len(c.out) == 0 {
		l.close(c)
	}
}

// send writes b to c now if nothing is queued before it, and queues what
// the socket does not take.
func (l *loop) send(c *conn, b []byte) {
	if c.closed {
		return
	}
	if len(c.out) > 0 || c.connecting {
		c.out = append(c.out, b...)
		return
	}
	n, err := unix.Write(c.fd, b)
	if err != nil {
		if !errors.Is(err, unix.EAGAIN) {
			l.close(c)
			return
		}
		n = 0
	}
	c.out = append(c.out, b[n:]...)
}

// reply sends a canned answer and closes the client once it is out.
func (l *loop) reply(c *conn, b []byte) {
	l.send(c, b)
	c.closing = true
	if len(c.out) == 0 {
		l.close(c)
	}
}

func (l *loop) clientData(c *conn) {
	for c.r < c.w && !c.closed && !c.closing {
		if c.peer != nil { // a request in flight: forward its body, hold the next one
			if c.remain > 0 {
				n := int(min(c.remain, int64(c.w-c.r)))
				l.send(c.peer, c.in[c.r:c.r+n])
				c.r += n
				c.remain -= int64(n)
			}
			break
		}
		b := c.in[c.r:c.w]
		hl, err := relay.HeadLen(b)
		if err != nil {
			l.reply(c, relay.BadRequest)
			return
		}
		if hl == 0 {
			break
		}
		if relay.ParseRequest(b[:hl], &l.req) != nil {
			l.reply(c, relay.BadRequest)
			return
		}
		if !relay.Supported(&l.req) {
			l.reply(c, relay.NotImplemented)
			return
		}
		u := l.pick()
		if u == nil {
			l.reply(c, relay.BadGateway)
			return
		}
		s := relay.AppendRequest(l.scratch[:0], &l.req, c.xff)
		c.r += hl
		n := int(min(l.req.ContentLength, int64(c.w-c.r)))
		s = append(s, c.in[c.r:c.r+n]...)
		c.r += n
		c.remain = l.req.ContentLength - int64(n)
		c.closeAfter = l.req.Close
		c.peer, u.peer = u, c
		u.headSent, u.headReq = false, string(l.req.Method) == "HEAD"
		l.send(u, s)
		l.scratch = s[:0]
	}
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
}

func (l *loop) upstreamData(u *conn) {
	for u.r < u.w && !u.closed {
		c := u.peer
		if c == nil { // bytes nobody asked for: the connection is not reusable
			l.close(u)
			return
		}
		if !u.headSent {
			b := u.in[u.r:u.w]
			hl, err := relay.HeadLen(b)
			if err != nil {
				l.close(u)
				return
			}
			if hl == 0 {
				break
			}
			if relay.ParseResponse(b[:hl], &l.res) != nil {
				l.close(u)
				return
			}
			bl := relay.BodyLen(&l.res, u.headReq)
			if bl < 0 { // chunked or close-delimited: not in this prototype
				l.close(u)
				return
			}
			s := relay.AppendResponse(l.scratch[:0], &l.res, c.closeAfter)
			u.r += hl
			n := int(min(bl, int64(u.w-u.r)))
			s = append(s, u.in[u.r:u.r+n]...)
			u.r += n
			u.remain = bl - int64(n)
			u.headSent, u.closeAfter = true, l.res.Close
			l.send(c, s)
			l.scratch = s[:0]
		} else {
			n := int(min(u.remain, int64(u.w-u.r)))
			l.send(c, u.in[u.r:u.r+n])
			u.r += n
			u.remain -= int64(n)
		}
		if u.remain == 0 {
			l.finish(u)
			return
		}
	}
	if u.r == u.w {
		u.r, u.w = 0, 0
	}
}

// finish ends the exchange whose response u has relayed in full: u goes
// back to the pool, the client to its next request.
func (l *loop) finish(u *conn) {
	c := u.peer
	u.peer, c.peer = nil, nil
	if u.closeAfter || u.r != u.w || c.remain > 0 {
		l.close(u)
	} else {
		u.r, u.w = 0, 0
		l.idle[u.target] = append(l.idle[u.target], u)
	}
	if c.closeAfter || c.remain > 0 {
		c.closing = true
		if len(c.out) == 0 {
			l.close(c)
		}
		return
	}
	l.clientData(c)
	if c.stalled && !c.closed {
		c.stalled = false
		l.readable(c)
	}
}

// close closes c and ends the exchange it is in: a client whose response
// has not started gets a 502, one whose response is cut is closed.
func (l *loop) close(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	l.conns[c.fd] = nil
	_ = unix.Close(c.fd)
	p := c.peer
	if p == nil {
		return
	}
	c.peer, p.peer = nil, nil
	if c.upstream && !c.headSent {
		l.reply(p, relay.BadGateway)
	} else {
		l.close(p)
	}
}
