package gateway

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"
)

// pool keeps idle keep-alive connections to one target, most recently
// used first so a burst reuses warm connections and the rest age out.
type pool struct {
	addr   string
	dialer net.Dialer
	idleTO time.Duration
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
}

const (
	upReadBuf  = 16 << 10 // also the largest response head
	upWriteBuf = 4 << 10
)

// get returns an idle connection (reused true) or dials a new one; now
// is the caller's clock reading.
func (p *pool) get(now time.Time) (*upConn, bool, error) {
	p.mu.Lock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		uc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if now.Sub(uc.idleSince) < p.idleTO {
			p.mu.Unlock()
			return uc, true, nil
		}
		p.mu.Unlock()
		uc.c.Close()
		p.mu.Lock()
	}
	p.mu.Unlock()
	uc, err := p.dial()
	return uc, false, err
}

func (p *pool) dial() (*upConn, error) {
	c, err := p.dialer.Dial("tcp", p.addr)
	if err != nil {
		return nil, &connectError{addr: p.addr, err: err}
	}
	return &upConn{c: c, br: bufio.NewReaderSize(c, upReadBuf), bw: bufio.NewWriterSize(c, upWriteBuf)}, nil
}

// alive reports whether an idle connection is still open: a read that
// must time out at once, not return EOF. Two syscalls, so only requests
// that cannot be replayed blindly pay for it.
func (uc *upConn) alive() bool {
	if uc.br.Buffered() > 0 {
		return false // bytes nobody asked for: not a clean connection
	}
	uc.deadline = time.Unix(1, 0)
	_ = uc.c.SetReadDeadline(uc.deadline)
	_, err := uc.br.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
	p.mu.Lock()
	var old []*upConn
	keep := p.idle[:0]
	for _, uc := range p.idle {
		if now.Sub(uc.idleSince) >= p.idleTO {
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

// connectError is a failure to reach a target: the request was not sent,
// so it is always safe to retry elsewhere.
type connectError struct {
	addr string
	err  error
}

func (e *connectError) Error() string { return "connect " + e.addr + ": " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }
