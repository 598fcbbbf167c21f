package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// provider is one simulated upstream: a real HTTP server on loopback with
// the scenario's permits and exponential service times.
type provider struct {
	spec  Provider
	url   string
	srv   *http.Server
	start atomic.Int64 // unix ns when the current run started

	busy     atomic.Int64
	served   atomic.Int64
	rejected atomic.Int64

	mu  sync.Mutex
	rng *rand.Rand
}

// providers are the scenario's providers, started once and reset before
// each contender.
type providers struct {
	list []*provider
}

func startProviders(sc *Scenario) (*providers, error) {
	ps := &providers{}
	for i, spec := range sc.Providers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ps.Close()
			return nil, fmt.Errorf("provider %s: %w", spec.Name, err)
		}
		p := &provider{
			spec: spec,
			url:  "http://" + ln.Addr().String(),
			rng:  rand.New(rand.NewPCG(sc.Seed, uint64(i)+1)),
		}
		p.start.Store(time.Now().UnixNano())
		p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = p.srv.Serve(ln) }()
		ps.list = append(ps.list, p)
	}
	return ps, nil
}

// URLs returns the providers' base URLs, in scenario order.
func (ps *providers) URLs() []string {
	out := make([]string, len(ps.list))
	for i, p := range ps.list {
		out[i] = p.url
	}
	return out
}

// Reset starts the stage clock at start and zeroes the counters.
func (ps *providers) Reset(start time.Time) {
	for _, p := range ps.list {
		p.start.Store(start.UnixNano())
		p.served.Store(0)
		p.rejected.Store(0)
	}
}

// Idle waits until no request holds a permit (the previous contender's
// requests have drained), up to timeout.
func (ps *providers) Idle(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		busy := int64(0)
		for _, p := range ps.list {
			busy += p.busy.Load()
		}
		if busy == 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Close stops the servers.
func (ps *providers) Close() {
	for _, p := range ps.list {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = p.srv.Shutdown(ctx)
		cancel()
		_ = p.srv.Close()
	}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := p.spec.stageAt(time.Duration(time.Now().UnixNano() - p.start.Load()))
	for {
		b := p.busy.Load()
		if b >= int64(st.Permits) {
			p.rejected.Add(1)
			w.Header().Set("Content-Length", "9")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("no permit"))
			return
		}
		if p.busy.CompareAndSwap(b, b+1) {
			break
		}
	}
	p.mu.Lock()
	d := time.Duration(p.rng.ExpFloat64() * float64(st.AvgRTT))
	p.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		p.busy.Add(-1)
		return
	}
	p.busy.Add(-1)
	p.served.Add(1)
	w.Header().Set("Content-Length", "2")
	_, _ = w.Write([]byte("ok"))
}
