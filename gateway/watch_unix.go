//go:build unix

package gateway

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// watch returns a context that ends when the fast-path client closes its
// connection, for a wait that would otherwise outlive it (the capacity
// queue, a dial); stop ends the watch. net/http does the same with a
// background read; this one peeks (MSG_PEEK), so a pipelined next
// request stays in the socket for the read loop.
func (cc *clientConn) watch(parent context.Context) (context.Context, func()) {
	sc, ok := cc.raw.(syscall.Conn) // under TLS, the TCP socket: peeking it consumes nothing
	if !ok || cc.br.Buffered() > 0 {
		return parent, func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return parent, func() {}
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		_ = raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				return false // nothing yet: wait for the socket to turn readable
			}
			if err != nil || n == 0 {
				cancel() // reset or EOF: the client left
			}
			return true // the client left, or sent more: stop watching
		})
	}()
	return ctx, func() {
		// A past deadline ends the goroutine's wait; then the connection
		// gets its own deadline back.
		_ = cc.c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = cc.c.SetReadDeadline(cc.deadline)
		cancel()
	}
}

// watchAfter is watch for a wait that is usually short (a response
// head): the watch starts once the wait has lasted d, so a wait that
// ends sooner costs a timer, not a goroutine and a poll registration.
func (cc *clientConn) watchAfter(parent context.Context, d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	var mu sync.Mutex
	var unwatch func()
	stopped := false
	tm := time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		wctx, stop := cc.watch(ctx)
		unregister := context.AfterFunc(wctx, cancel) // the client left
		unwatch = func() { unregister(); stop() }
	})
	return ctx, func() {
		tm.Stop()
		mu.Lock()
		stopped = true
		u := unwatch
		mu.Unlock()
		if u != nil {
			u()
		}
		cancel()
	}
}

// peekOpen reports whether c is open with nothing to read: a
// non-blocking MSG_PEEK finds no data and no EOF. (A read with a past
// deadline would not do: Go fails it before asking the kernel.)
func peekOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	open := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN
	})
	return open
}
