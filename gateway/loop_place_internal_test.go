//go:build linux

package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Keep-alive connections are spread evenly over the event loops, however
// the kernel's SO_REUSEPORT hash lands them (it put 38 and 26 of 64 on two
// loops), and a loop's count falls back to zero as they close.
func TestLoopsShareConnectionsEvenly(t *testing.T) {
	prev := runtime.GOMAXPROCS(4) // four loops, on any machine
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	up, _ := bigServer(t)
	g := startTestGateway(t, "upstreams:\n  api:\n    targets: [{url: \"http://"+up+"\"}]\n")
	if len(g.loops) < 2 {
		t.Skip("the event loop is off (FULCRUM_GATEWAY_EVENT_LOOP=off or not configured)")
	}
	spread := func() (lo, hi int32) {
		lo, hi = 1<<30, -1
		for _, l := range g.loops {
			n := l.clients.Load()
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
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
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
