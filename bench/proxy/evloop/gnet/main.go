// Command gnet is the gnet-based event-loop prototype of the gateway's
// cleartext HTTP/1.1 fast path (docs/notes/benchmarks-log.md, "Event-loop
// evaluation"), on github.com/panjf2000/gnet/v2: one event loop per core
// (SO_REUSEPORT listener each), and upstream connections registered on
// the loop of the client that needed them (EventLoop.Register), each loop
// keeping its own keep-alive pool per target, so an exchange never
// crosses loops.
//
// gnet reads every readable socket into its connection's inbound buffer
// and calls OnTraffic; a Write on the loop goes straight to the socket
// when nothing is queued. Dialing is the one step off the loop: gnet
// dials in a worker goroutine and hands the socket to the loop (once per
// pooled connection, not per request).
//
// A prototype for measurement: round robin, Content-Length bodies only,
// no pipelining, no timeouts, no retries.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"runtime"
	"strings"
	"sync"

	"github.com/panjf2000/gnet/v2"

	"github.com/fulcrum-lb/fulcrum/bench/proxy/evloop/relay"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18086", "address")
	targets := flag.String("targets", "127.0.0.1:19001,127.0.0.1:19002,127.0.0.1:19003", "comma-separated host:port")
	loops := flag.Int("loops", runtime.GOMAXPROCS(0), "event loops (one per core)")
	flag.Parse()
	p, err := New(strings.Split(*targets, ","))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(p.Run(*listen, *loops))
}

// Proxy is the gnet event handler.
type Proxy struct {
	gnet.BuiltinEventEngine
	targets []net.Addr

	mu    sync.Mutex
	loops map[gnet.EventLoop]*loopState // looked up once per client connection
}

// New returns a proxy over targets (host:port).
func New(targets []string) (*Proxy, error) {
	p := &Proxy{loops: map[gnet.EventLoop]*loopState{}}
	for _, t := range targets {
		a, err := net.ResolveTCPAddr("tcp", t)
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", t, err)
		}
		p.targets = append(p.targets, a)
	}
	return p, nil
}

// Run serves listen until the engine stops.
func (p *Proxy) Run(listen string, loops int) error {
	return gnet.Run(p, "tcp://"+listen,
		gnet.WithNumEventLoop(max(loops, 1)),
		gnet.WithReusePort(true),
		gnet.WithLockOSThread(true), // a loop is a thread, as in the epoll prototype
		gnet.WithTCPNoDelay(gnet.TCPNoDelay))
}

// loopState is one loop's: touched only on that loop.
type loopState struct {
	el      gnet.EventLoop
	idle    [][]*upstream
	next    int
	scratch []byte
	req     relay.Request
	res     relay.Response
}

type client struct {
	c          gnet.Conn
	ls         *loopState
	peer       *upstream
	remain     int64 // request body bytes still to forward
	closeAfter bool
	closed     bool
	xff        []byte
}

type upstream struct {
	c          gnet.Conn // nil until gnet opens it on the loop
	ls         *loopState
	target     int
	queued     []byte // what was sent before the connection opened
	peer       *client
	remain     int64 // response body bytes still to forward
	headSent   bool
	headReq    bool
	closeAfter bool
	closed     bool
}

func (p *Proxy) loopOf(el gnet.EventLoop) *loopState {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls := p.loops[el]
	if ls == nil {
		ls = &loopState{el: el, idle: make([][]*upstream, len(p.targets)), scratch: make([]byte, 0, 16<<10)}
		p.loops[el] = ls
	}
	return ls
}

// OnOpen: an accepted client, or an upstream dialed by p.dial.
func (p *Proxy) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if u, ok := c.Context().(*upstream); ok {
		u.c = c
		if u.closed { // its client went away while it was dialing
			return nil, gnet.Close
		}
		out := u.queued
		u.queued = nil
		return out, gnet.None
	}
	cl := &client{c: c, ls: p.loopOf(c.EventLoop())}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cl.xff = []byte(a.IP.String())
	}
	c.SetContext(cl)
	return nil, gnet.None
}

func (p *Proxy) OnTraffic(c gnet.Conn) gnet.Action {
	switch x := c.Context().(type) {
	case *client:
		p.clientData(x)
	case *upstream:
		p.upstreamData(x)
	}
	return gnet.None
}

func (p *Proxy) OnClose(c gnet.Conn, _ error) gnet.Action {
	switch x := c.Context().(type) {
	case *client:
		x.closed = true
		if u := x.peer; u != nil {
			x.peer, u.peer = nil, nil
			u.shut()
		}
	case *upstream:
		x.closed = true
		if cl := x.peer; cl != nil {
			x.peer, cl.peer = nil, nil
			if !x.headSent {
				cl.reply(relay.BadGateway)
			} else {
				cl.shut()
			}
		}
	}
	return gnet.None
}

func (cl *client) shut() {
	if !cl.closed {
		cl.closed = true
		_ = cl.c.Close() // asynchronous: OnClose runs later on this loop
	}
}

func (cl *client) reply(b []byte) {
	if !cl.closed {
		_, _ = cl.c.Write(b)
		cl.shut()
	}
}

func (u *upstream) shut() {
	if !u.closed {
		u.closed = true
		if u.c != nil {
			_ = u.c.Close()
		}
	}
}

func (u *upstream) send(b []byte) {
	if u.closed {
		return
	}
	if u.c == nil {
		u.queued = append(u.queued, b...)
		return
	}
	_, _ = u.c.Write(b)
}

// pick takes the next target's idle connection, or dials one.
func (p *Proxy) pick(ls *loopState) *upstream {
	t := ls.next
	ls.next = (ls.next + 1) % len(p.targets)
	idle := ls.idle[t]
	for len(idle) > 0 {
		u := idle[len(idle)-1]
		idle = idle[:len(idle)-1]
		if !u.closed {
			ls.idle[t] = idle
			return u
		}
	}
	ls.idle[t] = idle
	u := &upstream{ls: ls, target: t}
	res, err := ls.el.Register(gnet.NewContext(context.Background(), u), p.targets[t])
	if err != nil {
		return nil
	}
	go func() { // a failed dial never opens: fail its exchange on the loop
		if r := <-res; r.Err != nil {
			_ = ls.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				u.closed = true
				if cl := u.peer; cl != nil {
					u.peer, cl.peer = nil, nil
					cl.reply(relay.BadGateway)
				}
				return nil
			}))
		}
	}()
	return u
}

func (p *Proxy) clientData(cl *client) {
	ls := cl.ls
	for !cl.closed {
		buf, _ := cl.c.Peek(-1)
		if len(buf) == 0 {
			return
		}
		if cl.peer != nil { // a request in flight: forward its body, hold the next one
			if cl.remain > 0 {
				n := int(min(cl.remain, int64(len(buf))))
				cl.peer.send(buf[:n])
				_, _ = cl.c.Discard(n)
				cl.remain -= int64(n)
			}
			return
		}
		hl, err := relay.HeadLen(buf)
		if err != nil {
			cl.reply(relay.BadRequest)
			return
		}
		if hl == 0 {
			return
		}
		if relay.ParseRequest(buf[:hl], &ls.req) != nil {
			cl.reply(relay.BadRequest)
			return
		}
		if !relay.Supported(&ls.req) {
			cl.reply(relay.NotImplemented)
			return
		}
		u := p.pick(ls)
		if u == nil {
			cl.reply(relay.BadGateway)
			return
		}
		s := relay.AppendRequest(ls.scratch[:0], &ls.req, cl.xff)
		n := int(min(ls.req.ContentLength, int64(len(buf)-hl)))
		s = append(s, buf[hl:hl+n]...)
		cl.remain = ls.req.ContentLength - int64(n)
		cl.closeAfter = ls.req.Close
		cl.peer, u.peer = u, cl
		u.headSent, u.headReq = false, string(ls.req.Method) == "HEAD"
		_, _ = cl.c.Discard(hl + n)
		u.send(s)
		ls.scratch = s[:0]
	}
}

func (p *Proxy) upstreamData(u *upstream) {
	ls := u.ls
	for !u.closed {
		buf, _ := u.c.Peek(-1)
		if len(buf) == 0 {
			return
		}
		cl := u.peer
		if cl == nil { // bytes nobody asked for: not reusable
			u.shut()
			return
		}
		if !u.headSent {
			hl, err := relay.HeadLen(buf)
			if err != nil {
				u.shut()
				p.OnClose(u.c, nil)
				return
			}
			if hl == 0 {
				return
			}
			bl := int64(-1)
			if relay.ParseResponse(buf[:hl], &ls.res) == nil {
				bl = relay.BodyLen(&ls.res, u.headReq)
			}
			if bl < 0 { // malformed, chunked or close-delimited: not in this prototype
				u.shut()
				p.OnClose(u.c, nil) // the 502 now; gnet's own OnClose finds the exchange gone
				return
			}
			s := relay.AppendResponse(ls.scratch[:0], &ls.res, cl.closeAfter)
			n := int(min(bl, int64(len(buf)-hl)))
			s = append(s, buf[hl:hl+n]...)
			_, _ = cl.c.Write(s)
			ls.scratch = s[:0]
			_, _ = u.c.Discard(hl + n)
			u.remain = bl - int64(n)
			u.headSent, u.closeAfter = true, ls.res.Close
		} else {
			n := int(min(u.remain, int64(len(buf))))
			_, _ = cl.c.Write(buf[:n])
			_, _ = u.c.Discard(n)
			u.remain -= int64(n)
		}
		if u.remain == 0 {
			p.finish(u)
			return
		}
	}
}

// finish ends the exchange whose response u has relayed in full: u goes
// back to its loop's pool, the client to its next request.
func (p *Proxy) finish(u *upstream) {
	cl := u.peer
	u.peer, cl.peer = nil, nil
	if u.closeAfter || u.c.InboundBuffered() > 0 || cl.remain > 0 {
		u.shut()
	} else {
		u.ls.idle[u.target] = append(u.ls.idle[u.target], u)
	}
	if cl.closeAfter || cl.remain > 0 {
		cl.shut()
		return
	}
	p.clientData(cl) // a request that came in meanwhile
}
