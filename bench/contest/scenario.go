package main

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

// Scenario is one benchmark run's providers and load.
//
//	name: contest            # optional; defaults to the file name
//	seed: 42                 # optional; seeds the providers' random delays
//	gateways: 1              # optional; N instances of each contender (fleet mode)
//	load:
//	  connections: 160       # closed-loop connections, or instead:
//	  # rate: [{at: 0s, rps: 800}, {at: 6s, rps: 2000}]   # open-loop arrivals a second
//	  timeout: 2s            # optional (default 30s): unanswered by then is an error
//	  warmup: 2s             # not scored
//	  duration: 30s          # scored
//	providers:
//	  - name: small
//	    stages:              # at: offset from the start of the warm-up
//	      - {at: 0s, permits: 20, avg_rtt: 50ms}
//	      - {at: 6s, permits: 30, avg_rtt: 40ms}
//	      - {at: 9s, fault: 503}   # fast 503s (or 500), or blackhole: accept, never answer
type Scenario struct {
	Name string `yaml:"name" json:"name"`
	Seed uint64 `yaml:"seed" json:"seed"`
	// Gateways is the fleet size: every contender but the oracle runs
	// this many instances, the load spread evenly across them (0: one).
	Gateways  int        `yaml:"gateways" json:"gateways,omitempty"`
	Load      Load       `yaml:"load" json:"load"`
	Providers []Provider `yaml:"providers" json:"providers"`
}

// Load is the load: closed-loop (Connections, each sending its next
// request when the previous one answers) or open-loop (Rate: Poisson
// arrivals at each stage's rate, whatever the answers).
type Load struct {
	Connections int         `yaml:"connections" json:"connections,omitempty"`
	Rate        []RateStage `yaml:"rate" json:"rate,omitempty"`
	// Timeout bounds each request: one not answered by then counts as an
	// error (default defaultTimeout).
	Timeout  Duration `yaml:"timeout" json:"timeout,omitempty"`
	Warmup   Duration `yaml:"warmup" json:"warmup"`
	Duration Duration `yaml:"duration" json:"duration"`
}

// RateStage is an open-loop arrival rate holding from At until the next
// stage's At.
type RateStage struct {
	At  Duration `yaml:"at" json:"at"`
	RPS float64  `yaml:"rps" json:"rps"`
}

// defaultTimeout is a request's timeout when the scenario gives none.
const defaultTimeout = 30 * time.Second

// timeout is the load's request timeout.
func (l Load) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout.D()
	}
	return defaultTimeout
}

// open says whether the load is open-loop.
func (l Load) open() bool { return len(l.Rate) > 0 }

// rateAt is the open-loop arrival rate at offset t (0 for closed loop).
func (l Load) rateAt(t time.Duration) float64 {
	r := 0.0
	for _, s := range l.Rate {
		if s.At.D() > t {
			break
		}
		r = s.RPS
	}
	return r
}

// fleet is the number of instances of each contender.
func (sc *Scenario) fleet() int { return max(sc.Gateways, 1) }

// Provider is one simulated upstream.
type Provider struct {
	Name   string  `yaml:"name" json:"name"`
	Stages []Stage `yaml:"stages" json:"stages"`
}

// Stage holds from At until the next stage's At.
type Stage struct {
	At      Duration `yaml:"at" json:"at"`
	Permits int      `yaml:"permits" json:"permits"`
	AvgRTT  Duration `yaml:"avg_rtt" json:"avg_rtt"`
	// Fault, when set, replaces the service: "500" or "503" answer every
	// request at once with that status (a fast failure, which a
	// latency-only picker takes for a fast target), "blackhole" accepts
	// the request and never answers it.
	Fault string `yaml:"fault" json:"fault,omitempty"`
}

// The faults a stage may give.
var faults = []string{"500", "503", "blackhole"}

// capacity is the permits the stage really serves with (none while it
// fails).
func (s Stage) capacity() int {
	if s.Fault != "" {
		return 0
	}
	return s.Permits
}

// Duration is a time.Duration written as "50ms" in YAML and JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a Go duration string ("50ms", "2s").
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 50ms", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write it like 50ms or 2s)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// LoadScenario reads and validates a scenario file.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if sc.Name == "" {
		base := path
		for i := len(base) - 1; i >= 0; i-- {
			if base[i] == '/' {
				base = base[i+1:]
				break
			}
		}
		if i := len(base) - len(".yaml"); i > 0 && base[i:] == ".yaml" {
			base = base[:i]
		}
		sc.Name = base
	}
	return sc, nil
}

// ParseScenario decodes a scenario strictly with the module's one config
// reader (unknown fields are errors with a did-you-mean, every problem is
// named with its line) and validates it, naming the bad field's line.
func ParseScenario(data []byte) (*Scenario, error) {
	var sc Scenario
	doc, err := confyaml.Decode(data, &sc)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if doc.Line("load") == 0 && doc.Line("providers") == 0 {
		return nil, errors.New("empty scenario: want load and providers")
	}
	if err := sc.Validate(); err != nil {
		// Validate's messages start with the field's path.
		if path, _, ok := strings.Cut(err.Error(), ":"); ok {
			if line := doc.Line(path); line > 0 {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		}
		return nil, err
	}
	return &sc, nil
}

// Limits that keep a scenario runnable on a laptop: beyond them the machine,
// not the balancer, would be measured.
const (
	maxConnections = 5000
	maxPermits     = 5000
	maxProviders   = 32
	maxRun         = time.Hour
	maxRate        = 20000 // arrivals a second
	maxGateways    = 16
	maxTimeout     = 5 * time.Minute
)

// Validate checks every field and names the first bad one.
func (sc *Scenario) Validate() error {
	l := sc.Load
	switch {
	case sc.Gateways < 0 || sc.Gateways > maxGateways:
		return fmt.Errorf("gateways: %d is outside 1..%d", sc.Gateways, maxGateways)
	case l.open() && l.Connections != 0:
		return fmt.Errorf("load.rate: give either connections (closed loop) or rate (open loop), not both")
	case !l.open() && (l.Connections < 1 || l.Connections > maxConnections):
		return fmt.Errorf("load.connections: %d is outside 1..%d", l.Connections, maxConnections)
	case l.Timeout < 0 || l.Timeout.D() > maxTimeout:
		return fmt.Errorf("load.timeout: %v is outside 0..%v", l.Timeout.D(), maxTimeout)
	case l.Warmup < 0:
		return fmt.Errorf("load.warmup: %v is negative", l.Warmup.D())
	case l.Duration <= 0:
		return fmt.Errorf("load.duration: must be above 0 (got %v)", l.Duration.D())
	case l.Warmup.D()+l.Duration.D() > maxRun:
		return fmt.Errorf("load.duration: warmup + duration %v exceeds %v", l.Warmup.D()+l.Duration.D(), maxRun)
	case len(sc.Providers) == 0:
		return errors.New("providers: at least one is needed")
	case len(sc.Providers) > maxProviders:
		return fmt.Errorf("providers: %d is more than %d", len(sc.Providers), maxProviders)
	}
	for j, r := range l.Rate {
		switch {
		case j == 0 && r.At != 0:
			return fmt.Errorf("load.rate[0].at: the first rate must start at 0s (got %v)", r.At.D())
		case j > 0 && r.At <= l.Rate[j-1].At:
			return fmt.Errorf("load.rate[%d].at: %v is not after the previous rate's %v", j, r.At.D(), l.Rate[j-1].At.D())
		case r.RPS < 0 || r.RPS > maxRate || math.IsNaN(r.RPS):
			return fmt.Errorf("load.rate[%d].rps: %v is outside 0..%d", j, r.RPS, maxRate)
		}
	}
	seen := map[string]bool{}
	for i, p := range sc.Providers {
		switch {
		case p.Name == "":
			return fmt.Errorf("providers[%d].name: empty", i)
		case seen[p.Name]:
			return fmt.Errorf("providers[%d].name: %q appears twice", i, p.Name)
		case len(p.Stages) == 0:
			return fmt.Errorf("providers[%d].stages: at least one is needed", i)
		case p.Stages[0].At != 0:
			return fmt.Errorf("providers[%d].stages[0].at: the first stage must start at 0s (got %v)", i, p.Stages[0].At.D())
		}
		seen[p.Name] = true
		for j, s := range p.Stages {
			switch {
			case j > 0 && s.At <= p.Stages[j-1].At:
				return fmt.Errorf("providers[%d].stages[%d].at: %v is not after the previous stage's %v", i, j, s.At.D(), p.Stages[j-1].At.D())
			case s.Fault != "" && !slices.Contains(faults, s.Fault):
				return fmt.Errorf("providers[%d].stages[%d].fault: %q is not one of %s", i, j, s.Fault, strings.Join(faults, ", "))
			case s.Fault != "" && s.AvgRTT == 0:
				// A faulty stage serves nothing: its latency is moot.
			case s.Permits < 0 || s.Permits > maxPermits:
				return fmt.Errorf("providers[%d].stages[%d].permits: %d is outside 0..%d", i, j, s.Permits, maxPermits)
			case s.AvgRTT <= 0:
				return fmt.Errorf("providers[%d].stages[%d].avg_rtt: must be above 0 (got %v)", i, j, s.AvgRTT.D())
			case s.AvgRTT.D() > time.Minute:
				return fmt.Errorf("providers[%d].stages[%d].avg_rtt: %v is more than a minute", i, j, s.AvgRTT.D())
			}
		}
	}
	return nil
}

// Scaled returns a copy with every time (stage starts, warm-up, duration)
// multiplied by f; latencies are unchanged. The short mode uses it.
func (sc *Scenario) Scaled(f float64) *Scenario {
	out := *sc
	out.Load.Warmup = Duration(float64(sc.Load.Warmup) * f)
	out.Load.Duration = Duration(float64(sc.Load.Duration) * f)
	out.Load.Rate = make([]RateStage, len(sc.Load.Rate))
	for i, r := range sc.Load.Rate {
		out.Load.Rate[i] = RateStage{At: Duration(float64(r.At) * f), RPS: r.RPS}
	}
	if len(out.Load.Rate) == 0 {
		out.Load.Rate = nil
	}
	out.Providers = make([]Provider, len(sc.Providers))
	for i, p := range sc.Providers {
		q := Provider{Name: p.Name, Stages: make([]Stage, len(p.Stages))}
		for j, s := range p.Stages {
			s.At = Duration(float64(s.At) * f)
			q.Stages[j] = s
		}
		out.Providers[i] = q
	}
	return &out
}

// stageAt returns p's stage in force at offset t.
func (p *Provider) stageAt(t time.Duration) Stage { return p.Stages[p.stageIndex(t)] }

// stageIndex is the index of the stage in force at offset t.
func (p *Provider) stageIndex(t time.Duration) int {
	i := 0
	for j, x := range p.Stages[1:] {
		if x.At.D() > t {
			break
		}
		i = j + 1
	}
	return i
}

// RateAt is the most successes per second the providers can complete at
// offset t with the scenario's connections: the connections fill the
// fastest providers' permits first (a balancer that never idles a permit
// and never sends to a full one).
//
// Open loop, it is the arrival rate or the permits' rate, whichever is
// less (the arrivals beyond it wait until they time out).
func (sc *Scenario) RateAt(t time.Duration) float64 {
	if sc.Load.open() {
		return min(sc.Load.rateAt(t), sc.serviceRate(t))
	}
	busy, _ := sc.fill(t)
	var rate float64
	for _, s := range busy {
		rate += s.rate()
	}
	return rate
}

// serviceRate is the most successes a second every permit busy completes
// at offset t.
func (sc *Scenario) serviceRate(t time.Duration) float64 {
	var rate float64
	for i := range sc.Providers {
		if s := sc.Providers[i].stageAt(t); s.capacity() > 0 {
			rate += held{s.capacity(), s.AvgRTT.D()}.rate()
		}
	}
	return rate
}

// held is a provider's share of the connections in fill.
type held struct {
	conns int
	rtt   time.Duration
}

func (h held) rate() float64 { return float64(h.conns) / h.rtt.Seconds() }

// fill places the connections at offset t as a balancer that never idles
// a permit and never sends to a full one would: the fastest providers'
// permits first. It returns the providers that hold some, and the
// connections left beyond every permit.
func (sc *Scenario) fill(t time.Duration) (busy []held, left int) {
	slots := make([]held, 0, len(sc.Providers))
	for i := range sc.Providers {
		s := sc.Providers[i].stageAt(t)
		slots = append(slots, held{s.capacity(), s.AvgRTT.D()}) // room for this many
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].rtt < slots[j].rtt })
	left = sc.Load.Connections
	for _, s := range slots {
		if n := min(left, s.conns); n > 0 {
			busy = append(busy, held{n, s.rtt})
			left -= n
		}
	}
	return busy, left
}

// OverloadedAt says whether at offset t the connections exceed the
// providers' permits together (open loop: the arrivals exceed the rate
// every permit busy completes).
func (sc *Scenario) OverloadedAt(t time.Duration) bool {
	if sc.Load.open() {
		return sc.Load.rateAt(t) > sc.serviceRate(t)
	}
	permits := 0
	for i := range sc.Providers {
		permits += sc.Providers[i].stageAt(t).capacity()
	}
	return sc.Load.Connections > permits
}

// changePoints lists every offset at which some provider changes stage.
func (sc *Scenario) changePoints() []time.Duration {
	var ts []time.Duration
	for _, r := range sc.Load.Rate {
		ts = append(ts, r.At.D())
	}
	for _, p := range sc.Providers {
		for _, s := range p.Stages {
			ts = append(ts, s.At.D())
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}

// segments lists the offsets after the start at which some provider
// changes stage, once each, in order: the starts of the scenario's
// segments after the first.
func (sc *Scenario) segments() []time.Duration {
	var out []time.Duration
	for _, t := range sc.changePoints() {
		if t > 0 && (len(out) == 0 || out[len(out)-1] != t) {
			out = append(out, t)
		}
	}
	return out
}

// TheoreticalMax is the most successes the measured phase can hold: RateAt
// integrated over [warmup, warmup+duration].
func (sc *Scenario) TheoreticalMax() float64 {
	from := sc.Load.Warmup.D()
	to := from + sc.Load.Duration.D()
	return sc.integrate(from, to)
}

func (sc *Scenario) integrate(from, to time.Duration) float64 {
	var total float64
	sc.spans(from, to, func(at, d time.Duration) { total += sc.RateAt(at) * d.Seconds() })
	return total
}

// spans calls f for each stretch of [from, to) in which no provider
// changes stage, with its start and length.
func (sc *Scenario) spans(from, to time.Duration, f func(at, d time.Duration)) {
	cur := from
	for _, p := range append(sc.changePoints(), to) {
		if p <= cur {
			continue
		}
		end := min(p, to)
		f(cur, end-cur)
		if cur = end; cur >= to {
			return
		}
	}
}

// MaxSeries is the theoretical rate for each whole second of the run (for
// the chart).
func (sc *Scenario) MaxSeries() []float64 {
	n := int((sc.Load.Warmup.D() + sc.Load.Duration.D() + time.Second - 1) / time.Second)
	out := make([]float64, n)
	for i := range out {
		out[i] = sc.integrate(time.Duration(i)*time.Second, time.Duration(i+1)*time.Second)
	}
	return out
}

// Queueing is what Little's law makes a balancer that refuses nothing
// pay where the connections exceed the permits (ForcedWait).
type Queueing struct {
	// MeanWait is the wait per success over the measured phase.
	MeanWait Duration `json:"mean_wait"`
	// P99 is the 99th percentile of success latency with no wait at all:
	// a sprayer's, whose excess connections bounce as refusals (errors).
	P99 Duration `json:"p99_no_wait"`
	// P99Spread is the same with the forced wait spread evenly over the
	// successes of each moment (a first-come, first-served queue).
	P99Spread Duration `json:"p99_wait_spread"`
}

// ForcedWait computes Queueing from the scenario alone. Where C
// connections exceed the providers' P permits, C-P requests are at no
// provider: a balancer that answers no request with an error holds them
// in its queue, while the permits complete X = RateAt successes a
// second, so spread evenly each request of that moment waits (C-P)/X.
// The service times are exponential (as the providers draw them), mixed
// over the measured phase by where and when successes complete (the
// fastest providers' permits first, as fill places them). No balancer
// is involved: a queue that refuses nothing pays this whatever it picks,
// the oracle's included. Concentrating the wait on fewer requests
// (newest first) leaves those few waiting for seconds, which the p99
// counts too once they exceed a percent of the successes, unless they
// are failed. Open loop, see openQueueing.
func (sc *Scenario) ForcedWait() Queueing {
	if sc.Load.open() {
		return sc.openQueueing()
	}
	var parts []waitPart
	var waited, served float64
	from := sc.Load.Warmup.D()
	sc.spans(from, from+sc.Load.Duration.D(), func(at, d time.Duration) {
		busy, left := sc.fill(at)
		var x float64 // successes a second
		for _, h := range busy {
			x += h.rate()
		}
		for _, h := range busy {
			parts = append(parts, waitPart{weight: h.rate() * d.Seconds(), wait: float64(left) / x, mean: h.rtt.Seconds()})
		}
		waited += float64(left) * d.Seconds()
		served += x * d.Seconds()
	})
	return queueing(parts, waited, served)
}

// waitPart is a share of the successes: how many, the wait each had
// before a permit, and the mean of their exponential service time (s).
type waitPart struct{ weight, wait, mean float64 }

// openQueueing is ForcedWait open loop, where arrivals are random and a
// spike past the rate every permit completes builds a queue that drains
// after it: no closed form fits, so it simulates the queue the oracle
// would keep. Poisson arrivals at the scenario's rates; each takes a
// free permit, the fastest provider's first, or waits first come, first
// served; a waiter still waiting at the load's timeout leaves (an
// error), as does a success that would end past it. Service is
// exponential with the provider's mean. P99 is the successes' service
// alone (a sprayer's, whose excess bounces), P99Spread their whole
// latency. Pooled over simRuns fixed seeds, so a scenario gives one
// figure.
func (sc *Scenario) openQueueing() Queueing {
	const simRuns = 10
	var lat, svc []float64
	var waited float64
	for seed := range uint64(simRuns) {
		sc.simulateOpen(rand.New(rand.NewPCG(seed, 0x5eed)), func(wait, service float64) {
			lat = append(lat, wait+service)
			svc = append(svc, service)
			waited += wait
		})
	}
	if len(lat) == 0 {
		return Queueing{}
	}
	p99 := func(xs []float64) Duration {
		slices.Sort(xs)
		return Duration(time.Duration(xs[min(len(xs)-1, int(0.99*float64(len(xs))))] * float64(time.Second)))
	}
	return Queueing{
		MeanWait:  Duration(time.Duration(waited / float64(len(lat)) * float64(time.Second))),
		P99:       p99(svc),
		P99Spread: p99(lat),
	}
}

// simulateOpen runs one open-loop queue (openQueueing) and calls success
// for each request of the measured phase that succeeds, with its wait
// and service in seconds.
func (sc *Scenario) simulateOpen(rng *rand.Rand, success func(wait, service float64)) {
	from, to := sc.Load.Warmup.D().Seconds(), (sc.Load.Warmup.D() + sc.Load.Duration.D()).Seconds()
	timeout := sc.Load.timeout().Seconds()
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	busy := make([]int, len(sc.Providers))
	// order is the providers fastest first at offset t.
	order := func(t float64) []int {
		idx := make([]int, len(sc.Providers))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Compare(sc.Providers[a].stageAt(at(t)).AvgRTT, sc.Providers[b].stageAt(at(t)).AvgRTT)
		})
		return idx
	}
	var ends endHeap    // services in progress
	var queue []float64 // waiters' arrival times, oldest first
	start := func(p int, arrived, now float64) {
		mean := sc.Providers[p].stageAt(at(now)).AvgRTT.D().Seconds()
		service := rng.ExpFloat64() * mean
		busy[p]++
		heap.Push(&ends, end{now + service, p})
		if arrived >= from && now-arrived+service <= timeout {
			success(now-arrived, service)
		}
	}
	free := func(now float64) int { // a provider with a free permit, fastest first; -1: none
		for _, p := range order(now) {
			if busy[p] < sc.Providers[p].stageAt(at(now)).capacity() {
				return p
			}
		}
		return -1
	}
	// next is the next arrival after t: exponential gaps at the rate in
	// force, drawn again from a stage's start where the rate changes.
	next := func(t float64) float64 {
		for t < to {
			r := sc.Load.rateAt(at(t))
			bound := to
			for _, st := range sc.Load.Rate {
				if b := st.At.D().Seconds(); b > t && b < bound {
					bound = b
				}
			}
			if r > 0 {
				if gap := rng.ExpFloat64() / r; t+gap < bound {
					return t + gap
				}
			}
			t = bound
		}
		return math.Inf(1)
	}
	arrival := next(0)
	for arrival < to || len(ends) > 0 {
		if len(ends) > 0 && ends[0].t <= arrival {
			e := heap.Pop(&ends).(end)
			busy[e.p]--
			for len(queue) > 0 && e.t-queue[0] >= timeout {
				queue = queue[1:] // left at its timeout
			}
			if len(queue) > 0 {
				if p := free(e.t); p >= 0 {
					start(p, queue[0], e.t)
					queue = queue[1:]
				}
			}
			continue
		}
		if p := free(arrival); p >= 0 && len(queue) == 0 {
			start(p, arrival, arrival)
		} else {
			queue = append(queue, arrival)
		}
		arrival = next(arrival)
	}
}

// end is a service's end: when, and the provider whose permit it frees.
type end struct {
	t float64
	p int
}

type endHeap []end

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].t < h[j].t }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// queueing turns the successes' parts into Queueing.
func queueing(parts []waitPart, waited, served float64) Queueing {
	if served == 0 {
		return Queueing{}
	}
	// quantile finds the latency that a share q of the successes exceed
	// (bisection on the mixture's tail).
	quantile := func(q float64, withWait bool) float64 {
		tail := func(x float64) float64 {
			var above float64
			for _, p := range parts {
				w := 0.0
				if withWait {
					w = p.wait
				}
				if x < w {
					above += p.weight
				} else {
					above += p.weight * math.Exp(-(x-w)/p.mean)
				}
			}
			return above / served
		}
		lo, hi := 0.0, 1.0
		for tail(hi) > q {
			hi *= 2
		}
		for range 64 {
			mid := (lo + hi) / 2
			if tail(mid) > q {
				lo = mid
			} else {
				hi = mid
			}
		}
		return hi
	}
	sec := func(s float64) Duration { return Duration(time.Duration(s * float64(time.Second))) }
	return Queueing{
		MeanWait:  sec(waited / served),
		P99:       sec(quantile(0.01, false)),
		P99Spread: sec(quantile(0.01, true)),
	}
}
