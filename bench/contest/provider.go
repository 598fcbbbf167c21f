package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance/probe"
)

// provider is one simulated upstream: a real HTTP server on loopback with
// the scenario's permits and exponential service times.
type provider struct {
	spec  Provider
	url   string
	alarm *alarm // ends service times (shared by the providers)
	srv   *http.Server
	start atomic.Int64 // unix ns when the current run started

	busy     atomic.Int64
	served   atomic.Int64
	rejected atomic.Int64

	mu   sync.Mutex
	rngs []*rand.Rand // one stream per segment, restarted for each contender
	seed [2]uint64
	segs []time.Duration // the scenario's change points, which start its segments
	// Service times drawn for requests admitted in the measured phase,
	// each as a multiple of its stage's mean: the luck of the draws.
	drawSum float64
	drawN   int64
	// How much longer than drawn the served requests of the measured
	// phase held their permits: the alarm's thread waited for a CPU or
	// for the Go scheduler, the machine busy with the contender's work.
	overNs atomic.Int64
	overN  atomic.Int64

	// Permit accounting while the scenario's connections exceed its
	// permits (every free permit is then one a perfect balancer fills):
	// idle and total permit-nanoseconds in the measured phase.
	overloaded func(time.Duration) bool
	warmup     time.Duration // the measured phase: [warmup, end)
	end        time.Duration
	acct       sync.Mutex
	holding    int64 // permits taken, as the accounting saw it
	last       int64 // unix ns of the last change
	idleNs     float64
	permitNs   float64
	// While the permits exceed the connections: permit-nanoseconds held
	// and the nanoseconds measured.
	heldNs  float64
	spareNs float64
}

// providers are the scenario's providers, started once and reset before
// each contender.
type providers struct {
	list  []*provider
	alarm *alarm
}

func startProviders(sc *Scenario) (*providers, error) {
	al, err := newAlarm()
	if err != nil {
		return nil, fmt.Errorf("providers' alarm: %w", err)
	}
	ps := &providers{alarm: al}
	for i, spec := range sc.Providers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ps.Close()
			return nil, fmt.Errorf("provider %s: %w", spec.Name, err)
		}
		p := &provider{
			spec:       spec,
			alarm:      al,
			url:        "http://" + ln.Addr().String(),
			seed:       [2]uint64{sc.Seed, uint64(i) + 1},
			segs:       sc.segments(),
			overloaded: sc.OverloadedAt,
			warmup:     sc.Load.Warmup.D(),
			end:        sc.Load.Warmup.D() + sc.Load.Duration.D(),
		}
		p.restartDraws()
		p.start.Store(time.Now().UnixNano())
		// Every response reports the provider's load (Fulcrum-Load), as a
		// Go target would with the wrapper: its requests in flight, this
		// one not counted, and its mean time per request lately, fast
		// refusals and faults included. Rows other than probe ignore it.
		p.srv = &http.Server{Handler: probe.Handler(p), ReadHeaderTimeout: 10 * time.Second}
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

// Reset starts the stage clock at start, zeroes the counters and restarts
// the service-time draws.
func (ps *providers) Reset(start time.Time) {
	for _, p := range ps.list {
		// Every contender draws the same service times, in the order
		// its requests take the provider's permits: with a fresh stream
		// per contender a run's mean service time alone moved its
		// successes by half a percent.
		p.mu.Lock()
		p.restartDraws()
		p.drawSum, p.drawN = 0, 0
		p.mu.Unlock()
		p.start.Store(start.UnixNano())
		p.served.Store(0)
		p.rejected.Store(0)
		p.overNs.Store(0)
		p.overN.Store(0)
		p.acct.Lock()
		p.last, p.idleNs, p.permitNs, p.heldNs, p.spareNs = start.UnixNano(), 0, 0, 0, 0
		p.acct.Unlock()
	}
}

// Shares reads the two diagnostics of the measured phase up to at:
// idle, the share of the providers' permit-time that stood free while the
// load exceeded the permits (the time a balancer lost between one
// request's end and the next one's arrival), and busy, the share of
// connection-time spent holding a permit while the permits exceeded the
// connections (the rest is the balancer's and the client's own time per
// request, and waits in a queue that should not stand). A share is 0 when
// the scenario has no such phase.
func (ps *providers) Shares(at time.Time, conns int) (idle, busy float64) {
	var idleNs, permitNs, heldNs, span float64
	for _, p := range ps.list {
		p.account(at.UnixNano(), 0)
		p.acct.Lock()
		idleNs += p.idleNs
		permitNs += p.permitNs
		heldNs += p.heldNs
		span = max(span, p.spareNs)
		p.acct.Unlock()
	}
	if permitNs > 0 {
		idle = idleNs / permitNs
	}
	if span > 0 && conns > 0 {
		busy = heldNs / (span * float64(conns))
	}
	return idle, busy
}

// restartDraws starts every segment's stream of service times afresh. A
// stream per segment of the scenario (between two points where any
// provider changes stage), not one per provider: with one, how many draws
// a balancer's placement had used before decided which part of the stream
// a later segment got, and where the load exceeds the permits (every
// permit busy, whoever balances) the successes go as 1/(mean drawn): on
// contest's last stage the capacity rows drew 1.5 % unluckier than the
// round-robin peers, round after round, and with other seeds luckier. Per
// provider stage was not enough: on flap the steady providers have one
// stage, so the segments where only they served (the flapping one down)
// drew from wherever the earlier placement had left their streams, and
// one of those seconds put both capacity rows 5 % behind both peers.
// Per segment, the k-th request a provider admits in it gets the same
// draw whatever came before. The caller holds p.mu (or p is not yet
// shared).
func (p *provider) restartDraws() {
	p.rngs = p.rngs[:0]
	for i := 0; i <= len(p.segs); i++ {
		p.rngs = append(p.rngs, rand.New(rand.NewPCG(p.seed[0], p.seed[1]<<16|uint64(i))))
	}
}

// segment is the index of the segment in force at offset t: 0 before
// the first change point after the start.
func (p *provider) segment(t time.Duration) int {
	return sort.Search(len(p.segs), func(i int) bool { return p.segs[i] > t })
}

// DrawMean is the mean service time drawn for the requests admitted in
// the measured phase, as a multiple of their stages' means (1 on
// average). Every contender draws from the same stream per segment (see
// restartDraws), so where every permit is busy they draw alike; where
// permits stand spare, which provider a request goes to still decides
// which draw it gets, and in a stage where the load exceeds the permits
// successes go as 1/DrawMean, whatever the balancer did.
func (ps *providers) DrawMean() float64 {
	var sum float64
	var n int64
	for _, p := range ps.list {
		p.mu.Lock()
		sum += p.drawSum
		n += p.drawN
		p.mu.Unlock()
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Overrun is the mean time by which the measured phase's served requests
// held their permits beyond their drawn service times.
func (ps *providers) Overrun() time.Duration {
	var sum, n int64
	for _, p := range ps.list {
		sum += p.overNs.Load()
		n += p.overN.Load()
	}
	if n == 0 {
		return 0
	}
	return time.Duration(sum / n)
}

// account records a change of delta permits taken at now (unix ns).
func (p *provider) account(now, delta int64) {
	p.acct.Lock()
	if p.last != 0 && now > p.last {
		at := time.Duration(p.last - p.start.Load())
		el := float64(now - p.last)
		switch {
		case at < p.warmup || at >= p.end:
		case p.overloaded(at):
			permits := int64(p.spec.stageAt(at).capacity())
			p.idleNs += float64(max(permits-p.holding, 0)) * el
			p.permitNs += float64(permits) * el
		default:
			p.heldNs += float64(p.holding) * el
			p.spareNs += el
		}
	}
	p.holding += delta
	p.last = max(now, p.last)
	p.acct.Unlock()
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
	ps.alarm.close()
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Duration(time.Now().UnixNano() - p.start.Load())
	si := p.spec.stageIndex(at)
	st := p.spec.Stages[si]
	switch st.Fault {
	case "500", "503":
		// A fast failure: no permit, no wait.
		p.rejected.Add(1)
		w.Header().Set("Content-Length", "5")
		if st.Fault == "500" {
			w.WriteHeader(http.StatusInternalServerError)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte("fault"))
		return
	case "blackhole":
		// Accepted and never answered: only the client's (or the
		// balancer's) timeout ends it.
		p.rejected.Add(1)
		<-r.Context().Done()
		return
	}
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
	took := time.Now()
	p.account(took.UnixNano(), 1)
	p.mu.Lock()
	f := p.rngs[p.segment(at)].ExpFloat64()
	measured := at >= p.warmup && at < p.end
	if measured {
		p.drawSum += f
		p.drawN++
	}
	p.mu.Unlock()
	// The permit goes back at took + the draw, from the alarm's thread,
	// or when the client leaves, whichever comes first: how soon this
	// goroutine runs again depends on how busy the process is, which a
	// contender's refused attempts decide.
	var held atomic.Bool
	held.Store(true)
	release := func() bool {
		if !held.CompareAndSwap(true, false) {
			return false
		}
		p.busy.Add(-1)
		p.account(time.Now().UnixNano(), -1)
		return true
	}
	due := took.Add(time.Duration(f * float64(st.AvgRTT)))
	end := func() {
		if release() && measured {
			p.overNs.Add(int64(time.Since(due)))
			p.overN.Add(1)
		}
	}
	select {
	case <-p.alarm.at(due, end):
	case <-r.Context().Done():
		release()
		return
	}
	p.served.Add(1)
	w.Header().Set("Content-Length", "2")
	_, _ = w.Write([]byte("ok"))
}
