package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	_ "github.com/fulcrum-lb/fulcrum/balance/capacity" // the library contenders run "capacity"
	"github.com/fulcrum-lb/fulcrum/balance/probe"      // and "probe", fed the providers' reports
)

// forwarder is the "library" contender: the smallest HTTP forwarder around
// a picker (a balance.Balancer, or a peer library), with a pooled
// transport and one retry on 503 to another target, so the strategies can
// be measured without the gateway's own costs.
type forwarder struct {
	p        picker
	client   *http.Client
	attempts int
}

// picker is what the forwarder asks for a target.
type picker interface {
	// pick chooses a target not in tried (the keys of earlier picks),
	// waiting where the picker queues. balance.ErrNoneAvailable says
	// every target was excluded; any other error refuses the request.
	pick(ctx context.Context, tried []any) (picked, error)
}

// picked is one pick: the target's URL, a key to exclude it with, and
// done, told how the request went (nil, balance.ErrRejected for a 503 or
// 429, errUpstream5xx for another 5xx, or the transport's error). load,
// where not nil, is handed the target's own load report (the response's
// Fulcrum-Load header) when the response's head arrives, before done.
type picked struct {
	addr string
	key  any
	done func(err error)
	load func(balance.LoadReport)
}

var errUpstream5xx = errors.New("upstream 5xx")

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var tried []any
	for attempt := 1; ; attempt++ {
		p, err := f.p.pick(r.Context(), tried)
		if errors.Is(err, balance.ErrNoneAvailable) && len(tried) > 0 {
			// Every target tried: try them all again.
			tried = tried[:0]
			p, err = f.p.pick(r.Context(), nil)
		}
		if err != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "no capacity: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.addr+r.URL.RequestURI(), nil)
		resp, err := f.client.Do(req)
		if err != nil {
			p.done(err)
			if attempt < f.attempts && r.Context().Err() == nil {
				tried = append(tried, p.key)
				continue
			}
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if p.load != nil {
			// Refusals and faults report too: a target's load is what
			// it says, whatever it answered.
			if l, ok := probe.FromHeader(resp.Header); ok {
				p.load(l)
			}
		}
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.done(balance.ErrRejected)
			if attempt < f.attempts {
				tried = append(tried, p.key)
				continue
			}
			w.WriteHeader(resp.StatusCode)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, err = io.Copy(w, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode >= 500 {
			err = errUpstream5xx
		}
		p.done(err)
		return
	}
}

// balancePicker picks with a balance.Balancer, waiting up to maxWait in
// its queue.
type balancePicker struct {
	b       *balance.Balancer
	maxWait time.Duration
}

func (bp balancePicker) pick(ctx context.Context, tried []any) (picked, error) {
	var ex []*balance.Endpoint
	for _, k := range tried {
		ex = append(ex, k.(*balance.Endpoint))
	}
	ctx, cancel := context.WithTimeout(ctx, bp.maxWait)
	defer cancel()
	p, err := bp.b.Wait(ctx, balance.PickInfo{Exclude: ex})
	if err != nil {
		return picked{}, err
	}
	return picked{addr: p.Addr(), key: p.Endpoint(), done: p.Done, load: p.ReportLoad}, nil
}

// serveForwarder serves f on a loopback port and returns its URL and a
// function that stops it.
func serveForwarder(f *forwarder, tr *http.Transport) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		tr.CloseIdleConnections()
	}
	return "http://" + ln.Addr().String() + "/", stop, nil
}

// newTransport is the forwarders' pooled transport to the providers.
func newTransport() *http.Transport {
	return &http.Transport{
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}

// limitMode says where a library contender's target limits come from.
type limitMode int

const (
	learned    limitMode = iota // none configured: the strategy learns them
	configured                  // each provider's first-stage permits, as a user would write them
	oracle                      // the current stage's permits, updated as the stages change (reads the providers' settings, which the contest forbade: a yardstick, not a contender)
)

// libraryContender runs a forwarder with the strategy on a loopback port.
func libraryContender(strategy string, mode limitMode) starter {
	return func(ctx context.Context, env *runEnv) (string, func(), error) {
		b, err := balance.New(strategy, balance.Options{})
		if err != nil {
			return "", nil, err
		}
		var targets []balance.Target
		for i, u := range env.urls {
			t := balance.Target{Addr: u, Weight: 1}
			switch mode {
			case configured:
				// A static limit, divided between the fleet's gateways.
				t.MaxConcurrency = env.perGateway(max(1, env.sc.Providers[i].Stages[0].Permits))
			case oracle:
				t.MaxConcurrency = max(1, env.sc.Providers[i].Stages[0].Permits)
			}
			targets = append(targets, t)
		}
		if err := b.Update(targets); err != nil {
			return "", nil, err
		}
		tr := newTransport()
		f := &forwarder{p: balancePicker{b: b, maxWait: 5 * time.Second}, client: &http.Client{Transport: tr}, attempts: 2}
		url, stopServer, err := serveForwarder(f, tr)
		if err != nil {
			return "", nil, err
		}
		done := make(chan struct{})
		if mode == oracle {
			go followStages(env, b, targets, done)
		}
		tl := &Timeline{}
		traced := make(chan struct{})
		go func() {
			defer close(traced)
			traceLimits(env, balanceLimits(b), tl, done)
		}()
		stop := func() {
			close(done)
			<-traced
			env.timelines = append(env.timelines, tl)
			stopServer()
			if env.verbose {
				for _, s := range b.Endpoints() {
					fmt.Fprintf(env.log, "    %s limit=%d in-flight=%d requests=%d failures=%d avg=%v\n",
						s.Target.Addr, s.Limit, s.InFlight, s.Requests, s.Failures, s.AvgLatency.Round(time.Millisecond))
				}
			}
		}
		return url, stop, nil
	}
}

// balanceLimits samples a balancer's per-target limits and picks in
// flight for traceLimits.
func balanceLimits(b *balance.Balancer) func() (lim, in []int64) {
	return func() (lim, in []int64) {
		for _, s := range b.Endpoints() {
			lim, in = append(lim, s.Limit), append(in, s.InFlight)
		}
		return lim, in
	}
}

// Timeline is a library contender's per-target trace: every
// timelineEvery from the start of the run (warm-up included), each
// target's limit (learned, configured or the oracle's), the permits the
// provider really had then, and the picks in flight. It shows where a
// learner lags the permits; the SVG draws it.
type Timeline struct {
	Targets  []string  `json:"targets"`
	T        []float64 `json:"t_seconds"`
	Limit    [][]int64 `json:"limit"`   // [sample][target]
	Permits  [][]int   `json:"permits"` // [sample][target]
	InFlight [][]int64 `json:"in_flight"`
}

const timelineEvery = 100 * time.Millisecond

// traceLimits samples each target's limit and in-flight into tl every
// timelineEvery of the measured run, and with -v prints every fifth
// sample, to watch the learner follow the stages.
func traceLimits(env *runEnv, sample func() (lim, in []int64), tl *Timeline, done chan struct{}) {
	select {
	case <-env.started:
	case <-done:
		return
	}
	for _, p := range env.sc.Providers {
		tl.Targets = append(tl.Targets, p.Name)
	}
	t := time.NewTicker(timelineEvery)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-done:
			return
		case <-t.C:
		}
		at := time.Since(env.start)
		if at > env.sc.Load.Warmup.D()+env.sc.Load.Duration.D() {
			return
		}
		lim, in := sample()
		per := make([]int, len(lim))
		line := fmt.Sprintf("    %5.1fs", at.Seconds())
		for i := range lim {
			st := env.sc.Providers[i].stageAt(at)
			per[i] = st.capacity()
			line += fmt.Sprintf("  %s %d/%d (in %d)", env.sc.Providers[i].Name, lim[i], per[i], in[i])
		}
		tl.T = append(tl.T, at.Seconds())
		tl.Limit, tl.Permits, tl.InFlight = append(tl.Limit, lim), append(tl.Permits, per), append(tl.InFlight, in)
		if env.verbose && n%traceEvery == 0 {
			fmt.Fprintln(env.log, line)
		}
	}
}

// followStages updates the targets' limits to each stage's permits when
// the stage starts (the oracle).
func followStages(env *runEnv, b *balance.Balancer, targets []balance.Target, done chan struct{}) {
	select {
	case <-env.started:
	case <-done:
		return
	}
	for _, at := range env.sc.changePoints() {
		select {
		case <-time.After(time.Until(env.start.Add(at))):
		case <-done:
			return
		}
		ts := append([]balance.Target(nil), targets...)
		for i := range ts {
			ts[i].MaxConcurrency = max(1, env.sc.Providers[i].stageAt(at).capacity())
		}
		_ = b.Update(ts)
	}
}

// traceEvery is how many samples -v prints one of (5: every half
// second).
var traceEvery = 5
