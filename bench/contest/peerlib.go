package main

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/selector"
	"github.com/go-kratos/kratos/v2/selector/p2c"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// The learning peers run in the library forwarder (forwarder), so they
// pay the same costs as Fulcrum's library rows: only the pick differs.

// failsafeConfig is the failsafe-go rows' configuration, as its
// documentation recommends: the builder's defaults (NewBuilder: limits
// 1..200 starting at 20, max limit factor 5, recent window 1s..30s and
// 50 samples at p90, baseline age 10, correlation window 50) and, with
// queueing, the factors BuildPrioritized documents as the default (queue
// up to 2x the limit, reject gradually up to 3x), waiting up to 5 s as
// the harness's other queues do.
const failsafeConfig = "one adaptivelimiter per target, adaptivelimiter.NewBuilder[any]() defaults " +
	"(WithLimits(1, 200, 20), WithMaxLimitFactor(5), WithRecentWindow(1s, 30s, 50), WithRecentQuantile(0.9), " +
	"WithBaselineWindow(10), WithCorrelationWindow(50)); pick: least loaded (lowest in flight / limit) " +
	"among the targets with a free permit; every permit Record()ed unless the client left (Drop()), as its executor does; " +
	"one retry on 503 to another target"

const failsafeQueueConfig = failsafeConfig + "; queueing: WithQueueing(2, 3) (BuildPrioritized's documented default), " +
	"WithMaxWaitTime(5s): when no target has a free permit, the one with the lowest (in flight + queued) / limit " +
	"whose limiter admits to its queue"

// failsafePicker holds one failsafe-go adaptive limiter per target.
type failsafePicker struct {
	urls     []string
	lims     []adaptivelimiter.AdaptiveLimiter[any]
	queueing bool
}

func newFailsafePicker(urls []string, queueing bool) *failsafePicker {
	fp := &failsafePicker{urls: urls, queueing: queueing}
	for range urls {
		b := adaptivelimiter.NewBuilder[any]()
		if queueing {
			b = b.WithQueueing(2, 3).WithMaxWaitTime(5 * time.Second)
		}
		fp.lims = append(fp.lims, b.Build())
	}
	return fp
}

func (fp *failsafePicker) pick(ctx context.Context, tried []any) (picked, error) {
	var cand []int
	for i := range fp.lims {
		if !slices.Contains(tried, any(i)) {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 {
		return picked{}, balance.ErrNoneAvailable
	}
	// A free permit first, least loaded first; another request may take
	// it between the look and the try, so look again.
	for range len(cand) {
		best, bestLoad := -1, 0.0
		for _, i := range cand {
			l := fp.lims[i]
			if l.Inflight() >= l.Limit() {
				continue
			}
			if load := float64(l.Inflight()) / float64(max(l.Limit(), 1)); best < 0 || load < bestLoad {
				best, bestLoad = i, load
			}
		}
		if best < 0 {
			break
		}
		if p, ok := fp.lims[best].TryAcquirePermit(); ok {
			return fp.picked(ctx, best, p), nil
		}
	}
	if !fp.queueing {
		return picked{}, adaptivelimiter.ErrExceeded
	}
	best, bestLoad := -1, 0.0
	for _, i := range cand {
		l := fp.lims[i]
		if !l.CanAcquirePermit() {
			continue // its queue refuses
		}
		if load := float64(l.Inflight()+l.Queued()) / float64(max(l.Limit(), 1)); best < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	if best < 0 {
		return picked{}, adaptivelimiter.ErrExceeded
	}
	p, err := fp.lims[best].AcquirePermitWithMaxWait(ctx, 5*time.Second)
	if err != nil {
		return picked{}, err
	}
	return fp.picked(ctx, best, p), nil
}

func (fp *failsafePicker) picked(ctx context.Context, i int, p adaptivelimiter.Permit) picked {
	return picked{addr: fp.urls[i], key: i, done: func(error) {
		if ctx.Err() != nil {
			p.Drop()
		} else {
			p.Record()
		}
	}}
}

// limits samples the limiters for traceLimits.
func (fp *failsafePicker) limits() (lim, in []int64) {
	for _, l := range fp.lims {
		lim, in = append(lim, int64(l.Limit())), append(in, int64(l.Inflight()))
	}
	return lim, in
}

const kratosConfig = "selector/p2c p2c.New() (the default EWMA nodes: latency EWMA x in flight, success-rate EWMA; " +
	"weights equal), nodes selector.NewNode(\"http\", url, nil); done(ctx, DoneInfo{Err}) with the error kratos' HTTP " +
	"client would return (errors.New(status) for a non-2xx answer, which its EWMA counts as a failure for 503 and 504 " +
	"only, or the transport error); one retry on 503 to another target (a NodeFilter excluding it)"

// kratosPicker picks with Kratos' p2c selector.
type kratosPicker struct{ sel selector.Selector }

func newKratosPicker(urls []string) *kratosPicker {
	sel := p2c.New()
	var nodes []selector.Node
	for _, u := range urls {
		nodes = append(nodes, selector.NewNode("http", u, nil))
	}
	sel.Apply(nodes)
	return &kratosPicker{sel: sel}
}

func (kp *kratosPicker) pick(ctx context.Context, tried []any) (picked, error) {
	var opts []selector.SelectOption
	if len(tried) > 0 {
		opts = append(opts, selector.WithNodeFilter(func(_ context.Context, ns []selector.Node) []selector.Node {
			out := ns[:0:0]
			for _, n := range ns {
				if !slices.Contains(tried, any(n.Address())) {
					out = append(out, n)
				}
			}
			return out
		}))
	}
	n, done, err := kp.sel.Select(ctx, opts...)
	if errors.Is(err, selector.ErrNoAvailable) {
		return picked{}, balance.ErrNoneAvailable
	}
	if err != nil {
		return picked{}, err
	}
	return picked{addr: n.Address(), key: n.Address(), done: func(err error) {
		switch {
		case errors.Is(err, balance.ErrRejected):
			err = kerrors.New(http.StatusServiceUnavailable, "", "")
		case errors.Is(err, errUpstream5xx):
			err = kerrors.New(http.StatusInternalServerError, "", "")
		}
		done(ctx, selector.DoneInfo{Err: err})
	}}, nil
}

// peerLibraryContender runs the forwarder around a peer library's picker.
// limits, when not nil, is sampled for the timeline.
func peerLibraryContender(mk func(urls []string) (picker, func() (lim, in []int64))) starter {
	return func(ctx context.Context, env *runEnv) (string, func(), error) {
		p, limits := mk(env.urls)
		tr := newTransport()
		f := &forwarder{p: p, client: &http.Client{Transport: tr}, attempts: 2}
		url, stopServer, err := serveForwarder(f, tr)
		if err != nil {
			return "", nil, err
		}
		if limits == nil {
			return url, stopServer, nil
		}
		done, traced, tl := make(chan struct{}), make(chan struct{}), &Timeline{}
		go func() {
			defer close(traced)
			traceLimits(env, limits, tl, done)
		}()
		return url, func() {
			close(done)
			<-traced
			env.timelines = append(env.timelines, tl)
			stopServer()
		}, nil
	}
}

// peerLibraries are the learning peers' rows.
func peerLibraries() []contender {
	return []contender{
		{Name: "failsafe-go adaptivelimiter", Kind: "peer", Learns: true, Config: failsafeConfig,
			start: peerLibraryContender(func(urls []string) (picker, func() (lim, in []int64)) {
				fp := newFailsafePicker(urls, false)
				return fp, fp.limits
			})},
		{Name: "failsafe-go adaptivelimiter (queueing)", Kind: "peer", Learns: true, Config: failsafeQueueConfig,
			start: peerLibraryContender(func(urls []string) (picker, func() (lim, in []int64)) {
				fp := newFailsafePicker(urls, true)
				return fp, fp.limits
			})},
		{Name: "kratos p2c", Kind: "peer", Config: kratosConfig,
			start: peerLibraryContender(func(urls []string) (picker, func() (lim, in []int64)) {
				return newKratosPicker(urls), nil
			})},
	}
}
