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
)

// forwarder is the "library" contender: the smallest HTTP forwarder around
// a balance.Balancer (Wait, a pooled transport, a retry on 503), so the
// strategies can be measured without the gateway's own costs.
type forwarder struct {
	b        *balance.Balancer
	client   *http.Client
	maxWait  time.Duration
	attempts int
}

var errUpstream5xx = errors.New("upstream 5xx")

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var tried []*balance.Endpoint
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(r.Context(), f.maxWait)
		p, err := f.b.Wait(ctx, balance.PickInfo{Exclude: tried})
		cancel()
		if errors.Is(err, balance.ErrNoneAvailable) && len(tried) > 0 {
			// Every target tried: try them all again.
			tried = tried[:0]
			ctx, cancel = context.WithTimeout(r.Context(), f.maxWait)
			p, err = f.b.Wait(ctx, balance.PickInfo{})
			cancel()
		}
		if err != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "no capacity: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.Addr()+r.URL.RequestURI(), nil)
		resp, err := f.client.Do(req)
		if err != nil {
			p.Done(err)
			if attempt < f.attempts && r.Context().Err() == nil {
				tried = append(tried, p.Endpoint())
				continue
			}
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.Done(balance.ErrRejected)
			if attempt < f.attempts {
				tried = append(tried, p.Endpoint())
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
		p.Done(err)
		return
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
			if mode != learned {
				t.MaxConcurrency = max(1, env.sc.Providers[i].Stages[0].Permits)
			}
			targets = append(targets, t)
		}
		if err := b.Update(targets); err != nil {
			return "", nil, err
		}
		tr := &http.Transport{
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		}
		f := &forwarder{b: b, client: &http.Client{Transport: tr}, maxWait: 5 * time.Second, attempts: 2}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		done := make(chan struct{})
		if mode == oracle {
			go followStages(env, b, targets, done)
		}
		tl := &Timeline{}
		traced := make(chan struct{})
		go func() {
			defer close(traced)
			traceLimits(env, b, tl, done)
		}()
		stop := func() {
			close(done)
			<-traced
			env.timeline = tl
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			_ = srv.Close()
			tr.CloseIdleConnections()
			if env.verbose {
				for _, s := range b.Endpoints() {
					fmt.Fprintf(env.log, "    %s limit=%d in-flight=%d requests=%d failures=%d avg=%v\n",
						s.Target.Addr, s.Limit, s.InFlight, s.Requests, s.Failures, s.AvgLatency.Round(time.Millisecond))
				}
			}
		}
		return "http://" + ln.Addr().String() + "/", stop, nil
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
func traceLimits(env *runEnv, b *balance.Balancer, tl *Timeline, done chan struct{}) {
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
		eps := b.Endpoints()
		lim, per, in := make([]int64, len(eps)), make([]int, len(eps)), make([]int64, len(eps))
		line := fmt.Sprintf("    %5.1fs", at.Seconds())
		for i, s := range eps {
			st := env.sc.Providers[i].stageAt(at)
			lim[i], per[i], in[i] = s.Limit, st.Permits, s.InFlight
			line += fmt.Sprintf("  %s %d/%d (in %d, %v)", env.sc.Providers[i].Name, s.Limit, st.Permits, s.InFlight, s.AvgLatency.Round(time.Millisecond))
		}
		tl.T = append(tl.T, at.Seconds())
		tl.Limit, tl.Permits, tl.InFlight = append(tl.Limit, lim), append(tl.Permits, per), append(tl.InFlight, in)
		if env.verbose && n%5 == 0 {
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
			ts[i].MaxConcurrency = max(1, env.sc.Providers[i].stageAt(at).Permits)
		}
		_ = b.Update(ts)
	}
}
