package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// The fast transport: a cleartext HTTP/1.1 request with no body or a
// Content-Length body, relayed over the target pool's keep-alive
// connections (pool.go) with heads parsed in place and nothing allocated
// per request. serveOne walks one request through route, the attempt
// loop, relay and log; exchange and drop are the transport's own I/O.

// errClientGone: the client left mid-exchange (on the fast path, while
// sending its body). Not the target's failure, and no retry: nobody is
// waiting for the answer.
var errClientGone = errors.New("client went away")

// serveOne proxies the request in cc.req; it reports whether the
// connection stays open. A proxied request reads the clock twice, at its
// start and at its end (the VM's clock costs 30-100 ns a read): the
// pool, the header deadline and the first attempt's latency use start,
// the metrics, the pick's latency, the pool's idle stamp and the next
// idle deadline use the end.
func (cc *clientConn) serveOne() bool {
	g := cc.g
	start := time.Now()
	cc.now = time.Time{}
	cfg, rte, up := cc.lc.cfg, cc.rte, cc.up // routed by parse
	cc.lc, cc.rte, cc.up = nil, nil, nil     // a pooled clientConn holds no old config
	r := &cc.req
	line := accessLine{start: start}
	if g.access != nil {
		line.method, line.path = string(r.Method), string(r.URI)
	}
	clientClose := r.Close
	n := max(r.ContentLength, 0)
	if code, body, extra := cc.localAnswer(rte, up, &line); code != 0 {
		cc.logLine(&line, code)
		_, _ = cc.br.Discard(r.Size) // the head is answered: the next one follows it
		return cc.skipBody(n) && cc.local(code, body, clientClose, extra)
	}
	if n > int64(cfg.MaxBodySize) {
		cc.buildRID()
		cc.logLine(&line, 413)
		cc.local(413, "request body too large\n", true, nil)
		cc.linger = true
		return false
	}
	rq := request{up: up, start: start, tried: cc.tried[:0]}
	if up.usesKey {
		rq.key = requestKey((*h1View)(r), up.cfg.Key, up.keyLower, cc.clientIP)
	}
	idem := isIdempotent(r.Method)
	stream := streamPath(cfg.Buffering.StreamPaths, r.URI)
	cc.isHead = string(r.Method) == "HEAD"
	cc.buildHead(r, rte)
	_, _ = cc.br.Discard(r.Size) // r's slices are invalid from here on

	cc.n, cc.buffered, cc.streamed = n, n == 0, false
	if n > 0 && n <= int64(up.cfg.Retry.BufferBody) {
		if cap(cc.body) < int(n) {
			cc.body = make([]byte, n)
		}
		cc.body = cc.body[:n]
		cc.deadline = time.Now().Add(cfg.Timeouts.Idle.D())
		_ = cc.c.SetReadDeadline(cc.deadline)
		if _, err := io.ReadFull(cc.br, cc.body); err != nil {
			return false
		}
		cc.buffered = true
	}
	rq.replayable = (idem || cc.idemKey) && cc.buffered
	cc.replayable = rq.replayable

	res := up.run(context.Background(), g, &rq, cc)
	cc.tried = rq.tried
	line.retries = rq.retries
	if res.t == nil {
		cc.busy.Store(nil)
		var hdr []byte
		if res.reason == reasonAtCapacity {
			hdr = retryAfter(up.cfg.Queue.MaxWait.D())
		}
		line.reason = res.reason
		if res.code == statusClientGone {
			cc.logLine(&line, res.code) // nobody to answer
			return false
		}
		unread := n
		if cc.buffered {
			unread = 0
		}
		if cc.streamed {
			unread, clientClose = 0, true // some of the body went to a target: the rest is not worth reading
		}
		ok := cc.skipBody(unread) && cc.local(res.code, failureBody(res.code, res.reason), clientClose, hdr)
		cc.logLine(&line, res.code)
		return ok
	}
	uc := cc.uc
	cc.uc = nil
	keep, upKeep, rerr := cc.relay(uc, &cc.res, cc.isHead, clientClose, stream, rte.respHdr)
	var targetErr error
	if rerr != nil {
		var we *h1.WriteError
		if !errors.As(rerr, &we) {
			targetErr = rerr // the target broke mid-body
		}
	}
	end := time.Now()
	cc.now = end
	// The connection goes back before the pick ends: ending it wakes a
	// waiter, which would otherwise find the pool empty and dial.
	cc.busy.Store(nil)
	if upKeep && rerr == nil {
		res.t.pool.put(uc, end)
	} else {
		uc.c.Close()
	}
	up.finish(g, &res, end, targetErr)
	res.t.m.dur.Observe(end.Sub(start).Seconds())
	line.target = res.t.addr
	// The pick ended before the response leaves for the client (relay
	// left it in the spool, unless it streamed): a slow client holds no
	// permit, and its next request already sees the target's permit
	// back. The access line is written after the response, so its write
	// is not in the response's way.
	cc.sp.now = end
	ok := cc.flush(keep && rerr == nil)
	cc.logLine(&line, res.status)
	return ok
}

// localAnswer is what the gateway answers for cc.req itself, before any
// target, on the goroutine path and the event loop alike: the route's
// redirect, 404 when no route matched, 429 past the route's rate limit.
// code 0: none, the request goes to up. extra is a header field to add
// (Location, Retry-After); line gets the upstream and the reason.
func (cc *clientConn) localAnswer(rte *route, up *upstream, line *accessLine) (code int, body string, extra []byte) {
	r := &cc.req
	if rte != nil && rte.redirect != nil {
		cc.buildRID()
		line.reason = "redirect"
		cc.scr2 = append(cc.scr2[:0], "Location: "...)
		cc.scr2 = rte.redirect.appendLocation(cc.scr2, r.Host, r.URI)
		cc.scr2 = append(cc.scr2, "\r\n"...)
		return rte.redirect.status, "", cc.scr2
	}
	if up == nil {
		cc.buildRID()
		return 404, "no route\n", nil
	}
	line.up = up
	if rte.limit != nil {
		key := cc.clientIP()
		if h := rte.limit.header; h != "" {
			v, _ := (*h1View)(r).header(h)
			key = string(v)
		}
		if ok, wait := rte.limit.allow(key); !ok {
			rte.limited.Inc()
			cc.buildRID()
			line.reason = reasonRateLimited
			return 429, failureBody(429, reasonRateLimited), retryAfter(wait)
		}
	}
	return 0, "", nil
}

// streamPath reports whether uri is under one of buffering.stream_paths.
func streamPath(paths []string, uri []byte) bool {
	for _, p := range paths {
		if len(uri) >= len(p) && string(uri[:len(p)]) == p {
			return true
		}
	}
	return false
}

// exchange sends cc's request to t and reads the response head into
// cc.res, leaving its connection in cc.uc.
func (cc *clientConn) exchange(ctx context.Context, t *target, now time.Time, headTO time.Duration) (int, bool, error) {
	uc, written, err := exchangeOn(ctx, t, now, cc, cc.replayable, cc.n > 0, cc.isHead, headTO, &cc.res)
	if err != nil {
		return 0, written, err
	}
	cc.uc = uc
	return cc.res.Status, true, nil
}

func (cc *clientConn) loadHeader() []byte { return responseLoad(&cc.res) }

// upSender is a transport's request, as exchangeOn sends it on a target
// connection: the fast path's clientConn, and the net/http path's own
// exchange (transport_h2.go).
type upSender interface {
	// dial connects to t, for as long as the client stays.
	dial(ctx context.Context, t *target) (*upConn, error)
	// send writes the whole request and flushes it; errClientGone when
	// the client's side of a streamed body broke.
	send(uc *upConn) error
	// watchHead returns a context that ends when the client leaves
	// while the response head is awaited, and a function that ends the
	// watch.
	watchHead(ctx context.Context) (context.Context, func())
}

// exchangeOn sends s's request to t and reads the response head into
// res, returning the connection it is on. A pooled connection the target
// closed while idle is replaced by a fresh one, once, only for a
// replayable request (the first write may have reached the target); a
// request that must not run twice goes only on a connection known open.
// hasBody: sending took a client's time, so now is read again after it.
func exchangeOn(ctx context.Context, t *target, now time.Time, s upSender, replayable, hasBody, isHead bool, headTO time.Duration, res *h1.Response) (*upConn, bool, error) {
	uc, reused := t.pool.get(now)
	if reused && !replayable && !uc.alive() {
		uc.c.Close()
		uc = nil
	}
	var err error
	if uc == nil {
		if uc, err = s.dial(ctx, t); err != nil {
			return nil, false, err
		}
		reused = false
	}
	written := false
	for {
		uc.wrote = 0
		err = s.send(uc)
		written = written || uc.wrote > 0 || errors.Is(err, errClientGone)
		if err == nil {
			if hasBody {
				now = time.Now() // reading and sending a body takes a client's time
			}
			// A pooled connection keeps a deadline still half a timeout
			// away (no timer reset per request), but never one past this
			// attempt's: a try timeout is shorter than response_header.
			if left := uc.deadline.Sub(now); left < headTO/2 || left > headTO {
				uc.deadline = now.Add(headTO)
				_ = uc.c.SetReadDeadline(uc.deadline)
			}
			if err = readHeadWatched(ctx, s, uc, res); err == nil {
				if !h1.NoBody(res.Status, isHead) && (res.ContentLength < 0 || int64(uc.br.Buffered()) < int64(res.Size)+res.ContentLength) {
					// More body to read: no response_header limit on it.
					uc.deadline = time.Time{}
					_ = uc.c.SetReadDeadline(uc.deadline)
				}
				return uc, true, nil
			}
		}
		uc.c.Close()
		if errors.Is(err, errClientGone) {
			return nil, written, err
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, written, errTimeout
		}
		if reused && replayable && uc.br.Buffered() == 0 && !errors.Is(err, h1.ErrMalformed) && err != errSwitched {
			// A stale keep-alive connection: nothing came back.
			reused = false
			if uc, err = s.dial(ctx, t); err != nil {
				return nil, written, err
			}
			continue
		}
		return nil, written, err
	}
}

// readHeadWatched reads the response head unless the client leaves
// first (errClientGone): a request whose client left no longer holds its
// target's permit until the target answers or timeouts.response_header
// ends it, which against a target that accepts and never answers (a
// black hole) was every permit, each for 30 s.
func readHeadWatched(ctx context.Context, s upSender, uc *upConn, res *h1.Response) error {
	wctx, stop := s.watchHead(ctx)
	unwatch := context.AfterFunc(wctx, func() {
		_ = uc.c.SetReadDeadline(time.Unix(1, 0)) // ends the read at once
	})
	err := readHead(uc, res)
	left := !unwatch() // the client left (or the request ended) while the head was awaited
	stop()
	if left {
		return errClientGone
	}
	return err
}

// headWatchAfter is how long the fast path awaits a response head before
// it watches the client for leaving (watchAfter): most heads come
// sooner, and watching costs a goroutine.
const headWatchAfter = 20 * time.Millisecond

func (cc *clientConn) watchHead(ctx context.Context) (context.Context, func()) {
	return cc.watchAfter(ctx, headWatchAfter)
}

// dial connects to t while watching the client: one that leaves ends
// the dial.
func (cc *clientConn) dial(ctx context.Context, t *target) (*upConn, error) {
	ctx, stop := cc.watch(ctx)
	uc, err := t.pool.dial(ctx)
	stop()
	return uc, err
}

func (cc *clientConn) send(uc *upConn) error {
	cc.busy.Store(uc)
	if _, err := uc.bw.Write(cc.out); err != nil {
		return err
	}
	if cc.n > 0 {
		if cc.buffered {
			if _, err := uc.bw.Write(cc.body); err != nil {
				return err
			}
		} else {
			cc.deadline = time.Now().Add(cc.g.cfg().Timeouts.Idle.D())
			_ = cc.c.SetReadDeadline(cc.deadline)
			cc.streamed = true
			if err := h1.CopyN(uc.bw, cc.br, cc.n); err != nil {
				var we *h1.WriteError
				if !errors.As(err, &we) {
					return errClientGone
				}
				return err
			}
		}
	}
	return uc.bw.Flush()
}

// readHead reads the response head, skipping interim 1xx responses.
func readHead(uc *upConn, res *h1.Response) error {
	for {
		if err := h1.ReadResponse(uc.br, upReadBuf, res); err != nil {
			return err
		}
		if res.Status >= 200 {
			return nil
		}
		if res.Status == 101 {
			return errSwitched // neither transport sends Upgrade on a pooled connection
		}
		if _, err := uc.br.Discard(res.Size); err != nil {
			return err
		}
	}
}

// drop discards the response in cc.uc before a retry.
func (cc *clientConn) drop(t *target) {
	uc := cc.uc
	cc.uc = nil
	discard(t, uc, &cc.res, cc.isHead)
}

// discard drops a response read up to its head. The connection goes back
// to the pool only when the whole response is already in its buffer:
// waiting for the rest would hold the retry on a target that may never
// send it (a body read has no deadline).
func discard(t *target, uc *upConn, res *h1.Response, isHead bool) {
	n := int64(res.Size)
	if !h1.NoBody(res.Status, isHead) {
		n += res.ContentLength // -1 (chunked, until EOF): never whole
	}
	if !res.Close && n >= int64(res.Size) && int64(uc.br.Buffered()) >= n {
		_, _ = uc.br.Discard(int(n))
		t.pool.put(uc, time.Now())
		return
	}
	uc.c.Close()
}
