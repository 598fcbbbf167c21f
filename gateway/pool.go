package gateway

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pool keeps idle keep-alive connections to one target, most recently
// used first so a burst reuses warm connections and the rest age out.
type pool struct {
	addr   string
	dialTO atomic.Int64 // timeouts.dial and timeouts.upstream_idle, in ns:
	idleTO atomic.Int64 // a reload sets them on every pool
	max    int

	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

// upConn is one connection to a target with its buffers.
type upConn struct {
	c         net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	deadline  time.Time // the read deadline set on c
	wrote     int       // bytes the kernel accepted since the caller zeroed it
}

// Write counts what reaches the connection: a request whose bytes were
// accepted may have run on the target, whatever happens next.
func (uc *upConn) Write(p []byte) (int, error) {
	n, err := uc.c.Write(p)
	uc.wrote += n
	return n, err
}

const (
	upReadBuf  = 16 << 10 // also the largest response head
	upWriteBuf = 4 << 10
)

// get returns an idle connection (reused true), or nil when there is
// none; now is the caller's clock reading.
func (p *pool) get(now time.Time) (*upConn, bool) {
	idleTO := time.Duration(p.idleTO.Load())
	p.mu.Lock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		uc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if now.Sub(uc.idleSince) < idleTO {
			p.mu.Unlock()
			return uc, true
		}
		p.mu.Unlock()
		uc.c.Close()
		p.mu.Lock()
	}
	p.mu.Unlock()
	return nil, false
}

// dial connects to the target within timeouts.dial and ctx.
func (p *pool) dial(ctx context.Context) (*upConn, error) {
	d := net.Dialer{Timeout: time.Duration(p.dialTO.Load()), KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, &connectError{addr: p.addr, err: err}
	}
	uc := &upConn{c: c, br: bufio.NewReaderSize(c, upReadBuf)}
	uc.bw = bufio.NewWriterSize(uc, upWriteBuf)
	return uc, nil
}

// setTimeouts applies timeouts.dial and timeouts.upstream_idle.
func (p *pool) setTimeouts(dial, idle time.Duration) {
	p.dialTO.Store(int64(dial))
	p.idleTO.Store(int64(idle))
}

// alive reports whether an idle connection is still open: nothing to
// read and no EOF. One non-blocking peek (a syscall), so only requests
// that cannot be replayed blindly pay for it.
func (uc *upConn) alive() bool {
	if uc.br.Buffered() > 0 {
		return false // bytes nobody asked for: not a clean connection
	}
	return peekOpen(uc.c)
}

// put returns a healthy connection whose last response was read in full;
// now is the caller's clock reading.
func (p *pool) put(uc *upConn, now time.Time) {
	uc.idleSince = now
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.max {
		p.mu.Unlock()
		uc.c.Close()
		return
	}
	p.idle = append(p.idle, uc)
	p.mu.Unlock()
}

// sweep closes connections idle longer than the idle timeout.
func (p *pool) sweep(now time.Time) {
	idleTO := time.Duration(p.idleTO.Load())
	p.mu.Lock()
	var old []*upConn
	keep := p.idle[:0]
	for _, uc := range p.idle {
		if now.Sub(uc.idleSince) >= idleTO {
			old = append(old, uc)
		} else {
			keep = append(keep, uc)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	p.mu.Unlock()
	for _, uc := range old {
		uc.c.Close()
	}
}

// close closes every idle connection and refuses new ones.
func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, uc := range idle {
		uc.c.Close()
	}
}
